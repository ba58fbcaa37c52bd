"""``python -m server export|import --user NAME``: an account's chats (and its settings and
presets) as a file, and back
(the format and the events are ``shared/transfer.py``'s, the same as the browser's).

Both go through the code the API uses, on SQLite and PostgreSQL alike: the export is the state
``GET /sync/state`` reads, the import the append ``POST /sync/events`` makes, with its checks
(each refused event is reported, the others go in).

``export --with-files`` writes a tar instead: ``chat-export.json`` (the same JSON), then
``files/<sha256>`` for each attachment of the exported messages that the account holds.
``import`` reads either; a tar's files are restored first (each checked against its digest),
so the account holds them again before its messages name them.
"""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import BinaryIO

from pydantic import ValidationError

from server.app import opened, utc_now
from server.attachments import Attachments
from server.config import Settings
from server.event_store import SqlEventStore
from server.store import Account, Rejected
from server.validation import content_error
from shared.models import Chat, DomainEvent, EventResult, Message, Preset, format_time
from shared.models import Settings as SettingsRow
from shared.transfer import Export, batches, export_of, import_events

# The origin of imported events in the log (a device's id, for the events of a device).
ORIGIN = "import"
# The whole state as one page: read in one transaction, so one consistent state.
EVERYTHING = 2**62

# Exit statuses besides 0 (done).
UNKNOWN_USER, NOT_AN_EXPORT, SOME_REJECTED = 1, 2, 3
# The members of an export with files.
EXPORT_MEMBER, FILES = "chat-export.json", "files/"


async def export_account(settings: Settings, username: str, out: BinaryIO, with_files: bool = False) -> int:
    """Write the account's current state to ``out`` as an export (JSON, one line), or with
    ``with_files`` as a tar holding it and the attachments' files."""
    async with _opened(settings, username, "export") as (store, attachments, account):
        if account is None:
            return UNKNOWN_USER
        page = await store.read_state(account.id, None, None, EVERYTHING, None)
        assert page.next_page is None
        snapshot = page.snapshot
        export = export_of(snapshot.chats, snapshot.messages, format_time(utc_now()), snapshot.settings, snapshot.presets)
        text = (export.model_dump_json(by_alias=True) + "\n").encode()
        files = 0
        if not with_files:
            out.write(text)
        else:
            held = await attachments.held(account.id)
            wanted = sorted({a.sha256 for m in export.messages for a in m.attachments if a.sha256 in held})
            with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                _add(tar, EXPORT_MEMBER, text)
                for sha256 in wanted:  # (one file in memory at a time: at most --max-file-bytes)
                    data = await attachments.bytes_of(account.id, sha256)
                    if data is not None:
                        _add(tar, FILES + sha256, data)
                        files += 1
    out.flush()
    also = f", {files} files" if with_files else ""
    print(f"exported {len(export.chats)} chats, {len(export.messages)} messages{_more(export)}{also} of {username}", file=sys.stderr)
    return 0


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(utc_now().timestamp())
    tar.addfile(info, io.BytesIO(data))


def _read_tar(raw: bytes) -> tuple[bytes, dict[str, bytes]]:
    """The export's JSON and its files by digest (ValueError: not an export with files)."""
    text: bytes | None = None
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is None:
                    continue
                if member.name == EXPORT_MEMBER:
                    text = handle.read()
                elif member.name.startswith(FILES):
                    files[member.name.removeprefix(FILES)] = handle.read()
    except tarfile.TarError as e:
        raise ValueError(f"the tar cannot be read: {e}") from None
    if text is None:
        raise ValueError(f"the tar holds no {EXPORT_MEMBER}")
    return text, files


