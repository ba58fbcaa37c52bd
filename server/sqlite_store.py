"""The embedded event store: one SQLite file, through sqlite-anyio.

One connection, and one asyncio lock around each transaction: SQLite has one writer anyway, so
appends serialize, commit order is seq order, and a reader never sees half a batch.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlite_anyio

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
    DomainEvent,
    EventResult,
    LoggedEvent,
    Message,
    Snapshot,
    format_time,
)
from shared.reducer import apply
from shared.schema import CHATS, MESSAGES, Sql, Table

SQL = Sql("sqlite", scoped=True)


class _Reader:
    def __init__(self, conn: sqlite_anyio.Connection, account_id: str) -> None:
        self._conn = conn
        self._account_id = account_id

    async def chat_exists(self, chat_id: str) -> bool:
        cur = await self._conn.execute(
            "SELECT 1 FROM chats WHERE account_id = ? AND id = ?", (self._account_id, chat_id)
        )
        return await cur.fetchone() is not None

    async def message_chat(self, message_id: str) -> str | None:
        cur = await self._conn.execute(
            "SELECT chat_id FROM messages WHERE account_id = ? AND id = ?",
            (self._account_id, message_id),
        )
        row = await cur.fetchone()
        return None if row is None else str(row[0])


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


class SqliteStore:
    def __init__(self, path: str, clock: Callable[[], datetime]) -> None:
        self._path = path
        self._clock = clock
        self._conn: sqlite_anyio.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        conn = await sqlite_anyio.connect(self._path)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        conn._real_connection.isolation_level = None
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
            await conn.execute(f"PRAGMA {pragma}")
        self._conn = conn
        await self._migrate()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    @asynccontextmanager
    async def _transaction(self, write: bool = False) -> AsyncIterator[sqlite_anyio.Connection]:
        if self._conn is None:
            raise RuntimeError("the store is not open")
        conn = self._conn
        async with self._lock:
            await conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                await conn.rollback()
                raise
            await conn.commit()

    async def _migrate(self) -> None:
        async with self._transaction(write=True) as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            cur = await conn.execute("SELECT name FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
        for migration in MIGRATIONS:
            if migration.name in done:
                continue
            async with self._transaction(write=True) as conn:
                for statement in migration.statements("sqlite"):
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?)",
                    (migration.name, format_time(self._clock())),
                )

    # --- the log -------------------------------------------------------------------------------

    @staticmethod
    async def _head(conn: sqlite_anyio.Connection, account_id: str) -> tuple[int, int]:
        cur = await conn.execute(
            "SELECT head_seq, min_available_seq FROM logs WHERE account_id = ?", (account_id,)
        )
        row = await cur.fetchone()
        return (0, 1) if row is None else (int(row[0]), int(row[1]))

    async def append(
        self, account_id: str, origin: str, events: list[DomainEvent | Rejected]
    ) -> tuple[list[EventResult], int]:
        results: list[EventResult] = []
        async with self._transaction(write=True) as conn:
            await conn.execute(
                "INSERT INTO logs (account_id) VALUES (?) ON CONFLICT (account_id) DO NOTHING",
                (account_id,),
            )
            head, _ = await self._head(conn, account_id)
            reader = _Reader(conn, account_id)
            now = format_time(self._clock())
            for event in events:
                cur = await conn.execute(
                    "SELECT seq FROM event_ids WHERE account_id = ? AND event_id = ?",
                    (account_id, event.event_id),
                )
                row = await cur.fetchone()
                if row is not None:
                    results.append(EventResult(event_id=event.event_id, status="duplicate", seq=row[0]))
                    continue
                if isinstance(event, Rejected):
                    error: str | None = event.error
                else:
                    error = await validation_error(event, reader)
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
                await self._log(conn, account_id, logged)
                results.append(EventResult(event_id=event.event_id, status="accepted", seq=head))
            await conn.execute(
                "UPDATE logs SET head_seq = ? WHERE account_id = ?", (head, account_id)
            )
        return results, head

    async def _log(self, conn: sqlite_anyio.Connection, account_id: str, event: LoggedEvent) -> None:
        await conn.execute(
            "INSERT INTO events (account_id, seq, event_id, type, payload, created_at, origin)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                account_id,
                event.seq,
                event.event_id,
                str(event.type),
                json.dumps(event.payload.wire()),
                event.created_at,
                event.origin,
            ),
        )
        await conn.execute(
            "INSERT INTO event_ids (account_id, event_id, seq) VALUES (?, ?, ?)",
            (account_id, event.event_id, event.seq),
        )
        for mutation in apply(event):
            sql, params = SQL.mutation(mutation, account_id)
            await conn.execute(sql, params)

    async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
        async with self._transaction() as conn:
            head, min_available = await self._head(conn, account_id)
            if after_seq + 1 < min_available:
                raise CursorExpired(min_available, head)
            cur = await conn.execute(
                "SELECT seq, event_id, type, payload, created_at, origin FROM events"
                " WHERE account_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (account_id, after_seq, limit + 1),
            )
            rows = await cur.fetchall()
        events = [
            LoggedEvent(
                seq=r[0], event_id=r[1], type=r[2], payload=json.loads(r[3]), created_at=r[4], origin=r[5]
            )
            for r in rows[:limit]
        ]
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
        async with self._transaction() as conn:
            head, min_available = await self._head(conn, account_id)
            n = head if up_to_seq is None else min(up_to_seq, head)
            if n + 1 < min_available:
                raise CursorExpired(min_available, head)
            chats: list[Chat] = []
            messages: list[Message] = []
            next_page: str | None = None
            remaining = limit
            for table in (CHATS, MESSAGES):
                if table_name == "messages" and table is CHATS:
                    continue
                start = after_id if table.name == table_name else ""
                rows = await self._rows(conn, table, account_id, n, chat_id, start, remaining + 1)
                if len(rows) > remaining:
                    rows = rows[:remaining]
                    next_page = encode_page(table.name, rows[-1]["id"]) if rows else encode_page(table.name, start)
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
        conn: sqlite_anyio.Connection,
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
        cur = await conn.execute(
            f"SELECT {', '.join(cols)} FROM {table.name} WHERE {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        return [dict(zip(cols, row)) for row in await cur.fetchall()]

    async def current_seq(self, account_id: str) -> int:
        async with self._transaction() as conn:
            head, _ = await self._head(conn, account_id)
        return head

    # --- accounts and sessions -----------------------------------------------------------------

    async def create_account(self, account_id: str, username: str, password_hash: str) -> None:
        try:
            async with self._transaction(write=True) as conn:
                await conn.execute(
                    "INSERT INTO accounts (id, username, password_hash, created_at) VALUES (?, ?, ?, ?)",
                    (account_id, username, password_hash, format_time(self._clock())),
                )
        except sqlite3.IntegrityError:
            raise UsernameTaken(username) from None

    async def find_account(self, username: str) -> Account | None:
        async with self._transaction() as conn:
            cur = await conn.execute(
                "SELECT id, username, password_hash FROM accounts WHERE username = ?", (username,)
            )
            row = await cur.fetchone()
        return None if row is None else Account(*row)

    async def create_session(
        self, token_hash: str, account_id: str, device_id: str, device_name: str
    ) -> None:
        now = format_time(self._clock())
        async with self._transaction(write=True) as conn:
            await conn.execute(
                "INSERT INTO devices (account_id, id, name, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?)",
                (account_id, device_id, device_name, now, now),
            )
            await conn.execute(
                "INSERT INTO sessions (token_hash, account_id, device_id, created_at) VALUES (?, ?, ?, ?)",
                (token_hash, account_id, device_id, now),
            )

    async def find_session(self, token_hash: str) -> SessionInfo | None:
        async with self._transaction() as conn:
            cur = await conn.execute(
                "SELECT account_id, device_id FROM sessions WHERE token_hash = ?", (token_hash,)
            )
            row = await cur.fetchone()
        return None if row is None else SessionInfo(*row)

    async def delete_session(self, token_hash: str) -> None:
        async with self._transaction(write=True) as conn:
            await conn.execute("DELETE FROM sessions WHERE token_hash = ?", (token_hash,))
