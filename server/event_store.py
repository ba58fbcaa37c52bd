"""The event store: the queries of the log's reads, the state tables, compaction and accounts,
written once for both backends (``server/db.py``); the write path is ``server/appender.py`` (its
SQL in ``server/append_sql.py``). The guarantees are documented in ``server/store.py``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from server.append_sql import lock_heads
from server.appender import Appender
from server.db import Database, Param, Row, Tx, UniqueViolation, Value, integer, text
from server.migrations import MIGRATIONS
from server.state_wire import SNAPSHOT, state_json, wire_rows
from server.store import (
    Account,
    Commit,
    CompactionResult,
    CursorExpired,
    InvalidPage,
    Rejected,
    SessionInfo,
    StatePage,
    Updates,
    UsernameTaken,
)
from shared.models import (
    Chat,
    DomainEvent,
    EventResult,
    EventType,
    LoggedEvent,
    Message,
    Preset,
    Settings,
    Snapshot,
    format_time,
)
from shared.schema import CHATS, MESSAGES, PRESETS, SETTINGS, TABLES, Table

# A page of ``/sync/state`` with a next one has that next page read at once, while the client
# takes this one (a new device asks for the next page only once it has parsed this one: without
# it, the server's time for a page and the client's add up, page after page). Kept this long for
# the request that names it; at most this many at once (the oldest go first).
READ_AHEAD_SECONDS = 30.0
READ_AHEAD_PAGES = 16
AHEAD_SLICE = 1000  # rows made JSON between two turns of the event loop (~1.5 ms)
# (account, upToSeq, chatId, limit, page token)
AheadKey = tuple[str, int, str | None, int, str]


# A page of ``/sync/state`` ends at a row; the token says which: its stage, then its (last_seq,
# id). The settings and presets come first, then the chats, then the messages, each newest-written
# first (last_seq descending), so the chat list and the latest messages of the most recently
# active chats arrive first. The key is fixed for every row of the snapshot at N (a row with
# last_seq <= N changes only by leaving it, its last_seq becoming > N), so paging is complete
# and never repeats a row, whatever is written between pages.
#
# Last, the ``patched`` stage: the messages written after N whose latest change is a patch (an
# AssistantRunCancelled, an AssistantRunContinued, a QueuedMessageSent), in their current
# version, oldest-written first. The events after N only patch such a row, so a client that
# had not got it from an earlier page would have no row to patch; a patch is applied only while
# the row's status allows it, so applying it again to the row that already has it changes
# nothing. (Oldest first, so a row patched again while these pages are read moves on to a page
# still to come: none is missed.)
PATCHED = "patched"
STATE_TABLES = (SETTINGS, PRESETS, CHATS, MESSAGES)
STAGES = (*(t.name for t in STATE_TABLES), PATCHED)
PATCH_KINDS = ("patch", "keep")  # (server/validation.py, Footprint)


def encode_page(table: str, last_seq: int, after_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([table, last_seq, after_id]).encode()).decode()


def decode_page(token: str) -> tuple[str, int, str]:
    try:
        table, last_seq, after_id = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        raise InvalidPage("page is not a token this server gave out") from None
    if (
        table not in STAGES
        or not isinstance(after_id, str)
        or not isinstance(last_seq, int)
        or isinstance(last_seq, bool)
        or not 0 <= last_seq < 2**63
    ):
        raise InvalidPage("page is not a token this server gave out")
    return table, last_seq, after_id


def _split(token: tuple[str, int, str]) -> tuple[str, tuple[int, str]]:
    return token[0], (token[1], token[2])


# The messages a patch changed after a snapshot's seq (the ``patched`` stage): their latest
# change's event is a patch (joined by its seq, the log's key).
_PATCHED_FROM = f"""FROM messages AS m JOIN events AS e ON e.account_id = m.account_id AND e.seq = m.last_seq
    WHERE m.account_id = ? AND m.last_seq > ? AND e.kind IN ({", ".join(f"'{k}'" for k in PATCH_KINDS)})"""

CURSOR_WRITE_SECONDS = 30.0
LOGGED_COLUMNS = "seq, event_id, type, payload, created_at, origin"


# Events parsed lately, by their whole row: every device of an account reads each event (polls,
# and the hub's reads for live sockets), and parsing one costs ~40 us, ten times reading it. A
# logged row never changes, so an entry cannot go stale; long payloads are not kept.
PARSED_EVENTS = 1024
PARSED_PAYLOAD_CHARS = 8192


@functools.lru_cache(maxsize=PARSED_EVENTS)
def _parsed(row: Row) -> LoggedEvent:
    return LoggedEvent(
        seq=integer(row[0]),
        event_id=text(row[1]),
        type=EventType(text(row[2])),
        payload=json.loads(text(row[3])),
        created_at=text(row[4]),
        origin=text(row[5]),
    )


def _logged(row: Row) -> LoggedEvent:
    return _parsed(row) if len(text(row[3])) <= PARSED_PAYLOAD_CHARS else _parsed.__wrapped__(row)


@dataclass(frozen=True)
class _StateRows:
    """A page's rows, by stage (each table's name, and PATCHED's messages), and what it says."""

    found: dict[str, list[Row]]
    up_to_seq: int
    current_seq: int
    next_page: str | None
    total: int | None


