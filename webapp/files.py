"""Attachments on this device: a file attached in the composer, and the files messages carry.

A file is attached in four steps, Python deciding and the page moving the bytes (static/files.js,
``FilesHost``): the page holds the picked, dropped or pasted ``File`` under a token (its chip
shows at once, ``Held``); the page hashes it in a worker, a slice at a time as it reads it
(SHA-256: the attachment's id), so no second copy of it is ever in memory (should the worker
fail, Python reads and hashes it a slice at a time itself); the page keeps the bytes in its
IndexedDB under that hash, durably, before anything refers to them; then the reference
(``Attachment``: hash, name, type, size, an image's size in pixels) joins the chat's draft
(webapp/store.py: draft_files), which a reload or a killed browser keeps. Sending the message
takes the draft's files with it and queues their upload (webapp/uploads.py) before the message
is in the outbox.

A file a message carries is shown from this device's IndexedDB when it has it; otherwise the
page fetches it from the server once, and keeps it (so it stays viewable offline). ``Files``
remembers, for this page's life, what the page said of each: an object URL to show, or why
there is none (the server does not have it yet, or the device is offline).

The HTML of attachments (the composer's chips, a message's files) is here too: pure, values in,
strings out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Protocol

from shared.models import Attachment
from webapp.uploads import UploadState

log = logging.getLogger(__name__)

SLICE_BYTES = 1024 * 1024  # read and hashed at a time here, if the page cannot hash (a short task)
DEFAULT_MAX_FILE_BYTES = 20 * 1024 * 1024  # the server's default (until it has said its own)
MAX_FILES = 32  # per message (shared/models.py: MAX_ATTACHMENTS)

ELSEWHERE = "Still on the device that sent it"
OFFLINE = "Not on this device yet: shown once online"


class FilesHost(Protocol):
    """The page's side (static/files.js)."""

    async def digest(self, token: str) -> str:
        """The SHA-256 (hex) of the file held under ``token``, hashed by the page off its
        thread as it reads it (static/hash-worker.js). Raises when the page cannot."""

    async def slice(self, token: str, start: int, end: int) -> bytes:
        """Bytes start..end of the file held under ``token`` (Python hashes it so when the page
        cannot)."""

    async def keep(self, token: str, sha256: str) -> None:
        """Store the held file in IndexedDB under ``sha256``, durably."""

    async def image_size(self, token: str) -> tuple[int, int] | None:
        """An image's width and height in pixels; None when the file is not an image we show."""

    def held_url(self, token: str, sha256: str) -> str:
        """An object URL of the held file (for its chip and its message)."""

    def preview_url(self, token: str) -> str:
        """An object URL of the held file before it is hashed (the same one ``held_url`` gives
        then): its chip shows at once."""

    def release(self, token: str) -> None:
        """The page may let go of the held file."""

    async def clear(self) -> None:
        """Remove every kept file (the account's copy on this device is being removed)."""

    async def want(self, sha256: str) -> tuple[str | None, str | None]:
        """An object URL of the stored file (fetched from the server and kept first, if this
        device does not have it), or None and why: "missing" (the server does not have it) or
        "offline"."""

    async def file_bytes(self, sha256: str, most: int | None) -> bytes | None:
        """The bytes of a kept file (with ``most``: no more than its first ``most``), fetched
        from the server and kept first if this device does not have it, for a model on this
        device; None when they cannot be had."""

    async def export(self, filename: str, text: str, digests: list[str]) -> list[str]:
        """Offer an export with files to save: a tar of ``text`` (``chat-export.json``) and the
        files named (``files/<sha256>``), as ``python -m server export --with-files`` writes it,
        each from this device, or fetched from the server and kept; the digests left out."""


@dataclass(frozen=True)
class Shown:
    """What this page can show of a file: ``url``, or ``note`` saying why not."""

    url: str | None = None
    note: str | None = None


@dataclass(frozen=True, eq=False)
class Held:
    """A file the page holds, being hashed and kept: its chip shows meanwhile (an image from
    ``url``, the held file itself)."""

    token: str
    name: str
    mime: str
    size: int
    url: str | None


class TooLarge(Exception):
    pass


