"""The browser's migrations, run in order from nothing, give the schema today's definitions render:
shared.schema's state tables (shown, and kept aside as ``confirmed_*``), with the browser's own
indexes on them, and the search index webapp/search.py works with.

Migrations hold their own DDL (webapp/migrations.py), so a change to shared/schema.py or to the
index changes no database by itself: these tests fail, naming the difference, until a migration
makes it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from shared.models import UNFINISHED
from shared.schema import MESSAGES, TABLES, Column, Sql
from tests.schemas import Schema, differences, read_sqlite, report
from webapp import search as fulltext
from webapp.database import FilePersistence
from webapp.store import LocalStore

# The tables that are the browser's own: no definition but their migrations. Every other table
# is one of shared.schema's or of the search index.
BROWSER_TABLES = {
    "meta", "pending_events", "drafts", "rejected_events", "branch_choices", "overlaid", "snapshot_ids", "schema_migrations", "uploads",
    "draft_files",
}  # fmt: skip

# The indexes on the state tables here are the browser's own (shared.schema's are the server's;
# 0008_confirmed_indexes dropped those nothing here reads through): a chat's messages in order of
# time, a chat's messages kept aside (DeleteChildren deletes them by chat), and the replies being
# written (LocalStore.running and unfinished_local_replies read through it: its condition is theirs).
INDEXES = (
    "CREATE INDEX messages_chat_id_created_at ON messages (chat_id, created_at)",
    "CREATE INDEX confirmed_messages_chat_id_last_seq ON confirmed_messages (chat_id, last_seq)",
    f"CREATE INDEX messages_running ON messages (chat_id) WHERE status IN {UNFINISHED!r}",
)


def migrated(tmp_path: Path) -> Schema:
    path = str(tmp_path / "local.db")
    LocalStore(path, FilePersistence()).close()
    conn = sqlite3.connect(path)
    try:
        return {name: table for name, table in read_sqlite(conn).items() if name not in BROWSER_TABLES}
    finally:
        conn.close()


def today() -> Schema:
    conn = sqlite3.connect(":memory:")
    for sql in (Sql("sqlite", scoped=False), Sql("sqlite", scoped=False, prefix="confirmed_")):
        for table in TABLES.values():
            for statement in sql.create(replace(table, indexes=())):
                conn.execute(statement)
    for statement in (*INDEXES, *fulltext.SCHEMA):
        conn.execute(statement)
    return read_sqlite(conn)


def test_the_migrations_give_the_tables_shared_schema_renders_and_the_search_index(tmp_path: Path) -> None:
    expected = today()
    assert {"messages", "confirmed_messages", "messages_fts", "messages_fts_data", "messages_fts_backlog"} <= set(expected)
    assert expected["messages"].triggers and expected["messages"].indexes  # (the comparison sees them)
    found = differences(expected, migrated(tmp_path))
    assert not found, report(found, "shared/schema.py and webapp/search.py")


def test_a_change_to_the_schema_without_a_migration_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above says when shared.schema or the search index changes and no migration
    follows."""
    monkeypatch.setitem(TABLES, "messages", replace(MESSAGES, columns=(*MESSAGES.columns, Column("pinned", "text", nullable=True))))
    tokenizer = "tokenize='unicode61 remove_diacritics 2'"
    schema = tuple(
        s.replace(tokenizer, "tokenize='porter unicode61'") if s.startswith("CREATE VIRTUAL TABLE chats_fts") else s
        for s in fulltext.SCHEMA
    )
    schema = tuple(s.replace("new.rowid, 0, NULL", "new.rowid, 0, new.content") for s in schema)
    monkeypatch.setattr(fulltext, "SCHEMA", (*schema, "CREATE TABLE messages_fts_stale (id INTEGER PRIMARY KEY)"))

    found = differences(today(), migrated(tmp_path))
    assert found == [
        "chats_fts: is CREATE VIRTUAL TABLE chats_fts USING fts5(title, content='chats', "
        f"{tokenizer}, prefix='2 3'), expected CREATE VIRTUAL TABLE chats_fts USING fts5(title, "
        "content='chats', tokenize='porter unicode61', prefix='2 3')",
        "confirmed_messages: column pinned (text NULL) expected, missing",
        "messages: column pinned (text NULL) expected, missing",
        "messages: trigger messages_fts_insert is (CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO "
        "messages_fts_changed SELECT new.rowid, 0, NULL WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = new.rowid); "
        "END), expected (CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts_changed SELECT "
        "new.rowid, 0, new.content WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = new.rowid); END)",
        "table messages_fts_stale: expected, missing",
    ]
    assert "add one" in report(found, "shared/schema.py and webapp/search.py")


def test_a_column_in_another_place_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order counts: ``confirmed()`` reads the shown and the kept-aside copy with one UNION ALL."""
    chats = TABLES["chats"]
    monkeypatch.setitem(TABLES, "chats", replace(chats, columns=(chats.columns[-1], *chats.columns[:-1])))
    found = differences(today(), migrated(tmp_path))
    assert found == [
        f"{table}: columns in the order (id, title, created_at, updated_at, last_seq, instructions, preset_id), "
        "expected (preset_id, id, title, created_at, updated_at, last_seq, instructions)"
        for table in ("chats", "confirmed_chats")
    ]
