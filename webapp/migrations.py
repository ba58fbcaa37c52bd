"""The local database's schema, as named, ordered migrations.

``LocalStore`` (webapp/store.py) runs, at start-up and in order, every migration not yet recorded
in its ``schema_migrations`` table, each in its own transaction. Never edit a released migration:
add one. Each holds its own DDL, written out (0001's state tables as ``shared.schema`` rendered
them then, 0006's search index as webapp/search.py had it), so a database made today and one
migrated from any earlier release are the same. tests/webapp/test_migrations.py checks that every
migration run in order gives the state tables ``shared.schema`` renders today and the index
webapp/search.py works with; a change to either needs a migration here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def _migration_1(conn: sqlite3.Connection) -> None:
    """The state tables: what the UI shows, and the server's version of the rows kept aside."""
    for statement in (
        "CREATE TABLE IF NOT EXISTS chats (id TEXT NOT NULL, title TEXT NOT NULL, created_at TEXT NOT NULL, "
        "updated_at TEXT NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (id))",
        "CREATE INDEX IF NOT EXISTS chats_last_seq ON chats (last_seq)",
        "CREATE TABLE IF NOT EXISTS messages (id TEXT NOT NULL, chat_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, "
        "parent_id TEXT, status TEXT NOT NULL, assistant_id TEXT, run_id TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
        "last_seq INTEGER NOT NULL, PRIMARY KEY (id))",
        "CREATE INDEX IF NOT EXISTS messages_last_seq ON messages (last_seq)",
        "CREATE INDEX IF NOT EXISTS messages_chat_id_last_seq ON messages (chat_id, last_seq)",
        "CREATE INDEX IF NOT EXISTS messages_chat_id_created_at ON messages (chat_id, created_at)",
        "CREATE TABLE IF NOT EXISTS confirmed_chats (id TEXT NOT NULL, title TEXT NOT NULL, created_at TEXT NOT NULL, "
        "updated_at TEXT NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (id))",
        "CREATE INDEX IF NOT EXISTS confirmed_chats_last_seq ON confirmed_chats (last_seq)",
        "CREATE TABLE IF NOT EXISTS confirmed_messages (id TEXT NOT NULL, chat_id TEXT NOT NULL, role TEXT NOT NULL, "
        "content TEXT NOT NULL, parent_id TEXT, status TEXT NOT NULL, assistant_id TEXT, run_id TEXT, created_at TEXT NOT NULL, "
        "updated_at TEXT NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (id))",
        "CREATE INDEX IF NOT EXISTS confirmed_messages_last_seq ON confirmed_messages (last_seq)",
        "CREATE INDEX IF NOT EXISTS confirmed_messages_chat_id_last_seq ON confirmed_messages (chat_id, last_seq)",
        "CREATE INDEX IF NOT EXISTS confirmed_messages_chat_id_created_at ON confirmed_messages (chat_id, created_at)",
    ):
        conn.execute(statement)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        """CREATE TABLE pending_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,
            entity_id TEXT NOT NULL, body TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
            seq INTEGER, last_error TEXT)"""
    )