async def import_account(settings: Settings, username: str, source: BinaryIO) -> int:
    """Add the chats and messages of the export read from ``source`` to the account."""
    if source.isatty():
        print("cannot import: give the file on standard input (python -m server import ... < FILE)", file=sys.stderr)
        return NOT_AN_EXPORT
    raw = source.read()
    files: dict[str, bytes] = {}
    try:
        if raw[257:262] == b"ustar":  # (a tar: python -m server export --with-files)
            raw, files = _read_tar(raw)
        export = Export.model_validate_json(raw)
    except (ValidationError, ValueError) as e:
        problems = _problems(e) if isinstance(e, ValidationError) else str(e)
        print(f"cannot import: this is not a chat export (python -m server export writes one): {problems}", file=sys.stderr)
        return NOT_AN_EXPORT
    async with _opened(settings, username, "import") as (store, attachments, account):
        if account is None:
            return UNKNOWN_USER
        # (the settings come first in the state: one row is enough to know)
        has_settings = bool((await store.read_state(account.id, None, None, 1, None)).snapshot.settings)
        events = import_events(export, format_time(utc_now()), has_settings)
        restored = 0
        for sha256, data in sorted(files.items()):
            if await _restored(attachments, account.id, sha256, data):
                restored += 1
        if files:
            print(f"restored {restored} of {len(files)} files", file=sys.stderr)
        checked = [_checked(event, settings.max_content_chars) for event in events]
        results: list[EventResult] = []
        for batch in batches(checked, settings.max_batch_events):  # one transaction each, in order
            done, _ = await store.append(account.id, ORIGIN, batch)
            results += done
    return _report(export, events, results)


async def _restored(attachments: Attachments, account_id: str, sha256: str, data: bytes) -> bool:
    try:
        if await attachments.restore(account_id, sha256, data):
            return True
    except ValueError:  # (a name that is not a digest)
        pass
    print(f"skipped the file {sha256[:80]!r}: its bytes are not the file of that SHA-256", file=sys.stderr)
    return False


@asynccontextmanager
async def _opened(
    settings: Settings, username: str, doing: str
) -> AsyncIterator[tuple[SqlEventStore, Attachments, Account | None]]:
    """The store and the attachments, open, and the account (None, said on stderr, when there is none)."""
    async with opened(settings) as (store, attachments):
        account = await store.find_account(username)
        if account is None:
            print(f"cannot {doing}: there is no account {username!r} (python -m server add-user creates one)", file=sys.stderr)
        yield store, attachments, account


def _checked(event: DomainEvent, max_content_chars: int) -> DomainEvent | Rejected:
    error = content_error(event, max_content_chars)
    return event if error is None else Rejected(event.event_id, error)


def _report(export: Export, events: list[DomainEvent], results: list[EventResult]) -> int:
    """The summary on stderr (and each refused event); the exit status."""
    accepted = {"chats": 0, "messages": 0, "presets": 0, "settings": 0}
    duplicates = rejected = 0
    for event, result in zip(events, results, strict=True):
        noun = _NOUNS.get(type(event.payload), "message")
        if result.status == "accepted":
            accepted[noun + "s" if noun != "settings" else noun] += 1
        elif result.status == "duplicate":
            duplicates += 1
        else:
            rejected += 1
            print(f"rejected {noun} {event.entity_id()}: {result.error}", file=sys.stderr)
    skipped = len({m.id for m in export.messages}) - sum(isinstance(e.payload, Message) for e in events)
    if skipped:
        print(f"skipped {skipped} messages whose chat is not in the file", file=sys.stderr)
    more = ""
    if export.presets or export.settings:
        more = f", {accepted['presets']} presets" + (", the settings" if accepted["settings"] else "")
    print(
        f"imported {accepted['chats']} chats, {accepted['messages']} messages{more}"
        f" ({duplicates} duplicates, {rejected} rejected)",
        file=sys.stderr,
    )
    return SOME_REJECTED if rejected else 0


_NOUNS: dict[type, str] = {Chat: "chat", Message: "message", Preset: "preset", SettingsRow: "settings"}


def _more(export: Export) -> str:
    """The presets and settings an export holds, when it holds any, for its summary."""
    if not export.presets and not export.settings:
        return ""
    return f", {len(export.presets)} presets" + (", the settings" if export.settings else "")


def _problems(error: ValidationError, most: int = 3) -> str:
    """The first few of a file's problems, each where it is and what is wrong."""
    items = error.errors()
    parts = [f"{'.'.join(str(p) for p in item['loc']) or 'the file'}: {item['msg']}" for item in items[:most]]
    more = f" (and {len(items) - most} more)" if len(items) > most else ""
    return "; ".join(parts) + more
