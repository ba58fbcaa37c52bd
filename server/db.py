"""The interface the two database backends share: a transaction that runs SQL.

The queries live in the modules that use them (``server/event_store.py`` the reads and
compaction, ``server/append_sql.py`` the write path's, ``server/run_store.py`` the runs', ...); the
backends only know how to open a transaction on SQLite (``server/sqlite_db.py``: the standard
library's module, used from the event loop) or PostgreSQL (``server/postgres_db.py``: an asyncpg
pool), and translate the drivers' errors into ours (``DatabaseError`` and below). SQL is written
with ``?`` placeholders; the PostgreSQL side numbers them (``$1, $2, ...``). This module imports
neither backend (each imports it); ``server/databases.py`` picks one from a database URL.
Nothing crosses this boundary untyped: parameters are ``Param``s, rows tuples of ``Value``s, which
the callers narrow with ``text``/``integer``/... (a column holding something else is a TypeError).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from shared.schema import Dialect

log = logging.getLogger(__name__)


class DatabaseError(Exception):
    """Base of the database layer's own errors."""


class UniqueViolation(DatabaseError):
    """A row with this key exists already."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached or opened."""


# What a column holds and a parameter is, on either backend (TEXT, INTEGER/BIGINT, REAL, BLOB,
# BOOLEAN on PostgreSQL, NULL): a row's values are narrowed by ``text``/``integer``/... below.
Value = str | int | float | bytes | None
Row = tuple[Value, ...]
Param = Value | list[str] | list[int]  # (a list: a PostgreSQL array, as in ``= ANY(?)``)


def text(value: Value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a TEXT column held {value!r}")
    return value


def optional_text(value: Value) -> str | None:
    return None if value is None else text(value)


def integer(value: Value) -> int:
    if not isinstance(value, int):
        raise TypeError(f"an INTEGER column held {value!r}")
    return value


def optional_integer(value: Value) -> int | None:
    return None if value is None else integer(value)


class Tx(Protocol):
    async def execute(self, sql: str, *params: Param) -> None: ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None: ...

    async def fetchone(self, sql: str, *params: Param) -> Row | None: ...

    async def fetchall(self, sql: str, *params: Param) -> list[Row]: ...


class Database(Protocol):
    dialect: Dialect

    async def open(self) -> None: ...

    async def close(self) -> None:
        """Safe to call twice."""

    def transaction(self, write: bool = False, slow: bool = False) -> AbstractAsyncContextManager[Tx]:
        """``async with db.transaction(write=True) as tx: ...``; commits, or rolls back on error.
        ``slow``: this transaction may take long (compaction); SQLite runs it in a thread."""

    async def read_one(self, sql: str, *params: Param) -> Row | None:
        """One single-statement read, with no transaction around it (the cheapest round trip)."""

