"""``python -m server export|import --user NAME``: an account's chats as a file, and back
(the format and the events are ``shared/transfer.py``'s, the same as the browser's).

Both go through the code the API uses, on SQLite and PostgreSQL alike: the export is the state
``GET /sync/state`` reads, the import the append ``POST /sync/events`` makes, with its checks
(each refused event is reported, the others go in).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import BinaryIO, TextIO

from pydantic import ValidationError

from server.app import open_store, utc_now
from server.config import Settings
from server.event_store import SqlEventStore
from server.store import Account, Rejected
from server.validation import content_error
from shared.models import Chat, DomainEvent, EventResult, format_time
from shared.transfer import Export, batches, export_of, import_events

# The origin of imported events in the log (a device's id, for the events of a device).
ORIGIN = "import"
# The whole state as one page: read in one transaction, so one consistent state.
EVERYTHING = 2**62

# Exit statuses besides 0 (done).
UNKNOWN_USER, NOT_AN_EXPORT, SOME_REJECTED = 1, 2, 3


async def export_account(settings: Settings, username: str, out: TextIO) -> int:
    """Write the account's current state to ``out`` as an export (JSON, one line)."""
    async with _opened(settings, username, "export") as (store, account):
        if account is None:
            return UNKNOWN_USER
        page = await store.read_state(account.id, None, None, EVERYTHING, None)
    assert page.next_page is None
    export = export_of(page.snapshot.chats, page.snapshot.messages, format_time(utc_now()))
    out.write(export.model_dump_json(by_alias=True) + "\n")
    out.flush()
    print(f"exported {len(export.chats)} chats, {len(export.messages)} messages of {username}", file=sys.stderr)
    return 0


async def import_account(settings: Settings, username: str, source: BinaryIO) -> int:
    """Add the chats and messages of the export read from ``source`` to the account."""
    if source.isatty():
        print("cannot import: give the file on standard input (python -m server import ... < FILE)", file=sys.stderr)
        return NOT_AN_EXPORT
    try:
        export = Export.model_validate_json(source.read())
    except ValidationError as e:
        print(
            f"cannot import: this is not a chat export (python -m server export writes one): {_problems(e)}",
            file=sys.stderr,
        )
        return NOT_AN_EXPORT
    events = import_events(export, format_time(utc_now()))
    async with _opened(settings, username, "import") as (store, account):
        if account is None:
            return UNKNOWN_USER
        checked = [_checked(event, settings.max_content_chars) for event in events]
        results: list[EventResult] = []
        for batch in batches(checked, settings.max_batch_events):  # one transaction each, in order
            done, _ = await store.append(account.id, ORIGIN, batch)
            results += done
    return _report(export, events, results)


@asynccontextmanager
async def _opened(settings: Settings, username: str, doing: str) -> AsyncIterator[tuple[SqlEventStore, Account | None]]:
    """The store, open, and the account (None, said on stderr, when there is none)."""
    store = open_store(settings.database_url, utc_now)
    await store.open()
    try:
        account = await store.find_account(username)
        if account is None:
            print(f"cannot {doing}: there is no account {username!r} (python -m server add-user creates one)", file=sys.stderr)
        yield store, account
    finally:
        await store.close()


def _checked(event: DomainEvent, max_content_chars: int) -> DomainEvent | Rejected:
    error = content_error(event, max_content_chars)
    return event if error is None else Rejected(event.event_id, error)


def _report(export: Export, events: list[DomainEvent], results: list[EventResult]) -> int:
    """The summary on stderr (and each refused event); the exit status."""
    accepted = {"chats": 0, "messages": 0}
    duplicates = rejected = 0
    for event, result in zip(events, results, strict=True):
        noun = "chat" if isinstance(event.payload, Chat) else "message"
        if result.status == "accepted":
            accepted[noun + "s"] += 1
        elif result.status == "duplicate":
            duplicates += 1
        else:
            rejected += 1
            print(f"rejected {noun} {event.entity_id()}: {result.error}", file=sys.stderr)
    skipped = len({m.id for m in export.messages}) - sum(not isinstance(e.payload, Chat) for e in events)
    if skipped:
        print(f"skipped {skipped} messages whose chat is not in the file", file=sys.stderr)
    print(
        f"imported {accepted['chats']} chats, {accepted['messages']} messages"
        f" ({duplicates} duplicates, {rejected} rejected)",
        file=sys.stderr,
    )
    return SOME_REJECTED if rejected else 0


def _problems(error: ValidationError, most: int = 3) -> str:
    """The first few of a file's problems, each where it is and what is wrong."""
    items = error.errors()
    parts = [f"{'.'.join(str(p) for p in item['loc']) or 'the file'}: {item['msg']}" for item in items[:most]]
    more = f" (and {len(items) - most} more)" if len(items) > most else ""
    return "; ".join(parts) + more
