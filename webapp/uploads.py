"""The upload engine: the bytes of the attachments this device sends, to the server's blobs by tus
1.0 core (docs/protocol.md, "Attachments"), beside the event sync and never in its way.

``Uploads`` is the store's part (webapp/store.py: LocalStore) that keeps the queue: one row per
file (its SHA-256), so a file attached twice, or to two messages, is uploaded once. A row is
``waiting`` (nothing sent yet), ``uploading`` (``sent`` bytes of ``size``), ``failed`` (with a
sentence for a person, until ``retry``) or ``done``. ``UploadEngine`` works through the queue in
the order it was written, a file at a time: HEAD says how far the server is (the server's
offset, never the local count: a tab closed mid-chunk resumes from what the server has), then
one PATCH sends the rest from there (up to ``MAX_CHUNK_BYTES``, the most the server takes in one,
so a file over it goes in several), as tus-js-client sends a file by default: a request costs a
round trip, the server's fsync of its bytes and a turn of the page's busy event loop, and the
server stores a chunk as it comes, so a request cut off loses nothing it delivered. Its progress
is the transport's (in the browser, XMLHttpRequest's upload events), drawn at most every
``PROGRESS_DRAW_SECONDS``. Python decides; the ``BlobSource`` moves the bytes (in the browser,
the page's IndexedDB), a chunk at a time.

The network failing keeps a file waiting or uploading, tried again with backoff (offline is never
a failure); the server refusing the file (too large, or the bytes are not the file named) fails
it with the server's words; a 401 stops the engine (the sync engine asks for the sign-in).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from shared.models import Attachment
from webapp.database import Database
from webapp.transport import (
    BlobHashMismatch,
    BlobOffsetMismatch,
    BlobTooLarge,
    NetworkError,
    ServerError,
    Transport,
    Unauthorized,
    answered_within,
)

log = logging.getLogger(__name__)

# The most one PATCH sends (the server takes up to 64 MiB: docs/protocol.md, "Attachments").
MAX_CHUNK_BYTES = 64 * 1024 * 1024
# How long after an upload's progress moves it is drawn (the moves meanwhile drawn once): the
# page's thread draws, and on a busy machine a draw took 170 ms, which a draw per progress event
# would take from the upload; a file done, failed or waiting is drawn at once.
PROGRESS_DRAW_SECONDS = 0.25
# How long a pass of uploads waits for the changes saved before it to reach the server (a message
# before its files: UploadEngine's ``events_first``); offline, or with the server slow, it goes on.
EVENTS_FIRST_SECONDS = 5.0
# A file the server keeps refusing for another reason (a 400, a 429) is tried this many times
# (with backoff) before it fails; the network failing never counts.
MAX_ATTEMPTS = 5
# A HEAD with no answer for this long is the network's failure (tried again at the next pass); a
# PATCH's own request gives up when it goes quiet for a minute (static/files.js: send).
HEAD_SECONDS = 60.0
# 409s in a row (the server's offset moving under us: another tab uploading the same file) before
# the file is left for the next pass.
MAX_CONFLICTS = 5

WAITING, UPLOADING, FAILED, DONE = "waiting", "uploading", "failed", "done"
TO_DO = (WAITING, UPLOADING)

NOT_THE_FILE = (
    "The file on this device is not the one attached (its bytes have another SHA-256), so the "
    "server did not keep it: attach the file again."
)
GONE = "The file is no longer on this device: attach it again."


class BlobSource(Protocol):
    """Where the bytes of the files this device attached are (the page's IndexedDB)."""

    async def size(self, sha256: str) -> int | None:
        """The file's size in bytes, or None when this device does not have it."""

    async def read(self, sha256: str, offset: int, length: int) -> Chunk:
        """``length`` bytes of the file from ``offset`` (fewer only at its end)."""


@dataclass(frozen=True)
class Chunk:
    """Bytes of a file to send: ``size`` of them, in ``body`` as the source holds them and the
    transport sends them (``bytes`` under CPython; in the browser, a ``Blob`` the page sliced
    from IndexedDB, whose bytes never pass through Python: fetch sends a Blob ten times faster
    than the same bytes in an ArrayBuffer here, tests/bench/bench_attachments.py)."""

    size: int
    body: Any


@dataclass(frozen=True)
class UploadState:
    """What the UI says of an attachment this device is uploading."""

    state: str  # waiting | uploading | failed | done
    percent: int  # of the bytes sent (while a request goes, as the browser counts them; else the server's offset)
    sentence: str  # "Waiting for the connection", "Uploading 40%", "Upload failed", "Uploaded"
    error: str | None  # a failed one's reason, for a person
    size: int = 0  # the file's, in bytes


@dataclass(frozen=True)
class Queued:
    sha256: str
    size: int
    state: str
    attempts: int


class Uploads(Database):
    """The store's upload queue (webapp/store.py: LocalStore)."""

    async def enqueue_uploads(self, attachments: Iterable[Attachment], durable: bool = True) -> None:
        """Queue the files of a message this device sends (durable on return; call it before the
        message goes into the outbox, so no message waits for a file never queued: with
        ``durable`` False, the outbox's own write, next, makes both durable at once). A file
        queued already is not queued twice; one that failed or was done is tried again (a HEAD:
        a file the server has is sent no more)."""
        with self._transaction() as conn:
            for attachment in attachments:
                conn.execute(
                    """INSERT INTO uploads (sha256, size, state) VALUES (?, ?, 'waiting')
                    ON CONFLICT (sha256) DO UPDATE SET state = 'waiting', error = NULL, attempts = 0, size = excluded.size
                    WHERE uploads.state IN ('failed', 'done')""",
                    (attachment.sha256, attachment.size),
                )
        if durable:
            await self._durable()

    def upload_state(self, sha256: str) -> UploadState | None:
        """What to show of the file's upload; None when this device is not uploading it."""
        row = self.conn.execute("SELECT size, state, sent, error FROM uploads WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            return None
        size, state, sent, error = int(row["size"]), str(row["state"]), int(row["sent"]), row["error"]
        percent = 100 if state == DONE or size == 0 else min(100, sent * 100 // size)
        sentence = {
            WAITING: "Waiting for the connection",
            UPLOADING: f"Uploading {percent}%",
            FAILED: "Upload failed",
            DONE: "Uploaded",
        }[state]
        return UploadState(state, percent, sentence, None if error is None else str(error), size)

    async def retry_upload(self, sha256: str) -> bool:
        """Put a failed upload back in the queue (from nothing: its HEAD says where the server
        is); False when it had not failed."""
        with self._transaction() as conn:
            changed = conn.execute(
                "UPDATE uploads SET state = 'waiting', error = NULL, attempts = 0, sent = 0 WHERE sha256 = ? AND state = 'failed'",
                (sha256,),
            ).rowcount
        await self._durable()
        return bool(changed)

    def queued_uploads(self) -> list[Queued]:
        """The files still to upload, in the order they were queued."""
        rows = self.conn.execute(
            "SELECT sha256, size, state, attempts FROM uploads WHERE state IN ('waiting', 'uploading') ORDER BY rowid"
        )
        return [Queued(str(r[0]), int(r[1]), str(r[2]), int(r[3])) for r in rows]

    async def record_upload(
        self, sha256: str, state: str, sent: int | None = None, error: str | None = None, durable: bool = True
    ) -> None:
        """Where the file's upload stands now (durable on return, unless ``durable`` is False: a
        count of bytes sent, which the server's offset corrects after a crash, is made durable
        by the next write that is)."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE uploads SET state = ?, sent = COALESCE(?, sent), error = ? WHERE sha256 = ?",
                (state, sent, error, sha256),
            )
        if durable:
            await self._durable()

    def note_upload_sent(self, sha256: str, sent: int) -> None:
        """How many bytes of an upload under way have gone (not durable: as ``record_upload``
        with ``durable`` False)."""
        with self._transaction() as conn:
            conn.execute("UPDATE uploads SET sent = ? WHERE sha256 = ? AND state = 'uploading'", (sent, sha256))

    async def persist_uploads(self) -> None:
        """Make what ``record_upload`` wrote with ``durable`` False durable."""
        await self._durable()

    async def count_upload_attempt(self, sha256: str, error: str) -> int:
        """A refusal that may pass (see MAX_ATTEMPTS): counted, and failed at the last one.
        Returns the attempts so far."""
        with self._transaction() as conn:
            conn.execute("UPDATE uploads SET attempts = attempts + 1 WHERE sha256 = ?", (sha256,))
            conn.execute(
                "UPDATE uploads SET state = 'failed', error = ? WHERE sha256 = ? AND attempts >= ?", (error, sha256, MAX_ATTEMPTS)
            )
            row = conn.execute("SELECT attempts FROM uploads WHERE sha256 = ?", (sha256,)).fetchone()
        await self._durable()
        return 0 if row is None else int(row[0])


class UploadEngine:
    """Uploads the queue (``Uploads``) until signed out; a task of its own beside the sync
    engine's. ``kick()`` after queueing or retrying a file, and when the browser is online again
    (it skips the backoff wait). ``sleep`` waits out a backoff (tests pass one that returns at
    once); by default the wait ends early on a kick. ``events_first`` is awaited before a pass
    with files queued: the changes saved on this device reach the server first (the sync engine's
    push), a message before its files, and the upload does not take the network, the server and
    the page's thread from them (for a while at most: SyncEngine.pushed)."""

    def __init__(
        self,
        store: Uploads,
        transport: Transport,
        source: BlobSource,
        on_change: Callable[[str], None] = lambda sha256: None,
        min_backoff: float = 0.5,
        max_backoff: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        events_first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.source = source
        self._on_change = on_change
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self.head_seconds = HEAD_SECONDS
        self._sleep = sleep
        self._events_first = events_first
        self._drawing: dict[str, asyncio.TimerHandle] = {}  # progress to draw, by file
        self._sent: dict[str, int] = {}  # bytes of a file's request sent, not yet written down
        self._kick = asyncio.Event()
        self.signed_out = False

    def kick(self) -> None:
        self._kick.set()

    async def run(self) -> None:
        """Upload what is queued, then wait for more; on a failure of the network wait with
        exponential backoff and jitter (as webapp/sync.py does) and go on. Returns on a 401.
        Cancel the task to stop."""
        backoff = self._min_backoff
        while True:
            self._kick.clear()
            try:
                if self._events_first is not None and self.store.queued_uploads():
                    await self._events_first()
                settled = await self.upload_all()
            except Unauthorized:
                self.signed_out = True
                return
            except NetworkError:
                settled = False
            except Exception:  # a bug of ours must not stop uploads for good: logged, tried again later
                log.exception("uploads failed; trying again")
                settled = False
            if settled:
                backoff = self._min_backoff
                await self._kick.wait()
                continue
            delay = backoff * (0.5 + random.random() / 2)
            backoff = min(backoff * 2, self._max_backoff)
            await self._wait(delay)

    async def _wait(self, delay: float) -> None:
        if self._sleep is not None:
            await self._sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._kick.wait()

    async def upload_all(self) -> bool:
        """One pass over the queue, in order. True when nothing is left to try again now (every
        file done or failed); raises NetworkError (the rest waits for the next pass) and
        Unauthorized."""
        settled = True
        for queued in self.store.queued_uploads():
            if not await self.upload(queued):
                settled = False
        return settled

    async def upload(self, queued: Queued) -> bool:
        """Upload one file from where the server is; True once it is done or failed."""
        sha256, size = queued.sha256, queued.size
        try:
            asked = asyncio.ensure_future(answered_within(partial(self.transport.blob_offset, sha256), self.head_seconds))
            try:
                have = await self.source.size(sha256)  # (read while the server is asked)
            finally:
                progress = await asked
            if progress is not None and progress[0] == progress[1]:
                await self._record(sha256, DONE, sent=size)  # (the server has it: from another message, or device)
                return True
            offset = 0 if progress is None else progress[0]
            if have is None or have != size:
                await self._record(sha256, FAILED, error=GONE if have is None else NOT_THE_FILE)
                return True
            conflicts = 0
            while True:
                # (Not made durable: the server's offset is what counts, and after a reload its
                # HEAD is asked again. Drawn while the request goes.)
                await self._record(sha256, UPLOADING, sent=offset, durable=False, draw_later=True)
                length = min(MAX_CHUNK_BYTES, size - offset)
                chunk = await self.source.read(sha256, offset, length)
                if chunk.size != length:
                    await self._record(sha256, FAILED, error=NOT_THE_FILE)
                    return True
                def moved(sent: int, at: int = offset) -> None:
                    self._moved(sha256, at + sent)

                try:
                    answered = await self.transport.blob_append(sha256, offset, size, chunk.body, moved)
                except BlobOffsetMismatch:
                    conflicts += 1
                    if conflicts > MAX_CONFLICTS:
                        return False
                    progress = await answered_within(partial(self.transport.blob_offset, sha256), self.head_seconds)
                    offset = 0 if progress is None else progress[0]
                else:
                    conflicts = 0
                    offset = answered
                if offset >= size:
                    await self._record(sha256, DONE, sent=size, durable=False)  # (shown at once,)
                    await self.store.persist_uploads()  # (then kept)
                    return True
        except BlobHashMismatch:
            await self._record(sha256, FAILED, sent=0, error=NOT_THE_FILE)
            return True
        except BlobTooLarge as e:
            await self._record(sha256, FAILED, error=str(e))
            return True
        except ServerError as e:
            attempts = await self.store.count_upload_attempt(sha256, str(e))
            self._on_change(sha256)
            return attempts >= MAX_ATTEMPTS

    async def _record(
        self, sha256: str, state: str, sent: int | None = None, error: str | None = None, durable: bool = True,
        draw_later: bool = False,
    ) -> None:
        """Written, and drawn (``draw_later``: PROGRESS_DRAW_SECONDS later, with what else moved
        meanwhile)."""
        self._sent.pop(sha256, None)
        await self.store.record_upload(sha256, state, sent, error, durable)
        if draw_later:
            self._draw_later(sha256)
            return
        if (pending := self._drawing.pop(sha256, None)) is not None:
            pending.cancel()
        self._on_change(sha256)

    def _moved(self, sha256: str, sent: int) -> None:
        """The transport's progress: ``sent`` bytes of the file have gone (written down and
        drawn with the next draw)."""
        self._sent[sha256] = sent
        self._draw_later(sha256)

    def _draw_later(self, sha256: str) -> None:
        if sha256 not in self._drawing:
            self._drawing[sha256] = asyncio.get_running_loop().call_later(PROGRESS_DRAW_SECONDS, self._draw, sha256)

    def _draw(self, sha256: str) -> None:
        self._drawing.pop(sha256, None)
        if (sent := self._sent.pop(sha256, None)) is not None:
            self.store.note_upload_sent(sha256, sent)
        self._on_change(sha256)
