"""Which database backend a URL names: ``sqlite:///path`` (``server/sqlite_db.py``) or
``postgresql://...`` (``server/postgres_db.py``), both behind the interface of ``server/db.py``.

The choice lives here, above the backends, rather than in the interface they import: so the
interface imports no backend, and no module of ``server/`` takes part in an import cycle
(``tests/server/test_import_cycles.py``)."""

from __future__ import annotations

from server.db import Database
from server.postgres_db import PostgresDatabase
from server.sqlite_db import SqliteDatabase


def open_database(url: str) -> Database:
    """The backend for ``url`` (not opened yet); a ValueError that says what is accepted otherwise."""
    if url.startswith("sqlite:///"):
        return SqliteDatabase(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(url)
    raise ValueError(f"unsupported database URL {url!r}: use sqlite:///path or postgresql://...")