class Files:
    """This page's attachments: attaching, and what each file shows."""

    def __init__(self, host: FilesHost | None, on_change: Callable[[], None]) -> None:
        self.host = host
        self._on_change = on_change
        self.shown: dict[str, Shown] = {}
        self._wanted: set[str] = set()
        self.max_file_bytes = DEFAULT_MAX_FILE_BYTES
        # How many more bytes the account may upload, as the server last said (None: never
        # heard; nothing is refused for it then). The server's 413 is the real guard.
        self.account_free: int | None = None

    def pending(self, token: str, name: str, mime: str, size: int) -> Held:
        """A file just picked, dropped or pasted, as its chip shows it until it is attached."""
        url = self.host.preview_url(token) if self.host is not None and mime.startswith("image/") else None
        return Held(token, name[:255] or "file", mime, size, url)

    def let_go(self, held: Held) -> None:
        if self.host is not None:
            self.host.release(held.token)

    async def attach(self, token: str, name: str, mime: str, size: int, room: int | None = None) -> Attachment:
        """Hash the held file, keep it in IndexedDB, and return its reference. Raises TooLarge
        (with the sentence to show) over the largest file, or over ``room`` (what the account
        may still upload, less what this device has not uploaded yet), before anything is stored."""
        host = self.host
        assert host is not None
        if size > self.max_file_bytes:
            host.release(token)
            raise TooLarge(self.refusal(name, size))
        if room is not None and size > room:
            host.release(token)
            raise TooLarge(room_refusal(name, size, room))
        try:
            sha256 = await host.digest(token)
        except Exception:  # (the page's worker could not: hashed here, a slice at a time)
            sha256 = await self._hashed_here(token, size)
        await host.keep(token, sha256)
        dims = await host.image_size(token) if mime.startswith("image/") else None
        self.shown[sha256] = Shown(url=host.held_url(token, sha256))
        host.release(token)
        width, height = dims if dims is not None else (None, None)
        return Attachment(sha256=sha256, name=name[:255] or "file", mime=mime[:255] or "application/octet-stream",
                          size=size, width=width, height=height)  # fmt: skip

    def refusal(self, name: str, size: int) -> str:
        """Why a file over the largest the server takes is not attached."""
        return f"{name} is {size_text(size)}: the largest file the server takes is {size_text(self.max_file_bytes)}."

    async def read(self, sha256: str, most: int | None = None) -> bytes | None:
        """A file's bytes (``most``: its first ``most``), for a model on this device
        (shared/prompt.py); None when they cannot be had (the page's storage failing counts)."""
        if self.host is None:
            return None
        try:
            return await self.host.file_bytes(sha256, most)
        except Exception:
            log.exception("a file could not be read for a model on this device")
            return None

    async def clear(self) -> None:
        """Remove every file kept on this device (its account's copy is being removed or
        replaced by another account's), and forget what was shown of them."""
        if self.host is not None:
            await self.host.clear()
        self.shown.clear()

    async def _hashed_here(self, token: str, size: int) -> str:
        assert self.host is not None
        digest = hashlib.sha256()
        for start in range(0, size, SLICE_BYTES):
            digest.update(await self.host.slice(token, start, min(size, start + SLICE_BYTES)))
            await asyncio.sleep(0)  # (the page draws between slices)
        return digest.hexdigest()

    def show(self, sha256: str) -> Shown:
        """What to draw for the file now; asks the page for it the first time (drawn again when
        it answers)."""
        shown = self.shown.get(sha256)
        if shown is not None and shown.note != OFFLINE:
            return shown
        if self.host is not None and sha256 not in self._wanted:
            self._wanted.add(sha256)
            asyncio.ensure_future(self._want(sha256))
        return shown or Shown()

    def online(self) -> None:
        """Online again: what could not be fetched offline is asked for again at the next draw."""
        if any(s.note == OFFLINE for s in self.shown.values()):
            self._on_change()

    async def _want(self, sha256: str) -> None:
        assert self.host is not None
        try:
            url, why = await self.host.want(sha256)
        except Exception:  # (the page's storage failing: shown as not here, asked again later)
            url, why = None, "offline"
        finally:
            self._wanted.discard(sha256)
        self.shown[sha256] = Shown(url=url) if url else Shown(note=ELSEWHERE if why == "missing" else OFFLINE)
        self._on_change()


# --- HTML ------------------------------------------------------------------------------------------


