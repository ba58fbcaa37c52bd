"""The server's migrations, run in order from nothing, give the state tables today's shared.schema
renders, on SQLite and on PostgreSQL, and the two dialects the same tables.

Migrations hold their own DDL (server/migrations.py), so a change to shared/schema.py changes no
database by itself: these tests fail, naming the difference, until a migration makes it.
"""

from __future__ import annotations

import json
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


async def test_a_database_from_before_instructions_keeps_its_rows_and_takes_the_new_events(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrated to 0004 and written as a server of that release wrote (the rows, the log), then
    opened by this one: 0005 adds the columns (NULL on every row) and the tables, the rows and
    events read as they did, and the new events go in."""
    import server.event_store
    from shared.models import SETTINGS_ID, DomainEvent
    from tests.server.events import T, event, new_id

    account, chat, message = new_id(), new_id(), new_id()
    old_chat = {"id": chat, "title": "Old", "createdAt": T}
    old_message = {"id": message, "chatId": chat, "role": "user", "content": "written long ago", "parentId": None,
                   "status": "completed", "assistantId": None, "runId": None, "createdAt": T}  # fmt: skip
    rows = [
        ("INSERT INTO logs (account_id, head_seq) VALUES (?, 2)", (account,)),
        ("INSERT INTO chats (account_id, id, title, created_at, updated_at, last_seq) VALUES (?, ?, 'Old', ?, ?, 1)", (account, chat, T, T)),
        (
            "INSERT INTO messages (account_id, id, chat_id, role, content, status, created_at, updated_at, last_seq) "
            "VALUES (?, ?, ?, 'user', 'written long ago', 'completed', ?, ?, 2)",
            (account, message, chat, T, T),
        ),
    ]
    for seq, (kind, payload) in enumerate((("ChatCreated", old_chat), ("MessageAppended", old_message)), start=1):
        entity = f"c:{chat}" if kind == "ChatCreated" else f"m:{message}"
        rows.append((
            "INSERT INTO events (account_id, seq, event_id, type, payload, created_at, origin, entity, chat, kind) "
            "VALUES (?, ?, ?, ?, ?, ?, 'dev', ?, ?, 'full')",
            (account, seq, new_id(), kind, json.dumps(payload), T, entity, f"c:{chat}"),
        ))  # fmt: skip

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
        cleanup = None
    else:
        schema, url = await postgres_schema()
        cleanup = schema
    try:
        older = SqlEventStore(open_database(url), lambda: datetime.now(UTC))
        monkeypatch.setattr(server.event_store, "MIGRATIONS", server.event_store.MIGRATIONS[:4])  # (as that release had them)
        await older.open()
        async with older.db.transaction(write=True) as tx:
            for sql, params in rows:
                await tx.execute(sql, *params)
        await older.close()
        monkeypatch.undo()

        store = SqlEventStore(open_database(url), lambda: datetime.now(UTC))
        await store.open()
        try:
            page = await store.read_state(account, None, None, 100, None)
            [old] = page.snapshot.messages
            assert (old.content, old.preset_id, old.instructions, old.finish_reason, old.usage) == ("written long ago", None, None, None, None)
            assert old.wire() == {**old_message, "updatedAt": T, "lastSeq": 2}  # (the JSON it always was)
            assert page.snapshot.chats[0].wire() == {**old_chat, "updatedAt": T, "lastSeq": 1}
            assert (page.snapshot.settings, page.snapshot.presets) == ([], [])
            logged = [e.payload.wire() for e in (await store.read_updates(account, 0, 10)).events]
            assert logged == [{**old_chat, "updatedAt": None, "lastSeq": None}, {**old_message, "updatedAt": None, "lastSeq": None}]
            new = [
                event("SettingsUpdated", {"id": SETTINGS_ID, "instructions": "Metric.", "createdAt": T}),
                event("PresetCreated", {"id": new_id(), "name": "Terse", "temperature": 0.5, "createdAt": T}),
                event("ChatUpdated", {**old_chat, "instructions": "Two of us."}),
            ]
            results, _ = await store.append(account, "dev", [DomainEvent.model_validate(e) for e in new])
            assert [r.status for r in results] == ["accepted"] * 3
            page = await store.read_state(account, None, None, 100, None)
            assert page.snapshot.chats[0].instructions == "Two of us." and page.snapshot.presets[0].temperature == 0.5
        finally:
            await store.close()
    finally:
        if cleanup is not None:
            await drop_schema(cleanup)
