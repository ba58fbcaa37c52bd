"""The server schema, as named, ordered migrations for both dialects.

A store applies, at start-up and in order, every migration not yet recorded in its
``schema_migrations`` table, each in its own transaction. Never edit a released migration: add one.
Each holds its own DDL, written out (the dialects differ only in the type of big integers), so a
database made today and one migrated from any earlier release are the same. The state tables
(``chats``, ``messages``, ``presets``, ``settings``) are also defined in ``shared.schema``, which the reducer's SQL is made
from: tests/server/test_migrations.py checks that every migration run in order gives the tables it
renders, on SQLite and PostgreSQL; a change there needs a migration here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shared.schema import Dialect


@dataclass(frozen=True)
class Migration:
    name: str
    statements: Callable[[Dialect], list[str]]


def _initial(dialect: Dialect) -> list[str]:
    big = "BIGINT" if dialect == "postgres" else "INTEGER"
    return [
        # Accounts, devices and sessions (tokens are stored only as hashes).
        """CREATE TABLE accounts (
            id TEXT PRIMARY KEY, username TEXT NOT NULL UNIQUE,
            password_hash TEXT NOT NULL, created_at TEXT NOT NULL)""",
        f"""CREATE TABLE devices (
            account_id TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL,
            created_at TEXT NOT NULL, last_seen_at TEXT NOT NULL, last_ack_seq {big} NOT NULL DEFAULT 0,
            PRIMARY KEY (account_id, id))""",
        """CREATE TABLE sessions (
            token_hash TEXT PRIMARY KEY, account_id TEXT NOT NULL, device_id TEXT NOT NULL,
            created_at TEXT NOT NULL)""",
        # The log head per account: the next seq is head_seq + 1 (gapless, see server/store.py).
        f"""CREATE TABLE logs (
            account_id TEXT PRIMARY KEY, head_seq {big} NOT NULL DEFAULT 0,
            min_available_seq {big} NOT NULL DEFAULT 1, compacted_at TEXT)""",
        # entity, chat, kind: what the event touches, for compaction (server/event_store.py).
        f"""CREATE TABLE events (
            account_id TEXT NOT NULL, seq {big} NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL,
            payload TEXT NOT NULL, created_at TEXT NOT NULL, origin TEXT NOT NULL,
            entity TEXT NOT NULL, chat TEXT NOT NULL, kind TEXT NOT NULL,
            PRIMARY KEY (account_id, seq))""",
        # Idempotency records: kept for ever, also after compaction removed the event.
        f"""CREATE TABLE event_ids (
            account_id TEXT NOT NULL, event_id TEXT NOT NULL, seq {big} NOT NULL,
            PRIMARY KEY (account_id, event_id))""",
        # The state the reducer keeps (shared/reducer.py), by account (as shared.schema rendered it then).
        "CREATE TABLE IF NOT EXISTS chats (account_id TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL, "
        f"created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_seq {big} NOT NULL, PRIMARY KEY (account_id, id))",
        "CREATE INDEX IF NOT EXISTS chats_account_id_last_seq ON chats (account_id, last_seq)",
        "CREATE TABLE IF NOT EXISTS messages (account_id TEXT NOT NULL, id TEXT NOT NULL, chat_id TEXT NOT NULL, "
        "role TEXT NOT NULL, content TEXT NOT NULL, parent_id TEXT, status TEXT NOT NULL, assistant_id TEXT, run_id TEXT, "
        f"created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_seq {big} NOT NULL, PRIMARY KEY (account_id, id))",
        "CREATE INDEX IF NOT EXISTS messages_account_id_last_seq ON messages (account_id, last_seq)",
        "CREATE INDEX IF NOT EXISTS messages_account_id_chat_id_last_seq ON messages (account_id, chat_id, last_seq)",
        "CREATE INDEX IF NOT EXISTS messages_account_id_chat_id_created_at ON messages (account_id, chat_id, created_at)",
    ]


def _runs(dialect: Dialect) -> list[str]:
    big = "BIGINT" if dialect == "postgres" else "INTEGER"
    return [
        # Assistant runs (server/runs.py): one per accepted AssistantRunRequested, written in the
        # same transaction. A worker claims a queued run with a lease; the usage is what the
        # upstream reported (or, stopped early, what was counted).
        f"""CREATE TABLE runs (
            account_id TEXT NOT NULL, id TEXT NOT NULL, chat_id TEXT NOT NULL,
            message_id TEXT NOT NULL, assistant_id TEXT NOT NULL,
            requested_seq {big} NOT NULL, requested_at TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'queued', lease_owner TEXT, lease_until TEXT,
            prompt_tokens {big}, completion_tokens {big}, usage_reported INTEGER NOT NULL DEFAULT 0,
            upstream_calls INTEGER NOT NULL DEFAULT 0, error TEXT, finished_at TEXT,
            PRIMARY KEY (account_id, id))""",
        "CREATE INDEX runs_by_status ON runs (status, requested_at)",
        "CREATE INDEX runs_by_chat ON runs (account_id, chat_id, status)",
    ]


def _runs_usage_estimated(dialect: Dialect) -> list[str]:
    # Whether the usage the upstream reported is its estimate (the demo model counts words).
    return ["ALTER TABLE runs ADD COLUMN usage_estimated INTEGER NOT NULL DEFAULT 0"]


def _attachments(dialect: Dialect) -> list[str]:
    big = "BIGINT" if dialect == "postgres" else "INTEGER"
    data = "BYTEA" if dialect == "postgres" else "BLOB"
    return [
        # A message's attachments, as references (shared/schema.py): NULL for none.
        "ALTER TABLE messages ADD COLUMN attachments_json TEXT",
        # The blobs an account holds (it uploaded them, or an import restored them): only these it
        # may download. ``referenced_at``: when a message of the account last referenced it (the
        # garbage collection of server/attachments.py lets it go a retention window after).
        f"""CREATE TABLE blob_holdings (
            account_id TEXT NOT NULL, sha256 TEXT NOT NULL, size {big} NOT NULL,
            first_at TEXT NOT NULL, referenced_at TEXT NOT NULL,
            PRIMARY KEY (account_id, sha256))""",
        "CREATE INDEX blob_holdings_by_sha256 ON blob_holdings (sha256)",
        # Uploads in progress, one per account and blob: its length (the bytes received are the
        # blob store's to say).
        f"""CREATE TABLE blob_uploads (
            account_id TEXT NOT NULL, sha256 TEXT NOT NULL, length {big} NOT NULL,
            started_at TEXT NOT NULL, updated_at TEXT NOT NULL,
            PRIMARY KEY (account_id, sha256))""",
        # The PostgreSQL blob store's bytes (server/blobs.py; the SQLite default keeps files and
        # leaves these two empty). Content-addressed, shared by the accounts that hold a blob, so
        # keyed by the digest: ``owner`` is the uploading account while an upload is partial, ''
        # once the blob is complete; ``blobs`` lists the complete ones.
        f"CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, size {big} NOT NULL, created_at TEXT NOT NULL)",
        f"""CREATE TABLE blob_chunks (
            owner TEXT NOT NULL, sha256 TEXT NOT NULL, start {big} NOT NULL, size {big} NOT NULL,
            data {data} NOT NULL, PRIMARY KEY (owner, sha256, start))""",
        # A run whose question's attachments have not all reached the server waits (server/runs.py):
        # not claimed until an upload of its account completes.
        "ALTER TABLE runs ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0",
    ]


def _instructions(dialect: Dialect) -> list[str]:
    big = "BIGINT" if dialect == "postgres" else "INTEGER"
    real = "DOUBLE PRECISION" if dialect == "postgres" else "REAL"
    return [
        # A chat's layer of instructions and its preset; what a reply was given and how it ended
        # (shared/schema.py): each NULL when there is none, as on every row made before.
        "ALTER TABLE chats ADD COLUMN instructions TEXT",
        "ALTER TABLE chats ADD COLUMN preset_id TEXT",
        "ALTER TABLE messages ADD COLUMN preset_id TEXT",
        "ALTER TABLE messages ADD COLUMN instructions TEXT",
        "ALTER TABLE messages ADD COLUMN finish_reason TEXT",
        "ALTER TABLE messages ADD COLUMN usage_json TEXT",
        # The account's presets, and its settings (one row).
        f"""CREATE TABLE IF NOT EXISTS presets (account_id TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL,
            assistant_id TEXT, instructions TEXT NOT NULL, temperature {real}, max_tokens {big},
            created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_seq {big} NOT NULL, PRIMARY KEY (account_id, id))""",
        "CREATE INDEX IF NOT EXISTS presets_account_id_last_seq ON presets (account_id, last_seq)",
        f"""CREATE TABLE IF NOT EXISTS settings (account_id TEXT NOT NULL, id TEXT NOT NULL, instructions TEXT NOT NULL,
            default_preset_id TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_seq {big} NOT NULL,
            PRIMARY KEY (account_id, id))""",
        "CREATE INDEX IF NOT EXISTS settings_account_id_last_seq ON settings (account_id, last_seq)",
    ]


def _follow_ups(dialect: Dialect) -> list[str]:
    big = "BIGINT" if dialect == "postgres" else "INTEGER"
    return [
        # The chats that have queued follow-ups (shared/followups.py), for the run workers to send
        # each when the answer before it ends (server/runs.py): ``noted_seq``, the seq of the last
        # follow-up queued; ``checked_seq``, the log's head when a worker last looked (it looks
        # again once the account's log has moved on). A row goes once nothing is queued.
        f"""CREATE TABLE follow_ups (
            account_id TEXT NOT NULL, chat_id TEXT NOT NULL, noted_seq {big} NOT NULL,
            checked_seq {big} NOT NULL DEFAULT 0, PRIMARY KEY (account_id, chat_id))""",
    ]


MIGRATIONS: list[Migration] = [
    Migration("0001_initial", _initial),
    Migration("0002_runs", _runs),
    Migration("0003_runs_usage_estimated", _runs_usage_estimated),
    Migration("0004_attachments", _attachments),
    Migration("0005_instructions", _instructions),
    Migration("0006_follow_ups", _follow_ups),
]