@dataclass(frozen=True)
class StateJson:
    """A page as the JSON of its ``StateResponse``, and what the read-ahead needs of it."""

    body: bytes
    up_to_seq: int
    next_page: str | None


def _named(table: Table, rows: list[Row]) -> list[dict[str, Value]]:
    return [dict(zip(table.column_names, row, strict=True)) for row in rows]


class SqlEventStore:
    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self.db = db
        self._clock = clock
        self._appender = Appender(db, clock, lambda assistant_id: self.serves(assistant_id))
        self.on_commit: Callable[[Commit], None] = lambda commit: None  # (see EventStore.append)
        # Whether this server has an assistant (the app's configured ones): a Continue or a queued
        # message sent for one of them queues a run here (server/appender.py, ``run_of``).
        self.serves: Callable[[str], bool] = lambda assistant_id: True
        self._cursor_written: dict[tuple[str, str], datetime] = {}
        self._ahead: dict[AheadKey, tuple[float, asyncio.Future[StateJson]]] = {}  # (time.monotonic() read)
        self._reading: set[asyncio.Future[StateJson]] = set()  # pages being read ahead, kept or let go

    def _now(self) -> str:
        return format_time(self._clock())

    async def open(self) -> None:
        await self.db.open()
        await self._migrate()

    async def close(self) -> None:
        self._ahead.clear()
        # Let them end rather than cancel them (a page at most, each): none is left reading a
        # closed database in its thread.
        await asyncio.gather(*self._reading, return_exceptions=True)
        await self.db.close()

    async def _migrate(self) -> None:
        async with self.db.transaction(write=True) as tx:
            await tx.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for migration in MIGRATIONS:
            async with self.db.transaction(write=True) as tx:
                if self.db.dialect == "postgres":  # one migrating process at a time
                    await tx.execute("LOCK TABLE schema_migrations IN EXCLUSIVE MODE")
                done = await tx.fetchone("SELECT 1 FROM schema_migrations WHERE name = ?", migration.name)
                if done is not None:
                    continue
                for statement in migration.statements(self.db.dialect):
                    await tx.execute(statement)
                await tx.execute("INSERT INTO schema_migrations VALUES (?, ?)", migration.name, self._now())

    # --- the log -------------------------------------------------------------------------------

    async def _head(self, tx: Tx, account_id: str) -> tuple[int, int]:
        row = await tx.fetchone("SELECT head_seq, min_available_seq FROM logs WHERE account_id = ?", account_id)
        return (0, 1) if row is None else (integer(row[0]), integer(row[1]))

    async def append(self, account_id: str, origin: str, events: list[DomainEvent | Rejected]) -> tuple[list[EventResult], int]:
        results, current = await self._appender.append(account_id, origin, events)
        accepted = [e for e, r in zip(events, results, strict=True) if r.status == "accepted" and isinstance(e, DomainEvent)]
        if accepted:
            self.on_commit(Commit(account_id, current, accepted))
        return results, current

    async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
        async with self.db.transaction() as tx:
            head, min_available = await self._head(tx, account_id)
            if after_seq + 1 < min_available:
                raise CursorExpired(min_available, head)
            rows = await tx.fetchall(
                f"SELECT {LOGGED_COLUMNS} FROM events WHERE account_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                account_id,
                after_seq,
                limit + 1,
            )
        events = [_logged(r) for r in rows[:limit]]
        return Updates(events=events, has_more=len(rows) > limit, current_seq=head)

    async def read_state(
        self,
        account_id: str,
        up_to_seq: int | None,
        chat_id: str | None,
        limit: int,
        page: str | None,
    ) -> StatePage:
        rows = await self._read_rows(account_id, up_to_seq, chat_id, limit, page)
        messages = rows.found[MESSAGES.name] + rows.found[PATCHED]
        snapshot = Snapshot(
            chats=[Chat.model_validate(r) for r in _named(CHATS, rows.found[CHATS.name])],
            messages=[Message.model_validate(r) for r in _named(MESSAGES, messages)],
            settings=[Settings.model_validate(r) for r in _named(SETTINGS, rows.found[SETTINGS.name])],
            presets=[Preset.model_validate(r) for r in _named(PRESETS, rows.found[PRESETS.name])],
        )
        return StatePage(snapshot, rows.up_to_seq, rows.current_seq, rows.next_page, rows.total)

    async def read_state_json(
        self,
        account_id: str,
        up_to_seq: int | None,
        chat_id: str | None,
        limit: int,
        page: str | None,
    ) -> bytes:
        result = None
        if page is not None and up_to_seq is not None:
            result = await self._read_ahead_page((account_id, up_to_seq, chat_id, limit, page))
        if result is None:
            result = await self._read_state(account_id, up_to_seq, chat_id, limit, page)
        if result.next_page is not None:
            self._read_ahead((account_id, result.up_to_seq, chat_id, limit, result.next_page))
        return result.body

    def _read_ahead(self, key: AheadKey) -> None:
        """Start reading the page ``key`` names, for the request that will ask for it."""
        now = time.monotonic()
        # Pages no one asked for are let go (one still being read ends first: never cancelled
        # in its thread).
        for old in [k for k, (at, _) in self._ahead.items() if now - at > READ_AHEAD_SECONDS]:
            del self._ahead[old]
        while len(self._ahead) >= READ_AHEAD_PAGES:
            del self._ahead[next(iter(self._ahead))]
        account_id, up_to_seq, chat_id, limit, page = key
        task = asyncio.ensure_future(self._read_state(account_id, up_to_seq, chat_id, limit, page, ahead=True))
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # (its error, if any, is the request's)
        self._ahead[key] = (now, task)

    async def _read_ahead_page(self, key: AheadKey) -> StateJson | None:
        """The page read ahead for ``key``, if there is one and the log still goes back to its
        ``upToSeq``; None when it must be read now. (Its rows were read a moment earlier, as
        if the request had come then: a row changed since is also in the log after upToSeq,
        which the client reads next, so the result is the same.)"""
        ahead = self._ahead.pop(key, None)
        if ahead is None:
            return None
        try:
            result = await ahead[1]
        except Exception:  # (read again, and answer as that read does)
            return None
        async with self.db.transaction() as tx:
            _, min_available = await self._head(tx, key[0])
        if key[1] + 1 < min_available:
            return None  # (the read now answers CursorExpired)
        return result

    async def _read_state(
        self,
        account_id: str,
        up_to_seq: int | None,
        chat_id: str | None,
        limit: int,
        page: str | None,
        ahead: bool = False,
    ) -> StateJson:
        """A page as the JSON of its ``StateResponse`` (server/state_wire.py). ``ahead``: a page
        read ahead, beside the requests being answered: SQLite's statements in a thread, and the
        rows made JSON a slice at a time, so that it never holds up a response."""
        rows = await self._read_rows(account_id, up_to_seq, chat_id, limit, page, slow=ahead)
        found = {**rows.found, MESSAGES.name: rows.found[MESSAGES.name] + rows.found[PATCHED]}
        snapshot: dict[str, list[dict[str, Any]]] = {}
        for name in SNAPSHOT:
            snapshot[name] = []
            step = AHEAD_SLICE if ahead else max(len(found[name]), 1)
            for i in range(0, len(found[name]), step):
                if ahead:
                    await asyncio.sleep(0)
                snapshot[name] += wire_rows(name, found[name][i : i + step])
        body = state_json(snapshot, rows.up_to_seq, rows.current_seq, rows.next_page, rows.total)
        return StateJson(body, rows.up_to_seq, rows.next_page)

    async def _read_rows(
        self,
        account_id: str,
        up_to_seq: int | None,
        chat_id: str | None,
        limit: int,
        page: str | None,
        slow: bool = False,
    ) -> _StateRows:
        """A page's rows, each in its table's column order (``slow``: see Database.transaction)."""
        stage, after = (STAGES[0], None) if page is None else _split(decode_page(page))
        found: dict[str, list[Row]] = {name: [] for name in STAGES}
        next_page: str | None = None
        total: int | None = None
        async with self.db.transaction(slow=slow) as tx:
            head, min_available = await self._head(tx, account_id)
            n = head if up_to_seq is None else min(up_to_seq, head)
            if n + 1 < min_available:
                raise CursorExpired(min_available, head)
            if page is None:  # the first page says how many rows the snapshot holds
                total = await self._count(tx, account_id, n, chat_id)
            remaining = limit
            for name in STAGES[STAGES.index(stage) :]:
                start = after if name == stage else None
                if name == PATCHED:
                    rows = await self._patched(tx, account_id, n, chat_id, start, remaining + 1)
                else:
                    rows = await self._rows(tx, TABLES[name], account_id, n, chat_id, start, remaining + 1)
                if len(rows) > remaining:
                    rows = rows[:remaining]
                    if rows:
                        columns = MESSAGES.column_names if name == PATCHED else TABLES[name].column_names
                        last = rows[-1]
                        next_page = encode_page(name, integer(last[columns.index("last_seq")]), text(last[0]))
                    elif start is not None:
                        next_page = encode_page(name, *start)
                    else:  # no room left on this page for this stage: it starts the next one
                        next_page = encode_page(name, n if name == PATCHED else n + 1, "")
                found[name] = rows
                remaining -= len(rows)
                if next_page is not None:
                    break
        return _StateRows(found, n, head, next_page, total)

    @staticmethod
    def _mine(table: Table, chat_id: str | None) -> str:
        """The condition that keeps a table's rows to one chat's ("" for every chat)."""
        if chat_id is None:
            return ""
        return " AND id = ?" if table is CHATS else " AND chat_id = ?"

    @staticmethod
    async def _count(tx: Tx, account_id: str, up_to_seq: int, chat_id: str | None) -> int:
        total = 0
        params: list[Param] = [account_id, up_to_seq]
        if chat_id is not None:
            params.append(chat_id)
        for table in STATE_TABLES:
            if chat_id is not None and table in (SETTINGS, PRESETS):
                continue  # (no chat's)
            where = "account_id = ? AND last_seq <= ?" + SqlEventStore._mine(table, chat_id)
            row = await tx.fetchone(f"SELECT count(*) FROM {table.name} WHERE {where}", *params)
            total += integer(row[0]) if row is not None else 0
        row = await tx.fetchone(f"SELECT count(*) {_PATCHED_FROM}{' AND m.chat_id = ?' if chat_id else ''}", *params)
        return total + (integer(row[0]) if row is not None else 0)

    @staticmethod
    async def _rows(
        tx: Tx,
        table: Table,
        account_id: str,
        up_to_seq: int,
        chat_id: str | None,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[Row]:
        """Rows of the snapshot at ``up_to_seq`` after the key ``after`` (last_seq, id),
        in descending order of that key (the index on (account_id, last_seq) serves it)."""
        if chat_id is not None and table in (SETTINGS, PRESETS):
            return []  # (one chat's state holds no account's rows)
        # The range starts at the last row sent (not at up_to_seq, with the rows before it left
        # out one by one: that made each page cost as much as every page before it).
        where = "account_id = ? AND last_seq <= ?"
        params: list[Param] = [account_id, up_to_seq if after is None else min(up_to_seq, after[0])]
        if after is not None:
            where += " AND (last_seq < ? OR id < ?)"  # (last_seq <= after's: ties by id)
            params += [after[0], after[1]]
        if chat_id is not None:
            where += SqlEventStore._mine(table, chat_id)
            params.append(chat_id)
        return await tx.fetchall(
            f"SELECT {', '.join(table.column_names)} FROM {table.name} WHERE {where} ORDER BY last_seq DESC, id DESC LIMIT ?",
            *params,
            limit,
        )

    @staticmethod
    async def _patched(
        tx: Tx, account_id: str, up_to_seq: int, chat_id: str | None, after: tuple[int, str] | None, limit: int
    ) -> list[Row]:
        """The messages written after ``up_to_seq`` whose latest change is a patch, after the key
        ``after`` (last_seq, id), in ascending order of that key (see ``PATCHED``)."""
        where = ""
        params: list[Param] = [account_id, up_to_seq]
        if chat_id is not None:
            where += " AND m.chat_id = ?"
            params.append(chat_id)
        if after is not None:
            where += " AND (m.last_seq > ? OR (m.last_seq = ? AND m.id > ?))"
            params += [after[0], after[0], after[1]]
        return await tx.fetchall(
            f"SELECT {', '.join('m.' + c for c in MESSAGES.column_names)} {_PATCHED_FROM}{where} ORDER BY m.last_seq, m.id LIMIT ?",
            *params,
            limit,
        )

    async def current_seq(self, account_id: str) -> int:
        row = await self.db.read_one("SELECT head_seq FROM logs WHERE account_id = ?", account_id)
        return 0 if row is None else integer(row[0])

    async def min_available_seq(self, account_id: str) -> int:
        row = await self.db.read_one("SELECT min_available_seq FROM logs WHERE account_id = ?", account_id)
        return 1 if row is None else integer(row[0])

    # --- compaction ----------------------------------------------------------------------------

    async def compact(self, account_id: str, retention_seconds: float, grace_seconds: float) -> CompactionResult:
        """One pass over an account's log (docs/protocol.md, "Deliberate differences from the seed", 3).

        1. Superseded events older than the grace period go: a non-delete event of an entity that
           a later full event or delete replaced (but a ``keep`` event: several rows' change), or
           of a message whose chat was deleted later. Cursors stay valid: the later event carries
           the entity's state.
        2. Everything below the retention horizon goes: just above the newest event older than the
           retention window, held lower by the cursor of any device seen within that window.
           Cursors below it expire (``CursorExpired``): those clients do a full resync.
        """
        now = self._clock()
        grace_cutoff = format_time(now - timedelta(seconds=grace_seconds))
        retention_cutoff = format_time(now - timedelta(seconds=retention_seconds))
        async with self.db.transaction(write=True, slow=True) as tx:  # (a pass over the whole log)
            [(_, head, min_available)] = await lock_heads(tx, self.db.dialect, [account_id])
            before = await tx.fetchone("SELECT count(*) FROM events WHERE account_id = ?", account_id)
            # Window functions over the account's log, so the log needs no index beyond its key
            # (every index slows every append): the latest full event or delete of each entity,
            # and the latest delete of each chat.
            await tx.execute(
                """DELETE FROM events WHERE account_id = ? AND seq IN (
                    SELECT seq FROM (
                        SELECT seq, kind, entity, chat, created_at,
                            max(CASE WHEN kind IN ('full', 'delete') THEN seq END)
                                OVER (PARTITION BY entity) AS replaced_at,
                            max(CASE WHEN kind = 'delete' AND entity = chat THEN seq END)
                                OVER (PARTITION BY chat) AS chat_deleted_at
                        FROM events WHERE account_id = ?
                    ) AS log
                    WHERE kind <> 'delete' AND created_at < ?
                        AND ((kind <> 'keep' AND seq < replaced_at) OR (entity <> chat AND seq < chat_deleted_at)))""",
                account_id,
                account_id,
                grace_cutoff,
            )
            middle = await tx.fetchone("SELECT count(*) FROM events WHERE account_id = ?", account_id)
            # Just above the newest event older than the window (gaps left by superseded events
            # must not move the horizon: those events' successors are still in the log).
            last_old = await tx.fetchone(
                "SELECT max(seq) FROM events WHERE account_id = ? AND created_at < ?",
                account_id,
                retention_cutoff,
            )
            horizon = min_available if last_old is None or last_old[0] is None else int(last_old[0]) + 1
            cursor = await tx.fetchone(
                "SELECT min(last_ack_seq) FROM devices WHERE account_id = ? AND last_seen_at >= ?",
                account_id,
                retention_cutoff,
            )
            if cursor is not None and cursor[0] is not None:
                horizon = min(horizon, int(cursor[0]) + 1)
            new_min = max(min_available, horizon)
            await tx.execute("DELETE FROM events WHERE account_id = ? AND seq < ?", account_id, new_min)
            after = await tx.fetchone("SELECT count(*) FROM events WHERE account_id = ?", account_id)
            await tx.execute(
                "UPDATE logs SET min_available_seq = ?, compacted_at = ? WHERE account_id = ?",
                new_min,
                format_time(now),
                account_id,
            )
        assert before is not None and middle is not None and after is not None
        return CompactionResult(
            account_id=account_id,
            superseded_removed=integer(before[0]) - integer(middle[0]),
            truncated=integer(middle[0]) - integer(after[0]),
            min_available_seq=new_min,
        )

    async def compact_all(self, retention_seconds: float, grace_seconds: float) -> list[CompactionResult]:
        async with self.db.transaction() as tx:
            accounts = [text(r[0]) for r in await tx.fetchall("SELECT account_id FROM logs ORDER BY account_id")]
        return [await self.compact(a, retention_seconds, grace_seconds) for a in accounts]

    # --- accounts, devices and sessions --------------------------------------------------------

    async def create_account(self, account_id: str, username: str, password_hash: str) -> None:
        try:
            async with self.db.transaction(write=True) as tx:
                await tx.execute(
                    "INSERT INTO accounts (id, username, password_hash, created_at) VALUES (?, ?, ?, ?)",
                    account_id,
                    username,
                    password_hash,
                    self._now(),
                )
        except UniqueViolation:
            raise UsernameTaken(username) from None

    async def find_account(self, username: str) -> Account | None:
        row = await self.db.read_one("SELECT id, username, password_hash FROM accounts WHERE username = ?", username)
        return None if row is None else Account(text(row[0]), text(row[1]), text(row[2]))

    async def set_password_hash(self, account_id: str, password_hash: str) -> None:
        async with self.db.transaction(write=True) as tx:
            await tx.execute("UPDATE accounts SET password_hash = ? WHERE id = ?", password_hash, account_id)

    async def create_session(self, token_hash: str, account_id: str, device_id: str, device_name: str) -> None:
        now = self._now()
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                "INSERT INTO devices (account_id, id, name, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?)",
                account_id,
                device_id,
                device_name,
                now,
                now,
            )
            await tx.execute(
                "INSERT INTO sessions (token_hash, account_id, device_id, created_at) VALUES (?, ?, ?, ?)",
                token_hash,
                account_id,
                device_id,
                now,
            )

    async def find_session(self, token_hash: str) -> SessionInfo | None:
        row = await self.db.read_one("SELECT account_id, device_id FROM sessions WHERE token_hash = ?", token_hash)
        return None if row is None else SessionInfo(text(row[0]), text(row[1]))

    async def delete_session(self, token_hash: str) -> None:
        async with self.db.transaction(write=True) as tx:
            await tx.execute("DELETE FROM sessions WHERE token_hash = ?", token_hash)

    async def record_cursor(self, account_id: str, device_id: str, seq: int) -> None:
        """The device has everything up to ``seq``: compaction keeps what comes after it.

        Written at most every ``CURSOR_WRITE_SECONDS`` per device (reads would otherwise each
        cost a write); a cursor recorded a little late only keeps a few more events."""
        now = self._clock()
        key = (account_id, device_id)
        last = self._cursor_written.get(key)
        if last is not None and (now - last).total_seconds() < CURSOR_WRITE_SECONDS:
            return
        self._cursor_written[key] = now
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                "UPDATE devices SET last_seen_at = ?, last_ack_seq = ? WHERE account_id = ? AND id = ?",
                format_time(now),
                seq,
                account_id,
                device_id,
            )
