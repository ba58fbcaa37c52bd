"""The server's migrations, run in order from nothing, give the state tables today's shared.schema
renders, on SQLite and on PostgreSQL, and the two dialects the same tables.

Migrations hold their own DDL (server/migrations.py), so a change to shared/schema.py changes no
database by itself: these tests fail, naming the difference, until a migration makes it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from server.databases import open_database
from server.event_store import SqlEventStore
from shared.schema import MESSAGES, TABLES, Column, Sql
from tests.conftest import POSTGRES_URL, drop_schema, postgres_schema
from tests.schemas import Schema, differences, read_postgres, read_sqlite, report

# The tables that are the server's own: no definition but their migrations (the dialects are
# compared with each other below). Every other table is one of shared.schema's.
SERVER_TABLES = {
    "accounts", "devices", "sessions", "logs", "events", "event_ids", "runs", "schema_migrations",
    "blob_holdings", "blob_uploads", "blobs", "blob_chunks", "follow_ups",
}  # fmt: skip
# Types that are one type in the other dialect's words.
SAME_TYPE = {"bigint": "integer", "bytea": "blob", "double precision": "real"}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _read(backend: str, tmp_path: Path, name: str, statements: list[str] | None) -> Schema:
    """The schema of a new database after ``statements``, or after every migration (None)."""
    if backend == "sqlite":
        path = tmp_path / f"{name}.db"
        if statements is None:
            store = SqlEventStore(open_database(f"sqlite:///{path}"), lambda: datetime.now(UTC))
            await store.open()
            await store.close()
        conn = sqlite3.connect(path)
        try:
            for statement in statements or ():
                conn.execute(statement)
            return read_sqlite(conn)
        finally:
            conn.close()
    namespace, url = await postgres_schema()
    try:
        if statements is None:
            store = SqlEventStore(open_database(url), lambda: datetime.now(UTC))
            await store.open()
            await store.close()
        pg = await asyncpg.connect(POSTGRES_URL)
        try:
            await pg.execute(f"SET search_path = {namespace}")
            for statement in statements or ():
                await pg.execute(statement)
            return await read_postgres(pg, namespace)
        finally:
            await pg.close()
    finally:
        await drop_schema(namespace)


async def migrated(backend: str, tmp_path: Path) -> Schema:
    return await _read(backend, tmp_path, "migrated", None)


async def today(backend: str, tmp_path: Path) -> Schema:
    """The state tables as today's shared.schema renders them for the server."""
    sql = Sql(backend, scoped=True)  # type: ignore[arg-type]
    return await _read(backend, tmp_path, "today", [s for table in TABLES.values() for s in sql.create(table)])


def state_tables(schema: Schema) -> Schema:
    return {name: table for name, table in schema.items() if name not in SERVER_TABLES}


@pytest.fixture
async def migrated_schema(backend: str, tmp_path: Path) -> AsyncIterator[Schema]:
    yield await migrated(backend, tmp_path)


async def test_the_migrations_give_the_state_tables_shared_schema_renders(backend: str, tmp_path: Path, migrated_schema: Schema) -> None:
    expected = await today(backend, tmp_path)
    assert set(expected) == set(TABLES) and expected["messages"].indexes  # (the comparison sees them all)
    found = differences(expected, state_tables(migrated_schema))
    assert not found, report(found, "shared/schema.py")


async def test_a_change_to_shared_schema_without_a_migration_is_named(
    backend: str, tmp_path: Path, migrated_schema: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the test above says when shared.schema changes and no migration follows."""
    chats = TABLES["chats"]
    title = replace(chats.columns[1], nullable=True)
    monkeypatch.setitem(TABLES, "chats", replace(chats, columns=(chats.columns[0], title, *chats.columns[2:])))
    changed = replace(MESSAGES, columns=(*MESSAGES.columns, Column("pinned", "integer")), indexes=(*MESSAGES.indexes, ("pinned",)))
    monkeypatch.setitem(TABLES, "messages", changed)
    big = "bigint" if backend == "postgres" else "integer"

    found = differences(await today(backend, tmp_path), state_tables(migrated_schema))
    assert found == [
        "chats: column title is (text NOT NULL), expected (text NULL)",
        f"messages: column pinned ({big} NOT NULL) expected, missing",
        "messages: index messages_account_id_pinned ((account_id, pinned)) expected, missing",
    ]
    message = report(found, "shared/schema.py")
    assert "add one" in message and "messages: column pinned" in message

    monkeypatch.setitem(TABLES, "folders", replace(changed, name="folders"))
    assert "table folders: expected, missing" in differences(await today(backend, tmp_path), state_tables(migrated_schema))


async def test_both_dialects_migrate_to_the_same_tables(tmp_path: Path) -> None:
    """Each migration holds its DDL once per dialect in effect (the integer type differs): every
    table, the server's own ones too, has the same columns, keys and indexes on both."""

    def portable(schema: Schema) -> Schema:
        # BIGINT is SQLite's INTEGER, BYTEA its BLOB, DOUBLE PRECISION its REAL; a primary key's columns are NOT NULL on PostgreSQL whatever
        # was declared (SQLite lets a TEXT key be NULL unless told).
        return {
            name: replace(
                table,
                columns=tuple(
                    replace(c, type=SAME_TYPE.get(c.type, c.type), not_null=c.not_null or c.name in table.primary_key)
                    for c in table.columns
                ),
            )
            for name, table in schema.items()
        }

    sqlite_schema, postgres = portable(await migrated("sqlite", tmp_path)), portable(await migrated("postgres", tmp_path))
    assert set(sqlite_schema) >= SERVER_TABLES | set(TABLES)
    found = differences(sqlite_schema, postgres)
    assert not found, "PostgreSQL's migrated schema differs from SQLite's:\n  " + "\n  ".join(found)
