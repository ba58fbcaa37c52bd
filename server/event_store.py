"""The event store: every query of the log, the state tables, compaction and accounts, written
once for both backends (``server/db.py``). The guarantees are documented in ``server/store.py``.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from server.db import Database, Tx, UniqueViolation
from server.migrations import MIGRATIONS
from server.store import (
    Account,
    CursorExpired,
    InvalidPage,
    Rejected,
    SessionInfo,
    StatePage,
    Updates,
    UsernameTaken,
    validation_error,
)
from shared.models import (
    Chat,
    ChatRef,
    DomainEvent,
    EventResult,
    LoggedEvent,
    Message,
    MessageRef,
    RunCancel,
    RunRequest,
    Snapshot,
    format_time,
)
from shared.reducer import apply
from shared.schema import CHATS, MESSAGES, Sql, Table


@dataclass(frozen=True)
class Footprint:
    """What an event touches, for compaction: ``entity`` and ``chat`` are keys such as ``c:<id>``
    (a chat) or ``m:<id>`` (a message); ``kind`` is ``full`` (the whole entity: it supersedes the
    entity's earlier events), ``delete`` (never superseded: a client that had the row needs it), or
    ``patch`` (a partial change: it supersedes nothing)."""

    entity: str
    chat: str
    kind: str


def footprint(event: DomainEvent, chat_of_message: str | None) -> Footprint:
    payload = event.payload
    if isinstance(payload, Chat):
        return Footprint(f"c:{payload.id}", f"c:{payload.id}", "full")
    if isinstance(payload, ChatRef):
        return Footprint(f"c:{payload.id}", f"c:{payload.id}", "delete")
    if isinstance(payload, Message):
        return Footprint(f"m:{payload.id}", f"c:{payload.chat_id}", "full")
    if isinstance(payload, MessageRef):
        return Footprint(f"m:{payload.id}", f"c:{payload.chat_id}", "delete")
    if isinstance(payload, RunRequest):
        return Footprint(f"m:{payload.message_id}", f"c:{payload.chat_id}", "full")
    assert isinstance(payload, RunCancel)
    return Footprint(f"m:{payload.message_id}", f"c:{chat_of_message}", "patch")


@dataclass(frozen=True)
class CompactionResult:
    account_id: str
    superseded_removed: int
    truncated: int
    min_available_seq: int


class _BatchState:
    """The state as validation sees it while a batch is appended: what one prefetch read of the
    rows the batch names returned, with the batch's own earlier events laid over it. So a batch
    costs the same few round trips whatever its length."""

    def __init__(self, chats: set[str], messages: dict[str, str]) -> None:
        self._chats = chats
        self._messages: dict[str, str | None] = dict(messages)

    async def chat_exists(self, chat_id: str) -> bool:
        return chat_id in self._chats

    async def message_chat(self, message_id: str) -> str | None:
        chat = self._messages.get(message_id)
        return chat if chat in self._chats else None  # a deleted chat took its messages

    def apply(self, event: DomainEvent) -> None:
        payload = event.payload
        if isinstance(payload, Chat):
            self._chats.add(payload.id)
        elif isinstance(payload, ChatRef):
            self._chats.discard(payload.id)
            self._messages = {m: c for m, c in self._messages.items() if c != payload.id}
        elif isinstance(payload, Message):
            self._messages[payload.id] = payload.chat_id
        elif isinstance(payload, MessageRef):
            self._messages[payload.id] = None
        elif isinstance(payload, RunRequest):
            self._messages[payload.message_id] = payload.chat_id


def _named_ids(events: list[DomainEvent]) -> tuple[set[str], set[str]]:
    """The chat ids and message ids a batch refers to."""
    chats: set[str] = set()
    messages: set[str] = set()
    for event in events:
        payload = event.payload
        if isinstance(payload, (Chat, ChatRef)):
            chats.add(payload.id)
        if isinstance(payload, (Message, MessageRef)):
            chats.add(payload.chat_id)
            messages.add(payload.id)
        if isinstance(payload, RunRequest):
            chats.add(payload.chat_id)
        if isinstance(payload, (RunRequest, RunCancel)):
            messages.add(payload.message_id)
    return chats, messages


def _marks(values: Iterable[object]) -> str:
    return ", ".join("?" for _ in values) or "NULL"


def encode_page(table: str, after_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([table, after_id]).encode()).decode()


def decode_page(token: str) -> tuple[str, str]:
    try:
        table, after_id = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        raise InvalidPage("page is not a token this server gave out") from None
    if table not in ("chats", "messages") or not isinstance(after_id, str):
        raise InvalidPage("page is not a token this server gave out")
    return table, after_id


EVENT_COLUMNS = "seq, event_id, type, payload, created_at, origin"


def _logged(row: tuple[Any, ...]) -> LoggedEvent:
    return LoggedEvent(
        seq=row[0], event_id=row[1], type=row[2], payload=json.loads(row[3]), created_at=row[4], origin=row[5]
    )


class SqlEventStore:
    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self.db = db
        self._clock = clock
        self._sql = Sql(db.dialect, scoped=True)

    def _now(self) -> str:
        return format_time(self._clock())

    async def open(self) -> None:
        await self.db.open()
        await self._migrate()

    async def close(self) -> None:
        await self.db.close()

    async def _migrate(self) -> None:
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
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
        row = await tx.fetchone(
            "SELECT head_seq, min_available_seq FROM logs WHERE account_id = ?", account_id
        )
        return (0, 1) if row is None else (int(row[0]), int(row[1]))

    @staticmethod
    async def _lock_head(tx: Tx, account_id: str) -> tuple[int, int]:
        """Create the account's log head row if need be, and lock it until commit (PostgreSQL's
        ON CONFLICT DO UPDATE takes the row lock; SQLite's write transaction is exclusive)."""
        row = await tx.fetchone(
            "INSERT INTO logs (account_id) VALUES (?) ON CONFLICT (account_id)"
            " DO UPDATE SET head_seq = logs.head_seq RETURNING head_seq, min_available_seq",
            account_id,
        )
        assert row is not None
        return int(row[0]), int(row[1])

    async def _prefetch(
        self, tx: Tx, account_id: str, events: list[DomainEvent | Rejected]
    ) -> tuple[dict[str, int], _BatchState]:
        """One read for the whole batch: the eventIds already logged, and the named rows."""
        valid = [e for e in events if isinstance(e, DomainEvent)]
        chat_ids, message_ids = _named_ids(valid)
        event_ids = {e.event_id for e in events}
        rows = await tx.fetchall(
            f"""SELECT 'e', event_id, CAST(seq AS TEXT) FROM event_ids WHERE account_id = ? AND event_id IN ({_marks(event_ids)})
            UNION ALL
            SELECT 'm', id, chat_id FROM messages WHERE account_id = ? AND id IN ({_marks(message_ids)})
            UNION ALL
            SELECT 'c', id, NULL FROM chats WHERE account_id = ? AND (id IN ({_marks(chat_ids)})
                OR id IN (SELECT chat_id FROM messages WHERE account_id = ? AND id IN ({_marks(message_ids)})))""",
            account_id,
            *event_ids,
            account_id,
            *message_ids,
            account_id,
            *chat_ids,
            account_id,
            *message_ids,
        )
        logged = {str(r[1]): int(r[2]) for r in rows if r[0] == "e"}
        messages = {str(r[1]): str(r[2]) for r in rows if r[0] == "m"}
        chats = {str(r[1]) for r in rows if r[0] == "c"}
        return logged, _BatchState(chats, messages)

    async def append(
        self, account_id: str, origin: str, events: list[DomainEvent | Rejected]
    ) -> tuple[list[EventResult], int]:
        results: list[EventResult] = []
        async with self.db.transaction(write=True) as tx:
            head, _ = await self._lock_head(tx, account_id)
            start = head
            logged_ids, state = await self._prefetch(tx, account_id, events)
            now = self._now()
            log_rows: list[tuple[Any, ...]] = []
            mutations: list[tuple[str, list[Any]]] = []
            for event in events:
                seq = logged_ids.get(event.event_id)
                if seq is not None:
                    results.append(EventResult(event_id=event.event_id, status="duplicate", seq=seq))
                    continue
                error = event.error if isinstance(event, Rejected) else await validation_error(event, state)
                if error is not None:
                    results.append(EventResult(event_id=event.event_id, status="rejected", error=error))
                    continue
                assert isinstance(event, DomainEvent)
                head += 1
                logged = LoggedEvent(
                    seq=head,
                    origin=origin,
                    event_id=event.event_id,
                    type=event.type,
                    payload=event.payload,
                    created_at=now,
                )
                chat_of_message = None
                if isinstance(event.payload, RunCancel):
                    chat_of_message = await state.message_chat(event.payload.message_id)
                where = footprint(event, chat_of_message)
                log_rows.append(
                    (account_id, head, event.event_id, str(event.type), json.dumps(event.payload.wire()),
                     now, origin, where.entity, where.chat, where.kind)
                )
                mutations += [self._sql.mutation(m, account_id) for m in apply(logged)]
                state.apply(event)
                logged_ids[event.event_id] = head
                results.append(EventResult(event_id=event.event_id, status="accepted", seq=head))
            if head != start:
                await self._write(tx, account_id, log_rows, mutations, head)
        return results, head

    @staticmethod
    async def _write(
        tx: Tx,
        account_id: str,
        log_rows: list[tuple[Any, ...]],
        mutations: list[tuple[str, list[Any]]],
        head: int,
    ) -> None:
        """The batch's writes, in order, as few statements as possible: a run of mutations with
        the same SQL (a batch of new messages, say) is one executemany."""
        await tx.executemany(
            "INSERT INTO events (account_id, seq, event_id, type, payload, created_at, origin, entity, chat, kind)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            log_rows,
        )
        await tx.executemany(
            "INSERT INTO event_ids (account_id, event_id, seq) VALUES (?, ?, ?)",
            [(account_id, row[2], row[1]) for row in log_rows],
        )
        for sql, group in itertools.groupby(mutations, key=lambda m: m[0]):
            await tx.executemany(sql, [params for _, params in group])
        await tx.execute("UPDATE logs SET head_seq = ? WHERE account_id = ?", head, account_id)

    async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
        async with self.db.transaction() as tx:
            head, min_available = await self._head(tx, account_id)
            if after_seq + 1 < min_available:
                raise CursorExpired(min_available, head)
            rows = await tx.fetchall(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE account_id = ? AND seq > ? ORDER BY seq LIMIT ?",
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
        table_name, after_id = decode_page(page) if page else ("chats", "")
        chats: list[Chat] = []
        messages: list[Message] = []
        next_page: str | None = None
        async with self.db.transaction() as tx:
            head, min_available = await self._head(tx, account_id)
            n = head if up_to_seq is None else min(up_to_seq, head)
            if n + 1 < min_available:
                raise CursorExpired(min_available, head)
            remaining = limit
            for table in (CHATS, MESSAGES):
                if table_name == "messages" and table is CHATS:
                    continue
                start = after_id if table.name == table_name else ""
                rows = await self._rows(tx, table, account_id, n, chat_id, start, remaining + 1)
                if len(rows) > remaining:
                    rows = rows[:remaining]
                    next_page = encode_page(table.name, rows[-1]["id"] if rows else start)
                if table is CHATS:
                    chats = [Chat.model_validate(r) for r in rows]
                else:
                    messages = [Message.model_validate(r) for r in rows]
                remaining -= len(rows)
                if next_page is not None:
                    break
        return StatePage(Snapshot(chats=chats, messages=messages), n, head, next_page)

    @staticmethod
    async def _rows(
        tx: Tx,
        table: Table,
        account_id: str,
        up_to_seq: int,
        chat_id: str | None,
        after_id: str,
        limit: int,
    ) -> list[dict[str, Any]]:
        where = "account_id = ? AND last_seq <= ? AND id > ?"
        params: list[Any] = [account_id, up_to_seq, after_id]
        if chat_id is not None:
            where += " AND id = ?" if table is CHATS else " AND chat_id = ?"
            params.append(chat_id)
        cols = table.column_names
        rows = await tx.fetchall(
            f"SELECT {', '.join(cols)} FROM {table.name} WHERE {where} ORDER BY id LIMIT ?", *params, limit
        )
        return [dict(zip(cols, row)) for row in rows]

    async def current_seq(self, account_id: str) -> int:
        async with self.db.transaction() as tx:
            head, _ = await self._head(tx, account_id)
        return head

    async def min_available_seq(self, account_id: str) -> int:
        async with self.db.transaction() as tx:
            _, min_available = await self._head(tx, account_id)
        return min_available

    # --- compaction ----------------------------------------------------------------------------

    async def compact(self, account_id: str, retention_seconds: float, grace_seconds: float) -> CompactionResult:
        """One pass over an account's log (PROTOCOL.md, difference 3).

        1. Superseded events older than the grace period go: a non-delete event of an entity that
           a later full event or delete replaced, or of a message whose chat was deleted later.
           Cursors stay valid: the later event carries the entity's state.
        2. Everything below the retention horizon goes: just above the newest event older than the
           retention window, held lower by the cursor of any device seen within that window.
           Cursors below it expire (``CursorExpired``): those clients do a full resync.
        """
        now = self._clock()
        grace_cutoff = format_time(now - timedelta(seconds=grace_seconds))
        retention_cutoff = format_time(now - timedelta(seconds=retention_seconds))
        async with self.db.transaction(write=True) as tx:
            head, min_available = await self._lock_head(tx, account_id)
            before = await tx.fetchone("SELECT count(*) FROM events WHERE account_id = ?", account_id)
            await tx.execute(
                """DELETE FROM events WHERE account_id = ? AND created_at < ? AND kind <> 'delete' AND (
                    EXISTS (SELECT 1 FROM events later WHERE later.account_id = events.account_id
                            AND later.entity = events.entity AND later.seq > events.seq
                            AND later.kind <> 'patch')
                    OR (events.entity <> events.chat AND EXISTS (
                            SELECT 1 FROM events later WHERE later.account_id = events.account_id
                            AND later.entity = events.chat AND later.kind = 'delete'
                            AND later.seq > events.seq)))""",
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
            superseded_removed=int(before[0]) - int(middle[0]),
            truncated=int(middle[0]) - int(after[0]),
            min_available_seq=new_min,
        )

    async def compact_all(self, retention_seconds: float, grace_seconds: float) -> list[CompactionResult]:
        async with self.db.transaction() as tx:
            accounts = [str(r[0]) for r in await tx.fetchall("SELECT account_id FROM logs ORDER BY account_id")]
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
        async with self.db.transaction() as tx:
            row = await tx.fetchone(
                "SELECT id, username, password_hash FROM accounts WHERE username = ?", username
            )
        return None if row is None else Account(*row)

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
        return None if row is None else SessionInfo(*row)

    async def delete_session(self, token_hash: str) -> None:
        async with self.db.transaction(write=True) as tx:
            await tx.execute("DELETE FROM sessions WHERE token_hash = ?", token_hash)

    async def record_cursor(self, account_id: str, device_id: str, seq: int) -> None:
        """The device has everything up to ``seq``: compaction keeps what comes after it."""
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                "UPDATE devices SET last_seen_at = ?, last_ack_seq = ? WHERE account_id = ? AND id = ?",
                self._now(),
                seq,
                account_id,
                device_id,
            )
