"""The two database backends behind one small interface: a transaction that runs SQL.

``server/event_store.py`` holds every query; this module only knows how to open a transaction
on SQLite (sqlite-anyio, one connection) or PostgreSQL (an asyncpg pool), and translates the
drivers' errors into our own in one place. SQL is written with ``?`` placeholders; the
PostgreSQL side numbers them (``$1, $2, ...``).
"""

from __future__ import annotations

import asyncio
import functools
import re
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import sqlite_anyio

from shared.schema import Dialect


class DatabaseError(Exception):
    """Base of the database layer's own errors."""


class UniqueViolation(DatabaseError):
    """A row with this key exists already."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached or opened."""


Row = tuple[Any, ...]


class Tx(Protocol):
    async def execute(self, sql: str, *params: Any) -> None: ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    async def fetchone(self, sql: str, *params: Any) -> Row | None: ...

    async def fetchall(self, sql: str, *params: Any) -> list[Row]: ...


class Database(Protocol):
    dialect: Dialect

    async def open(self) -> None: ...

    async def close(self) -> None:
        """Safe to call twice."""

    def transaction(self, write: bool = False) -> Any:
        """``async with db.transaction(write=True) as tx: ...``; commits, or rolls back on error."""

    async def read_one(self, sql: str, *params: Any) -> Row | None:
        """One single-statement read, with no transaction around it (the cheapest round trip)."""


def open_database(url: str) -> Database:
    if url.startswith("sqlite:///"):
        return SqliteDatabase(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(url)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///path or postgresql://...")


# --- SQLite -------------------------------------------------------------------------------------


class _SqliteTx:
    def __init__(self, conn: sqlite_anyio.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, *params: Any) -> None:
        await self._conn.execute(sql, params)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        cursor = await self._conn.cursor()
        await cursor.executemany(sql, rows)

    async def fetchone(self, sql: str, *params: Any) -> Row | None:
        cursor = await self._conn.execute(sql, params)
        return await cursor.fetchone()

    async def fetchall(self, sql: str, *params: Any) -> list[Row]:
        cursor = await self._conn.execute(sql, params)
        return await cursor.fetchall()


class SqliteDatabase:
    """One connection in WAL mode; an asyncio lock makes each transaction exclusive, so appends
    are serialized (SQLite has one writer anyway) and commit order is seq order."""

    dialect: Dialect = "sqlite"

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite_anyio.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = await sqlite_anyio.connect(self._path)
        except sqlite3.Error as e:
            raise DatabaseUnavailable(f"cannot open {self._path}: {e}") from e
        conn._real_connection.isolation_level = None  # we issue BEGIN/COMMIT ourselves
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=5000"):
            await conn.execute(f"PRAGMA {pragma}")
        self._conn = conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    @asynccontextmanager
    async def transaction(self, write: bool = False) -> AsyncIterator[Tx]:
        if self._conn is None:
            raise DatabaseUnavailable("the database is not open")
        conn = self._conn
        async with self._lock:
            await conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SqliteTx(conn)
            except sqlite3.IntegrityError as e:
                await conn.rollback()
                raise UniqueViolation(str(e)) from e
            except BaseException:
                await conn.rollback()
                raise
            await conn.commit()

    async def read_one(self, sql: str, *params: Any) -> Row | None:
        async with self.transaction() as tx:
            return await tx.fetchone(sql, *params)


# --- PostgreSQL ---------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\?")


@functools.lru_cache(maxsize=1024)
def _numbered(sql: str) -> str:
    counter = iter(range(1, 10_000))
    return _PLACEHOLDER.sub(lambda _: f"${next(counter)}", sql)


class _PostgresTx:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, *params: Any) -> None:
        await self._conn.execute(_numbered(sql), *params)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if len(rows) == 1:  # asyncpg's executemany costs more than a plain execute for one row
            await self._conn.execute(_numbered(sql), *rows[0])
        elif rows:
            await self._conn.executemany(_numbered(sql), rows)

    async def fetchone(self, sql: str, *params: Any) -> Row | None:
        record = await self._conn.fetchrow(_numbered(sql), *params)
        return None if record is None else tuple(record)

    async def fetchall(self, sql: str, *params: Any) -> list[Row]:
        return [tuple(r) for r in await self._conn.fetch(_numbered(sql), *params)]


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool connections go back as they are: our queries leave no session state behind (no SET,
    LISTEN, advisory lock or cursor), so asyncpg's reset query would be a wasted round trip."""


class PostgresDatabase:
    """An asyncpg pool. Writers lock their account's log head row until commit (see
    ``SqlEventStore._lock_head``), so appends to one account serialize and commit in seq order;
    readers use a consistent snapshot (REPEATABLE READ, read only)."""

    dialect: Dialect = "postgres"

    def __init__(self, url: str, min_size: int = 2, max_size: int = 20) -> None:
        self._url = url
        self._sizes = (min_size, max_size)
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self._url, min_size=self._sizes[0], max_size=self._sizes[1], reset=_keep_session
            )
        except (OSError, asyncpg.PostgresError) as e:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {self._url}: {e}") from e

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def transaction(self, write: bool = False) -> AsyncIterator[Tx]:
        if self._pool is None:
            raise DatabaseUnavailable("the database is not open")
        async with self._pool.acquire() as conn:
            isolation = "read_committed" if write else "repeatable_read"
            try:
                async with conn.transaction(isolation=isolation, readonly=not write):
                    yield _PostgresTx(conn)
            except asyncpg.UniqueViolationError as e:
                raise UniqueViolation(str(e)) from e

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[Tx]:
        """A connection on which each statement is a transaction of its own."""
        if self._pool is None:
            raise DatabaseUnavailable("the database is not open")
        async with self._pool.acquire() as conn:
            yield _PostgresTx(conn)

    async def read_one(self, sql: str, *params: Any) -> Row | None:
        if self._pool is None:
            raise DatabaseUnavailable("the database is not open")
        record = await self._pool.fetchrow(_numbered(sql), *params)
        return None if record is None else tuple(record)