def _migration_2(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE drafts (chat_id TEXT PRIMARY KEY, text TEXT NOT NULL)")


def _migration_3(conn: sqlite3.Connection) -> None:
    """Outbox statuses: before this, everything unsent was 'pending' whatever its attempts."""
    conn.execute("UPDATE pending_events SET status = 'failed' WHERE status = 'pending' AND last_error IS NOT NULL")
    conn.execute("UPDATE pending_events SET status = 'sending' WHERE status = 'pending' AND attempts > 0")


def _migration_4(conn: sqlite3.Connection) -> None:
    """What the server rejected stays on the device (not applied) with the reason, until the user
    resends or discards it."""
    conn.execute(
        """CREATE TABLE rejected_events (
            event_id TEXT PRIMARY KEY, entity_id TEXT NOT NULL, chat_id TEXT, body TEXT NOT NULL,
            error TEXT NOT NULL)"""
    )


def _migration_5(conn: sqlite3.Connection) -> None:
    """Which branch this device shows at a fork of a chat (fork: the parent's id, '' at the root)."""
    conn.execute(
        """CREATE TABLE branch_choices (
            chat_id TEXT NOT NULL, fork TEXT NOT NULL, child_id TEXT NOT NULL, PRIMARY KEY (chat_id, fork))"""
    )


def _migration_6(conn: sqlite3.Connection) -> None:
    """Full-text search over titles and messages, kept by triggers, with the entries of the rows
    already there (webapp/search.py says how it works), and the replies still being written found
    without reading every message (the chat list marks their chats)."""
    for table, column in (("messages", "content"), ("chats", "title")):
        conn.execute(
            f"CREATE VIRTUAL TABLE {table}_fts USING fts5({column}, content='{table}', "
            "tokenize='unicode61 remove_diacritics 2', prefix='2 3')"
        )
        conn.execute(f"INSERT INTO {table}_fts ({table}_fts) VALUES ('rebuild')")
    conn.execute(
        """CREATE TRIGGER chats_fts_insert AFTER INSERT ON chats BEGIN
            INSERT INTO chats_fts (rowid, title) VALUES (new.rowid, new.title); END"""
    )
    conn.execute(
        """CREATE TRIGGER chats_fts_delete AFTER DELETE ON chats BEGIN
            INSERT INTO chats_fts (chats_fts, rowid, title) VALUES ('delete', old.rowid, old.title); END"""
    )
    conn.execute(
        """CREATE TRIGGER chats_fts_update AFTER UPDATE OF title ON chats WHEN old.title IS NOT new.title BEGIN
            INSERT INTO chats_fts (chats_fts, rowid, title) VALUES ('delete', old.rowid, old.title);
            INSERT INTO chats_fts (rowid, title) VALUES (new.rowid, new.title); END"""
    )
    conn.execute("CREATE TABLE messages_fts_changed (id INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, content TEXT)")
    conn.execute(
        """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_changed SELECT new.rowid, 0, NULL
    WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = new.rowid); END"""
    )
    conn.execute(
        """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts_changed SELECT old.rowid, 1, old.content
            WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = old.rowid); END"""
    )
    conn.execute(
        """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages WHEN old.content IS NOT new.content BEGIN
            INSERT INTO messages_fts_changed SELECT old.rowid, 1, old.content
            WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = old.rowid); END"""
    )
    conn.execute("CREATE INDEX messages_running ON messages (chat_id) WHERE status IN ('queued', 'streaming')")


def _migration_7(conn: sqlite3.Connection) -> None:
    """A snapshot's rows are indexed for search after it, in slices (webapp/search.py)."""
    conn.execute("CREATE TABLE messages_fts_backlog (id INTEGER PRIMARY KEY)")


def _migration_8(conn: sqlite3.Connection) -> None:
    """Indexes nothing here reads through (rows are found by id, a chat's messages by chat, in
    order of time; the server's copy has them for its own reads): each only cost a write per
    row (a snapshot's rows go in faster without them)."""
    for index in (
        "confirmed_chats_last_seq", "confirmed_messages_last_seq", "confirmed_messages_chat_id_created_at",
        "chats_last_seq", "messages_last_seq", "messages_chat_id_last_seq",
    ):  # fmt: skip
        conn.execute(f"DROP INDEX IF EXISTS {index}")


def _migration_9(conn: sqlite3.Connection) -> None:
    """Each row once: the confirmed tables keep only the rows the pending overlay changed (a
    pending event gives every row it writes PENDING_SEQ, so a row whose lastSeq differs between
    the two copies, or that one of them lacks, is overlaid), and ``overlaid`` names them. A
    snapshot downloaded into a device that had state notes its rows' ids in ``snapshot_ids``."""
    conn.execute("CREATE TABLE overlaid (tbl TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (tbl, id)) WITHOUT ROWID")
    conn.execute("CREATE TABLE snapshot_ids (tbl TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (tbl, id)) WITHOUT ROWID")
    for table in ("chats", "messages"):
        confirmed = "confirmed_" + table
        conn.execute(
            f"""INSERT OR IGNORE INTO overlaid SELECT '{table}', s.id FROM {table} s WHERE NOT EXISTS
                (SELECT 1 FROM {confirmed} c WHERE c.id = s.id AND c.last_seq = s.last_seq)"""
        )
        conn.execute(
            f"""INSERT OR IGNORE INTO overlaid SELECT '{table}', c.id FROM {confirmed} c WHERE NOT EXISTS
                (SELECT 1 FROM {table} s WHERE s.id = c.id AND s.last_seq = c.last_seq)"""
        )
        conn.execute(f"DELETE FROM {confirmed} WHERE id NOT IN (SELECT id FROM overlaid WHERE tbl = '{table}')")


def _migration_10(conn: sqlite3.Connection) -> None:
    """A message's attachments, as references (JSON text, NULL: none), in both copies of the rows
    (shared/schema.py)."""
    for table in ("messages", "confirmed_messages"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN attachments_json TEXT")


def _migration_11(conn: sqlite3.Connection) -> None:
    """The attachments this device is to upload, in the order they were queued (rowid), with how
    far each is (webapp/uploads.py)."""
    conn.execute(
        """CREATE TABLE uploads (
            sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, state TEXT NOT NULL DEFAULT 'waiting',
            sent INTEGER NOT NULL DEFAULT 0, error TEXT, attempts INTEGER NOT NULL DEFAULT 0)"""
    )


def _migration_12(conn: sqlite3.Connection) -> None:
    """The files attached in a chat's composer and not sent yet (references: the bytes are in the
    page's IndexedDB), in the order they were attached (rowid)."""
    conn.execute(
        """CREATE TABLE draft_files (
            chat_id TEXT NOT NULL, sha256 TEXT NOT NULL, attachment TEXT NOT NULL,
            PRIMARY KEY (chat_id, sha256))"""
    )


def _migration_13(conn: sqlite3.Connection) -> None:
    """A chat's instructions and preset; what a reply was given and how it ended; the account's
    presets and settings (shared/schema.py), each in both copies of the rows. No index: a preset
    and the settings are found by id, and there are few."""
    for table in ("chats", "confirmed_chats"):
        for column in ("instructions", "preset_id"):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
    for table in ("messages", "confirmed_messages"):
        for column in ("preset_id", "instructions", "finish_reason", "usage_json"):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
    for prefix in ("", "confirmed_"):
        conn.execute(
            f"""CREATE TABLE {prefix}presets (id TEXT NOT NULL, name TEXT NOT NULL, assistant_id TEXT,
                instructions TEXT NOT NULL, temperature REAL, max_tokens INTEGER, created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (id))"""
        )
        conn.execute(
            f"""CREATE TABLE {prefix}settings (id TEXT NOT NULL, instructions TEXT NOT NULL, default_preset_id TEXT,
                created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (id))"""
        )


# Named, ordered; each runs once, in its own transaction, recorded in schema_migrations.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("0001_initial", _migration_1),
    ("0002_drafts", _migration_2),
    ("0003_outbox_statuses", _migration_3),
    ("0004_rejected_events", _migration_4),
    ("0005_branch_choices", _migration_5),
    ("0006_search", _migration_6),
    ("0007_search_backlog", _migration_7),
    ("0008_confirmed_indexes", _migration_8),
    ("0009_rows_once", _migration_9),
    ("0010_attachments", _migration_10),
    ("0011_uploads", _migration_11),
    ("0012_draft_files", _migration_12),
    ("0013_instructions", _migration_13),
]