def size_text(size: int) -> str:
    """A size in bytes as a person reads it (binary units, as the limits are set): 812 bytes,
    14 KB, 3.2 MB, 20 MB."""
    if size < 1024:
        return f"{size} bytes"
    value, unit = size / 1024, "KB"
    for bigger in ("MB", "GB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def room_refusal(name: str, size: int, room: int) -> str:
    """Why a file over what the account may still upload is not attached (static/early-files.js
    says the same)."""
    left = f"only {size_text(room)}" if room > 0 else "no room"
    return f"{name} is {size_text(size)}: this account has {left} left on the server for files (counting those not uploaded yet)."


def any_image(attachments: list[Attachment]) -> bool:
    """Whether an assistant that does not read images would miss some of these."""
    return any(a.mime.startswith("image/") for a in attachments)


def is_image(attachment: Attachment) -> bool:
    return attachment.mime.startswith("image/") and attachment.width is not None


def _picture(attachment: Attachment, shown: Shown) -> str:
    name = escape(attachment.name)
    size = f' width="{attachment.width}" height="{attachment.height}"' if attachment.width and attachment.height else ""
    src = f' src="{escape(shown.url)}"' if shown.url else ""
    return f'<img alt="{name}"{size}{src}>'


def composer_files(
    attachments: list[Attachment], files: Files, refused: list[str], image_note: str | None = None, attaching: list[Held] | None = None
) -> str:
    """The chips of the files attached in the composer, each with Remove NAME; those still being
    attached (``attaching``: hashed and kept), shown as they are meanwhile; the files refused,
    each with why; and, when there are images, ``image_note`` (why the chosen assistant will not
    see them), before anything is sent."""
    chips = []
    for a in attachments:
        shown = files.show(a.sha256)
        thumb = f'<span class="thumb">{_picture(a, shown)}</span>' if is_image(a) else ""
        chips.append(  # (with its reference: a Send before Python is up carries it, static/early-files.js)
            f'<li class="chip" data-attachment="{escape(a.model_dump_json())}">{thumb}<span class="name">{escape(a.name)}</span> '
            f'<span class="size">{size_text(a.size)}</span>'
            f'<button type="button" class="remove" data-action="remove-file" data-sha256="{a.sha256}" '
            f'aria-label="Remove {escape(a.name)}" title="Remove">×</button></li>'
        )
    for held in attaching or []:
        name = escape(held.name)
        src = f' src="{escape(held.url)}"' if held.url else ""
        thumb = f'<span class="thumb"><img alt="{name}"{src}></span>' if held.url else ""
        chips.append(
            f'<li class="chip attaching">{thumb}<span class="name">{name}</span> <span class="size">{size_text(held.size)}</span>'
            f' <span class="note">Attaching…</span></li>'
        )
    chips += [f'<li class="chip refused" role="alert">{escape(reason)}</li>' for reason in refused]
    if image_note and any_image(attachments):
        chips.append(f'<li class="chip warning" role="status">{escape(image_note)}</li>')
    return "".join(chips)


def message_files(attachments: tuple[Attachment, ...], files: Files, uploads: dict[str, UploadState]) -> str:
    """A message's files: images as thumbnails (a button opens one at full size), others as a
    chip with Download NAME; each with where its upload stands, on the device that sends it."""
    if not attachments:
        return ""
    items = []
    for a in attachments:
        shown = files.show(a.sha256)
        name = escape(a.name)
        state = _upload_state(a, uploads.get(a.sha256))
        note = f'<span class="note">{escape(shown.note)}</span>' if shown.note and state == "" else ""
        if is_image(a):
            body = (
                f'<button type="button" class="thumb" data-action="view-image" data-sha256="{a.sha256}" '
                f'aria-label="Open {name}"{"" if shown.url else " disabled"}>{_picture(a, shown)}</button>'
            )
        else:
            download = (
                f'<a class="download" href="{escape(shown.url)}" download="{name}" aria-label="Download {name}">Download</a>'
                if shown.url
                else ""
            )
            body = f'<span class="name">{name}</span> <span class="size">{size_text(a.size)}</span> {download}'
        items.append(f'<li class="file{" image" if is_image(a) else ""}">{body}{state}{note}</li>')
    return f'<ul class="files" aria-label="Attachments">{"".join(items)}</ul>'


def _upload_state(attachment: Attachment, upload: UploadState | None) -> str:
    if upload is None or upload.state == "done":
        return ""
    retry = ""
    if upload.state == "failed":
        retry = (
            f' <button type="button" class="act" data-action="retry-upload" data-sha256="{attachment.sha256}">Retry upload</button>'
        )
    why = f": {upload.error}" if upload.error else ""
    return f'<span class="upload" data-upload="{upload.state}">{escape(upload.sentence + why)}{retry}</span>'
