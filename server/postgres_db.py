"""The PostgreSQL backend of ``server/db.py``: an asyncpg pool; ``?`` placeholders numbered
``$1, $2, ...``."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg

from server.db import DatabaseUnavailable, Param, Row, Tx, UniqueViolation
from shared.schema import Dialect

log = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"\?")


@functools.lru_cache(maxsize=1024)
def _numbered(sql: str) -> str:
    counter = iter(range(1, 10_000))
    return _PLACEHOLDER.sub(lambda _: f"${next(counter)}", sql)


class _PostgresTx:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, *params: Param) -> None:
        await self._conn.execute(_numbered(sql), *params)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None:
        if len(rows) == 1:  # asyncpg's executemany costs more than a plain execute for one row
            await self._conn.execute(_numbered(sql), *rows[0])
        elif rows:
            await self._conn.executemany(_numbered(sql), rows)

    async def fetchone(self, sql: str, *params: Param) -> Row | None:
        record = await self._conn.fetchrow(_numbered(sql), *params)
        return None if record is None else tuple(record)

    async def fetchall(self, sql: str, *params: Param) -> list[Row]:
        return [tuple(r) for r in await self._conn.fetch(_numbered(sql), *params)]


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool connections go back as they are: our queries leave no session state behind (no SET,
    LISTEN, advisory lock or cursor), so asyncpg's reset query would be a wasted round trip."""


class PostgresDatabase:
    """An asyncpg pool. Writers lock their account's log head row until commit (see
    ``server/append_sql.py``'s ``lock_heads``), so appends to one account serialize and commit in seq order;
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
    async def transaction(self, write: bool = False, slow: bool = False) -> AsyncIterator[Tx]:
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

    async def read_one(self, sql: str, *params: Param) -> Row | None:
        if self._pool is None:
            raise DatabaseUnavailable("the database is not open")
        record = await self._pool.fetchrow(_numbered(sql), *params)
        return None if record is None else tuple(record)
