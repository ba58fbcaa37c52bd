"""The local database: confirmed state, the pending overlay, the outbox, the sync cursor.

The state tables (one ``shared`` schema) hold each row once:
  ``chats``/``messages``: what the UI shows, the confirmed state with the pending events on top;
  ``overlaid``: the rows the pending events made or changed there (by table and id);
  ``confirmed_chats``/``confirmed_messages``: the server's version of those rows (none when the
  server has none), kept aside while they are overlaid.
So the server's state at ``last_seq`` is the shown rows that are not overlaid, plus the confirmed
ones (``confirmed()``). A remote event changes the server's version of a row wherever it is; then
the overlay is put back on top (``_reapply_overlay``: the overlaid rows restored, the outbox run
again), so nothing pending is lost and nothing rejected survives. A row no pending event touches
is stored once, which is what a device syncing a large account writes.

Every write is one SQLite transaction followed by ``Persistence.flush()``; a change counts as
saved (and may reach the network) only once that has returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Protocol

from shared.models import (
    UNFINISHED,
    Chat,
    DomainEvent,
    EventResult,
    EventType,
    LoggedEvent,
    Message,
    RunRequest,
    Snapshot,
    StateResponse,
    format_time,
)
from shared.reducer import PENDING_SEQ, DeleteChildren, Upsert, apply
from shared.schema import CHATS, MESSAGES, TABLES, Sql, Table
from shared.thread import ROOT, Link, children
from webapp import search as fulltext
from webapp.migrations import MIGRATIONS
from webapp.transport import RunInfo

SHOWN = Sql("sqlite", scoped=False)

# Event types, for the outbox's coalescing (see LocalStore.add_local).
CREATES = {EventType.CHAT_CREATED, EventType.MESSAGE_APPENDED}
UPSERTS = CREATES | {EventType.CHAT_UPDATED, EventType.MESSAGE_EDITED}
DELETES = {EventType.CHAT_DELETED, EventType.MESSAGE_DELETED}
# Events that create a message (a new child at its parent's fork).
NEW_MESSAGES = {
    EventType.MESSAGE_APPENDED, EventType.ASSISTANT_RUN_REQUESTED, EventType.TOOL_CALL_REQUESTED,
    EventType.TOOL_CALL_SUCCEEDED, EventType.TOOL_CALL_FAILED,
}  # fmt: skip
CONFIRMED = Sql("sqlite", scoped=False, prefix="confirmed_")


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint wrote into the database file: these pages (numbered from 1)."""

    pages: frozenset[int]
    page_size: int


class Persistence(Protocol):
    async def flush(self, checkpoint: Checkpoint | None) -> None:
        """Make every committed change durable before returning. In WAL mode a commit only
        appends to the -wal file; the database file changes only at a checkpoint, and then
        ``checkpoint`` says which of its pages it rewrote."""


class FilePersistence:
    """A database file on a real disk is durable once SQLite has committed."""

    async def flush(self, checkpoint: Checkpoint | None) -> None:
        return None


# The -wal file is checkpointed into the database file once it is this large: the bigger, the
# fewer checkpoints, and the more pages each one rewrites.
CHECKPOINT_WAL_BYTES = 512 * 1024
# The same while a snapshot is downloaded (see apply_snapshot_page), and for a second after it: the
# writes on the way to being online (the log after the snapshot, the outbox) do not checkpoint
# the many megabytes it left in the -wal, the first one after that does (the search index's
# first slice, webapp/sync.py, in the background).
SNAPSHOT_WAL_BYTES = 64 * 1024 * 1024
SNAPSHOT_SETTLE_SECONDS = 1.0


def wal_pages(path: str) -> set[int]:
    """The database pages the frames of a -wal file hold (what a checkpoint copies from it).

    Format (sqlite.org/fileformat.html, "WAL file format"): a 32-byte header (page size at
    byte 8, salts at 16..24), then frames: a 24-byte header (page number at 0, the salts again at
    8..16) and the page. Frames with other salts are left from an earlier generation of the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    if len(data) < 32:
        return set()
    page_size, salts = int.from_bytes(data[8:12], "big"), data[16:24]
    pages: set[int] = set()
    for offset in range(32, len(data) - 24 - page_size + 1, 24 + page_size):
        if data[offset + 8 : offset + 16] == salts:
            pages.add(int.from_bytes(data[offset : offset + 4], "big"))
    return pages


@dataclass(frozen=True)
class SnapshotProgress:
    """A snapshot being downloaded page by page: fixed at ``up_to_seq``, continuing at
    ``next_page``; ``done`` rows of ``total`` (when the server said) stored so far; ``fresh``:
    the device held no confirmed state when it began."""

    up_to_seq: int
    next_page: str | None
    done: int
    total: int | None
    fresh: bool


@dataclass(frozen=True)
class Account:
    user_id: str
    device_id: str
    username: str


# An outbox entry's status (``pending_events.status``):
#   pending: never sent (the outbox may still rewrite or withdraw it in place);
#   sending: a push with it is under way, or was when the tab closed (it may be on the server);
#   failed:  the last push with it got no answer or an error (``last_error``); it is sent again;
#   sent:    the server took it (accepted or duplicate, with its seq); it waits for the cursor to
#            pass that seq, when it becomes part of the confirmed state and leaves the outbox.
# Rejected events leave the outbox at once. All but ``sent`` are still to be pushed.
UNSENT = ("pending", "sending", "failed")


@dataclass(frozen=True)
class Pending:
    event: DomainEvent
    status: str
    attempts: int
    last_error: str | None


@dataclass(frozen=True)
class Delivery:
    """Where the first unsent change of an entity stands (an outbox status but ``sent``)."""

    status: str
    error: str | None


@dataclass(frozen=True)
class Rejection:
    """A local change the server refused: kept, not applied, until the user resends or discards it."""

    event: DomainEvent
    error: str


# Everything that belongs to the account signed in (emptied when another one signs in).
ACCOUNT_TABLES = (
    "chats", "messages", "confirmed_chats", "confirmed_messages", "meta", "pending_events", "drafts",
    "rejected_events", "branch_choices", "overlaid", "snapshot_ids",
)  # fmt: skip


def _utc_now() -> str:
    return format_time(datetime.now(UTC))


class LocalStore:
    def __init__(self, path: str, persistence: Persistence, now: Callable[[], str] = _utc_now) -> None:
        self._persistence = persistence
        self._now = now
        self._wal_path = path + "-wal"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        # WAL with a small journal: a commit persists the small -wal file, not the whole database.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA journal_size_limit={CHECKPOINT_WAL_BYTES}")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # we checkpoint ourselves: see _durable
        conn.execute("PRAGMA synchronous=NORMAL")
        self._conn: sqlite3.Connection | None = conn
        self._searchable = False  # (until the migration that makes the index has run)
        self._storing: list[asyncio.Future[None]] = []  # a snapshot's pages on their way to storage
        self._settled_at = 0.0  # (time.monotonic()) when a snapshot's -wal may be checkpointed
        self._migrate()

    # --- plumbing ------------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the local store is closed")
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @contextmanager
    def _transaction(self, defer_index: bool = False) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            if self._searchable:
                fulltext.flush(conn, defer_index)  # the search index, in the same transaction
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _migrate(self) -> None:
        conn = self.conn
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY)")
        done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
        for name, migrate in MIGRATIONS:
            if name not in done:
                with self._transaction():
                    migrate(conn)
                    conn.execute("INSERT INTO schema_migrations VALUES (?)", (name,))
        self._searchable = True

    @staticmethod
    def _overlay(conn: sqlite3.Connection, event: DomainEvent) -> None:
        """A pending event onto the shown rows; the server's version of each row it touches is
        kept aside first (unless the row is overlaid already: then it is kept already)."""
        for mutation in apply(event):
            table = TABLES[mutation.table]
            cols = ", ".join(table.column_names)
            if isinstance(mutation, DeleteChildren):
                where, value = f"{mutation.column} = ?", mutation.value
            else:
                where, value = "id = ?", mutation.id if not isinstance(mutation, Upsert) else mutation.row["id"]
            untouched = f"{where} AND id NOT IN (SELECT id FROM overlaid WHERE tbl = '{table.name}')"
            conn.execute(f"INSERT INTO {CONFIRMED.name(table)} ({cols}) SELECT {cols} FROM {table.name} WHERE {untouched}", (value,))
            if isinstance(mutation, DeleteChildren):
                conn.execute(f"INSERT OR IGNORE INTO overlaid SELECT '{table.name}', id FROM {table.name} WHERE {where}", (value,))
            else:
                conn.execute("INSERT OR IGNORE INTO overlaid VALUES (?, ?)", (table.name, value))
            statement, params = SHOWN.mutation(mutation)
            conn.execute(statement, params)

    @staticmethod
    def _confirm(conn: sqlite3.Connection, event: LoggedEvent, overlaid: set[tuple[str, str]]) -> None:
        """A logged event onto the server's version of each row: the shown row, or the one kept
        aside when the row is ``overlaid`` (the overlay goes back on top afterwards)."""
        for mutation in apply(event):
            if isinstance(mutation, DeleteChildren):
                statement, params = CONFIRMED.mutation(mutation)
                conn.execute(statement, params)
                statement, params = SHOWN.mutation(mutation)
                if overlaid:
                    statement += f" AND id NOT IN (SELECT id FROM overlaid WHERE tbl = '{mutation.table}')"
                conn.execute(statement, params)
                continue
            row_id = mutation.row["id"] if isinstance(mutation, Upsert) else mutation.id
            statement, params = (CONFIRMED if (mutation.table, row_id) in overlaid else SHOWN).mutation(mutation)
            conn.execute(statement, params)

    @staticmethod
    def _overlaid(conn: sqlite3.Connection) -> set[tuple[str, str]]:
        return {(r[0], r[1]) for r in conn.execute("SELECT tbl, id FROM overlaid")}

    def _reapply_overlay(self, conn: sqlite3.Connection) -> None:
        """Shown state := confirmed state + every pending event, in order. Only the overlaid rows
        change: each is put back as the server has it (a row restored keeps its rowid, and its
        search entry unless its text differs), then the outbox runs again."""
        for table in (CHATS, MESSAGES):
            cols = table.column_names
            shown, confirmed = table.name, CONFIRMED.name(table)
            conn.execute(
                f"""DELETE FROM {shown} WHERE id IN (SELECT id FROM overlaid WHERE tbl = '{shown}')
                    AND id NOT IN (SELECT id FROM {confirmed})"""
            )
            updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c != "id")
            conn.execute(
                f"""INSERT INTO {shown} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM {confirmed} WHERE true
                    ON CONFLICT (id) DO UPDATE SET {updates}"""
            )
            conn.execute(f"DELETE FROM {confirmed}")
        conn.execute("DELETE FROM overlaid")
        for pending in self._pending_events(conn):
            self._overlay(conn, pending)

    def _meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    async def open(self) -> None:
        """After opening: checkpoint what the -wal holds (migrations, an earlier session's
        commits) and persist that."""
        await self._persistence.flush(self._checkpoint())

    async def _durable(self, wal_bytes: int | None = None) -> None:
        """Called after every write transaction: persist it, checkpointing when the -wal is big."""
        if wal_bytes is None:
            wal_bytes = CHECKPOINT_WAL_BYTES if time.monotonic() >= self._settled_at else SNAPSHOT_WAL_BYTES
        big = os.path.exists(self._wal_path) and os.path.getsize(self._wal_path) > wal_bytes
        await self._persistence.flush(self._checkpoint() if big else None)

    def _checkpoint(self) -> Checkpoint:
        pages = wal_pages(self._wal_path)
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Checkpoint(frozenset(pages), int(self.conn.execute("PRAGMA page_size").fetchone()[0]))

    # --- account and cursor --------------------------------------------------------------------

    def account(self) -> Account | None:
        raw = self._meta("account")
        return None if raw is None else Account(**json.loads(raw))

    async def set_account(self, account: Account) -> None:
        """Remember who is signed in; a different user than before starts from an empty database."""
        previous = self.account()
        with self._transaction() as conn:
            if previous is not None and previous.user_id != account.user_id:
                self._forget(conn)
            self._set_meta(conn, "account", json.dumps(account.__dict__))
            conn.execute("DELETE FROM meta WHERE key = 'signed_out'")
        await self._durable()

    def signed_out(self) -> bool:
        """The user signed out here and kept this device's copy (for their next sign-in)."""
        return self._meta("signed_out") is not None

    async def mark_signed_out(self) -> None:
        with self._transaction() as conn:
            self._set_meta(conn, "signed_out", "1")
        await self._durable()

    async def forget_account(self) -> None:
        """Remove everything of the account from this device (its unsent changes too)."""
        with self._transaction() as conn:
            self._forget(conn)
        await self._durable()

    @staticmethod
    def _forget(conn: sqlite3.Connection) -> None:
        for table in ACCOUNT_TABLES:
            conn.execute(f"DELETE FROM {table}")

    def last_seq(self) -> int:
        return int(self._meta("last_seq") or 0)

    def setting(self, key: str) -> str | None:
        """A value the app keeps on this device (the assistants it last heard of, the one chosen)."""
        return self._meta("setting:" + key)

    async def set_setting(self, key: str, value: str) -> None:
        with self._transaction() as conn:
            self._set_meta(conn, "setting:" + key, value)
        await self._durable()

    def synced_at(self) -> str | None:
        """When the server last told us what is new (a page of updates, a live frame, a
        snapshot): the local copy was up to date then."""
        return self._meta("synced_at")

    # --- local changes: the outbox -------------------------------------------------------------

    async def add_local(self, event: DomainEvent, draft_of: str | None = None, resolves: Iterable[str] = ()) -> None:
        """Queue ``event`` and show it, in one transaction; returns once it is durable. In the same
        transaction: the draft of chat ``draft_of`` is cleared (the message it became supersedes
        it), the rejected events ``resolves`` are forgotten (it is their corrected form), and a
        message created here is the one shown at its fork (an older choice there is dropped).

        The outbox coalesces changes to an entity whose events have never left the device: an
        edit rewrites the queued payload (only the latest full payload matters), and deleting an
        entity created here and never sent withdraws it, so nothing about it goes out at all."""
        entity = event.entity_id()
        with self._transaction() as conn:
            if draft_of is not None:
                conn.execute("DELETE FROM drafts WHERE chat_id = ?", (draft_of,))
            if event.type is EventType.CHAT_DELETED:  # what this device kept about the chat goes with it
                for table in ("drafts", "branch_choices", "rejected_events"):
                    conn.execute(f"DELETE FROM {table} WHERE chat_id = ?", (entity,))
            conn.executemany("DELETE FROM rejected_events WHERE event_id = ?", [(e,) for e in resolves])
            self._show_new_branch(conn, event)
            queued = conn.execute(
                "SELECT id, body, status FROM pending_events WHERE entity_id = ? AND status <> 'sent' ORDER BY id",
                (entity,),
            ).fetchall()
            unsent = bool(queued) and all(row["status"] == "pending" for row in queued)
            first = DomainEvent.model_validate_json(queued[0]["body"]) if unsent else None
            if first is not None and event.type in UPSERTS and first.type in UPSERTS:
                rewritten = first.model_copy(update={"payload": event.payload})
                conn.execute("UPDATE pending_events SET body = ? WHERE id = ?", (json.dumps(rewritten.wire()), queued[0]["id"]))
                conn.execute("DELETE FROM pending_events WHERE entity_id = ? AND id > ?", (entity, queued[0]["id"]))
                self._overlay(conn, event)
            elif first is not None and event.type in DELETES and first.type in CREATES:
                conn.execute("DELETE FROM pending_events WHERE entity_id = ?", (entity,))
                if event.type is EventType.CHAT_DELETED:  # and what was queued inside the chat
                    for row in conn.execute("SELECT id, body FROM pending_events").fetchall():
                        if json.loads(row["body"])["payload"].get("chatId") == entity:
                            conn.execute("DELETE FROM pending_events WHERE id = ?", (row["id"],))
                self._reapply_overlay(conn)
            else:
                self._queue(conn, event)
        await self._durable()

    def _queue(self, conn: sqlite3.Connection, event: DomainEvent) -> None:
        """Into the outbox, and onto the shown state."""
        conn.execute(
            "INSERT INTO pending_events (event_id, entity_id, body) VALUES (?, ?, ?)",
            (event.event_id, event.entity_id(), json.dumps(event.wire())),
        )
        self._overlay(conn, event)

    @staticmethod
    def _show_new_branch(conn: sqlite3.Connection, event: DomainEvent) -> None:
        """A message created here is the one its fork shows: the newest, once no older choice stands."""
        payload = event.payload
        if event.type in NEW_MESSAGES and isinstance(payload, (Message, RunRequest)):
            conn.execute(
                "DELETE FROM branch_choices WHERE chat_id = ? AND fork = ?", (payload.chat_id, payload.parent_id or ROOT)
            )

    async def add_imported(self, events: list[DomainEvent]) -> int:
        """Queue and show, in one transaction, the events of an import that create what this
        device does not have yet (an entity already here is left as it is, whatever the file
        says; an event already queued is not queued twice). Returns how many were queued."""
        added = 0
        with self._transaction() as conn:
            for event in events:
                table = "chats" if event.type is EventType.CHAT_CREATED else "messages"
                entity = event.entity_id()
                if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (entity,)).fetchone() is not None:
                    continue
                if conn.execute("SELECT 1 FROM pending_events WHERE event_id = ?", (event.event_id,)).fetchone():
                    continue
                self._queue(conn, event)
                added += 1
        await self._durable()
        return added

    async def mark_attempted(self, event_ids: list[str]) -> None:
        """About to be sent: from now on these events may be on the server, so they are never
        rewritten or withdrawn in place again (durable before the request goes out)."""
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE pending_events SET status = 'sending', attempts = attempts + 1 WHERE event_id = ?",
                [(e,) for e in event_ids],
            )
        await self._durable()

    def outbox(self, limit: int = 100) -> list[Pending]:
        """What is still to be pushed, in the order it was written."""
        rows = self.conn.execute(
            "SELECT body, status, attempts, last_error FROM pending_events WHERE status <> 'sent' ORDER BY id LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            Pending(DomainEvent.model_validate_json(r["body"]), r["status"], r["attempts"], r["last_error"])
            for r in rows
        ]

    def delivery(self) -> dict[str, Delivery]:
        """Entity id -> where its first unsent change stands, for every entity with one."""
        found: dict[str, Delivery] = {}
        for row in self.conn.execute(
            "SELECT entity_id, status, last_error FROM pending_events WHERE status <> 'sent' ORDER BY id"
        ):
            found.setdefault(row["entity_id"], Delivery(row["status"], row["last_error"]))
        return found

    def pending_count(self) -> int:
        """How many local changes the server has not taken yet."""
        return int(self.conn.execute("SELECT count(*) FROM pending_events WHERE status <> 'sent'").fetchone()[0])

    async def record_results(self, results: Iterable[EventResult]) -> bool:
        """What the server answered to a push: accepted and duplicate events wait (as ``sent``) for
        their seq to arrive through the log; rejected ones leave the outbox, their effect undone,
        and are kept aside with the reason (``rejected``). Returns whether the shown state changed."""
        rejected = False
        with self._transaction() as conn:
            for result in results:
                if result.status == "rejected":
                    row = conn.execute(
                        "SELECT entity_id, body FROM pending_events WHERE event_id = ?", (result.event_id,)
                    ).fetchone()
                    if row is not None:
                        chat = json.loads(row["body"])["payload"].get("chatId")
                        conn.execute(
                            "INSERT OR REPLACE INTO rejected_events VALUES (?, ?, ?, ?, ?)",
                            (result.event_id, row["entity_id"], chat, row["body"], result.error or "rejected"),
                        )
                    conn.execute("DELETE FROM pending_events WHERE event_id = ?", (result.event_id,))
                    rejected = True
                else:
                    conn.execute(
                        "UPDATE pending_events SET status = 'sent', seq = ?, last_error = NULL WHERE event_id = ?",
                        (result.seq, result.event_id),
                    )
            changed = self._drop_logged(conn) or rejected
            if changed:
                self._reapply_overlay(conn)
        await self._durable()
        return changed

    async def record_failure(self, event_ids: list[str], error: str) -> None:
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE pending_events SET status = 'failed', last_error = ? WHERE event_id = ? AND status = 'sending'",
                [(error, e) for e in event_ids],
            )
        await self._durable()

    # --- remote changes ------------------------------------------------------------------------

    async def apply_remote(self, events: list[LoggedEvent], current_seq: int | None = None) -> int:
        """Apply events from the log in seq order (those at or below the cursor are skipped), then
        re-apply the pending overlay. Returns how many were new."""
        applied = 0
        with self._transaction() as conn:
            cursor = self.last_seq()
            overlaid = self._overlaid(conn)
            for event in events:
                if event.seq <= cursor:
                    continue
                self._confirm(conn, event, overlaid)
                # Our own event, back from the log (maybe before the push's answer): it is
                # confirmed now, so it leaves the overlay.
                conn.execute("DELETE FROM pending_events WHERE event_id = ?", (event.event_id,))
                cursor = event.seq
                applied += 1
            if current_seq is not None:
                cursor = max(cursor, current_seq)  # compaction may have skipped superseded seqs
            self._set_meta(conn, "last_seq", str(cursor))
            self._set_meta(conn, "synced_at", self._now())
            if self._drop_logged(conn) or (applied and overlaid):
                self._reapply_overlay(conn)
        await self._durable()
        return applied

    async def replace(self, snapshot: Snapshot, up_to_seq: int) -> None:
        """Full resync: the confirmed state becomes exactly ``snapshot`` (replace, never merge)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM snapshot_ids")
            self._store_snapshot(conn, snapshot, fresh=False)
            self._drop_unlisted(conn)
            self._set_meta(conn, "last_seq", str(up_to_seq))
            self._set_meta(conn, "synced_at", self._now())
            self._drop_logged(conn)
            self._reapply_overlay(conn)
        await self._durable()

    # --- a snapshot, page by page (webapp/sync.py: the state path) ------------------------------

    def snapshot_progress(self) -> SnapshotProgress | None:
        """The snapshot being downloaded, when one is under way (it outlives a reload)."""
        raw = self._meta("snapshot")
        return None if raw is None else SnapshotProgress(**json.loads(raw))

    async def apply_snapshot_page(self, page: StateResponse, first: bool) -> SnapshotProgress | None:
        """Take one page of ``GET /sync/state`` in one durable transaction: its rows become the
        server's version of theirs (replace, never merge), with the pending overlay put back on
        top, so what arrived can be shown at once. Until the last page the cursor does not move
        and ``snapshot_progress`` says where the download is (``page.up_to_seq`` and the next
        page), so that an interrupted snapshot is resumed or started over, never taken for
        complete. The last page moves the cursor to ``up_to_seq``; on a device that had state,
        the rows no page held go then (``snapshot_ids`` notes the ones that came). Returns the
        progress, or None when the snapshot is complete."""
        before = self.snapshot_progress()
        with self._transaction(defer_index=True) as conn:
            if first:
                # A new device holds only what the overlay made: each page's rows are simply
                # added, and nothing needs to be noted for the end.
                fresh = before is None and self.last_seq() == 0 and not self._has_confirmed(conn)
                conn.execute("DELETE FROM snapshot_ids")
                progress = SnapshotProgress(page.up_to_seq, page.next_page, 0, page.total, fresh)
            else:
                assert before is not None and before.up_to_seq == page.up_to_seq
                progress = before
            self._store_snapshot(conn, page.snapshot, fresh=progress.fresh)
            done = progress.done + len(page.snapshot.chats) + len(page.snapshot.messages)
            dropped = False
            if page.next_page is not None:
                progress = SnapshotProgress(progress.up_to_seq, page.next_page, done, progress.total, progress.fresh)
                self._set_meta(conn, "snapshot", json.dumps(progress.__dict__))
            else:
                conn.execute("DELETE FROM meta WHERE key = 'snapshot'")
                if not progress.fresh:
                    self._drop_unlisted(conn)
                self._set_meta(conn, "last_seq", str(page.up_to_seq))
                self._set_meta(conn, "synced_at", self._now())
                dropped = self._drop_logged(conn)
            if dropped or conn.execute("SELECT 1 FROM overlaid LIMIT 1").fetchone() is not None:
                self._reapply_overlay(conn)
        if page.next_page is not None:
            # A page is the server's data, not the user's: the next one is taken while it is
            # stored. Storage keeps the order of writes, each with the files as a commit left
            # them (the stored copy is always one SQLite committed, at worst an earlier page).
            # Between pages the -wal may grow further: a checkpoint rewrites the pages it holds
            # once, however often they changed.
            self._storing.append(asyncio.ensure_future(self._durable(SNAPSHOT_WAL_BYTES)))
            return progress
        self._settled_at = time.monotonic() + SNAPSHOT_SETTLE_SECONDS
        await self._durable()
        storing, self._storing = self._storing, []
        for stored in storing:  # (every page stored, or the error of one that was not)
            await stored
        return None

    def _store_snapshot(self, conn: sqlite3.Connection, snapshot: Snapshot, fresh: bool) -> None:
        """Rows of a snapshot as the server's version of theirs: shown, or kept aside for the rows
        the overlay changed. Unless the device is ``fresh`` (it had none of the server's rows),
        their ids go into ``snapshot_ids``."""
        overlaid = self._overlaid(conn)
        for table, rows in ((CHATS, snapshot.chats), (MESSAGES, snapshot.messages)):
            cols = table.column_names
            values = list(map(attrgetter(*cols), rows))  # (``id`` leads every table)
            if not fresh:
                conn.executemany("INSERT OR IGNORE INTO snapshot_ids VALUES (?, ?)", [(table.name, v[0]) for v in values])
            if overlaid:
                aside = [v for v in values if (table.name, v[0]) in overlaid]
                values = [v for v in values if (table.name, v[0]) not in overlaid]
                marks = ", ".join("?" for _ in cols)
                conn.executemany(f"INSERT OR REPLACE INTO {CONFIRMED.name(table)} ({', '.join(cols)}) VALUES ({marks})", aside)
            if values:
                self._show_rows(conn, table, values, fresh)

    @staticmethod
    def _drop_unlisted(conn: sqlite3.Connection) -> None:
        """The end of a snapshot on a device that had state: the server's version of every row
        that none of its pages held goes."""
        for table in ("chats", "messages"):
            listed = f"(SELECT id FROM snapshot_ids WHERE tbl = '{table}')"
            conn.execute(
                f"DELETE FROM {table} WHERE id NOT IN {listed} AND id NOT IN (SELECT id FROM overlaid WHERE tbl = '{table}')"
            )
            conn.execute(f"DELETE FROM confirmed_{table} WHERE id NOT IN {listed}")
        conn.execute("DELETE FROM snapshot_ids")

    @staticmethod
    def _has_confirmed(conn: sqlite3.Connection) -> bool:
        """Whether the device holds any of the server's rows."""
        return any(
            conn.execute(sql).fetchone() is not None
            for t in ("chats", "messages")
            for sql in (
                f"SELECT 1 FROM {t} WHERE id NOT IN (SELECT id FROM overlaid WHERE tbl = '{t}') LIMIT 1",
                f"SELECT 1 FROM confirmed_{t} LIMIT 1",
            )
        )

    @staticmethod
    def _show_rows(conn: sqlite3.Connection, table: Table, values: list[tuple[Any, ...]], fresh: bool) -> None:
        """A snapshot's rows into a shown table; a row already shown as confirmed stays as it is
        (and so does its search entry). Pages come newest first, so messages are given rowids
        below every row's, counting down: rowids keep following the order rows were written in
        (search takes the newest matches by rowid, see webapp/search.py). On a ``fresh`` device
        no row can be there yet: an insert that would leave one as it is (an upsert costs twice as
        much, measured: 50,000 messages in 0.28 s against 0.64 s)."""
        cols = table.column_names
        if fresh:
            verb, conflict = "INSERT OR IGNORE", ""
        else:
            updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c != "id")
            verb = "INSERT"
            conflict = f"ON CONFLICT (id) DO UPDATE SET {updates} WHERE {table.name}.last_seq IS NOT excluded.last_seq"
        if table is not MESSAGES:
            marks = ", ".join("?" for _ in cols)
            conn.executemany(f"{verb} INTO {table.name} ({', '.join(cols)}) VALUES ({marks}) {conflict}", values)
            return
        low = conn.execute("SELECT min(rowid) FROM messages").fetchone()[0]
        start = min(int(low), 1) if low is not None else 1
        # Inserted in rowid order (the page's oldest first): rows added at the left end of the
        # table one by one, highest rowid first, left every page of it half full.
        numbered = [(start - 1 - i, *row) for i, row in enumerate(values)][::-1]
        marks = ", ".join("?" for _ in range(len(cols) + 1))
        # New rows go to the search index's backlog in one statement (a row already there keeps
        # its rowid, and its update trigger notes a change of its text).
        with fulltext.bulk_insert(conn, start - len(values), start - 1):
            conn.executemany(f"{verb} INTO messages (rowid, {', '.join(cols)}) VALUES ({marks}) {conflict}", numbered)

    async def index_search_backlog(self, limit: int = 2000) -> int:
        """Index a slice of the messages a snapshot brought (newest first), in one durable
        transaction; returns how many are still to do."""
        with self._transaction() as conn:
            left = fulltext.index_backlog(conn, limit)
        await self._durable()
        return left

    def search_backlog(self) -> int:
        """Messages not indexed for search yet (search reads them directly meanwhile)."""
        return fulltext.backlog(self.conn)

    def _drop_logged(self, conn: sqlite3.Connection) -> bool:
        """Sent events whose seq the cursor has passed are part of the confirmed state now.
        True when any went: their effect on the shown state is then the log's, not theirs (an
        old duplicate, or an event compacted away), so the shown state must be rebuilt."""
        dropped = conn.execute(
            "DELETE FROM pending_events WHERE status = 'sent' AND seq <= ?", (self.last_seq(),)
        )
        return dropped.rowcount > 0

    @staticmethod
    def _pending_events(conn: sqlite3.Connection) -> list[DomainEvent]:
        rows = conn.execute("SELECT body FROM pending_events ORDER BY id").fetchall()
        return [DomainEvent.model_validate_json(r[0]) for r in rows]

    def rejected(self, chat_id: str) -> list[Rejection]:
        """The changes to this chat the server refused, oldest first."""
        rows = self.conn.execute(
            "SELECT body, error FROM rejected_events WHERE chat_id = ? ORDER BY rowid", (chat_id,)
        ).fetchall()
        return [Rejection(DomainEvent.model_validate_json(r["body"]), r["error"]) for r in rows]

    async def discard_rejected(self, event_ids: Iterable[str]) -> None:
        with self._transaction() as conn:
            conn.executemany("DELETE FROM rejected_events WHERE event_id = ?", [(e,) for e in event_ids])
        await self._durable()

    # --- branches: which child this device shows at each fork -------------------------------------

    def branch_choices(self, chat_id: str) -> dict[str, str]:
        rows = self.conn.execute("SELECT fork, child_id FROM branch_choices WHERE chat_id = ?", (chat_id,))
        return {r["fork"]: r["child_id"] for r in rows}

    async def choose_branch(self, chat_id: str, fork: str, child_id: str) -> None:
        with self._transaction() as conn:
            self._choose(conn, chat_id, fork, child_id)
        await self._durable()

    @staticmethod
    def _choose(conn: sqlite3.Connection, chat_id: str, fork: str, child_id: str) -> None:
        conn.execute(
            "INSERT INTO branch_choices VALUES (?, ?, ?) ON CONFLICT (chat_id, fork) DO UPDATE SET child_id = excluded.child_id",
            (chat_id, fork, child_id),
        )

    async def show_path(self, chat_id: str, chain: list[str]) -> None:
        """Show the branch that holds this path (ids from the chat's first message): at each of
        its forks, its child is chosen, unless it is the newest there (shown anyway)."""
        tree = children(self.links(chat_id))
        with self._transaction() as conn:
            for fork, child in zip([ROOT, *chain], chain):
                if tree.get(fork, [child])[-1] == child:
                    conn.execute("DELETE FROM branch_choices WHERE chat_id = ? AND fork = ?", (chat_id, fork))
                else:
                    self._choose(conn, chat_id, fork, child)
        await self._durable()

    # --- drafts: what the composer held, per chat ----------------------------------------------

    async def save_draft(self, chat_id: str, text: str) -> None:
        with self._transaction() as conn:
            if text:
                conn.execute(
                    "INSERT INTO drafts VALUES (?, ?) ON CONFLICT (chat_id) DO UPDATE SET text = excluded.text",
                    (chat_id, text),
                )
            else:
                conn.execute("DELETE FROM drafts WHERE chat_id = ?", (chat_id,))
        await self._durable()

    def draft(self, chat_id: str) -> str:
        row = self.conn.execute("SELECT text FROM drafts WHERE chat_id = ?", (chat_id,)).fetchone()
        return "" if row is None else str(row[0])

    def drafted(self) -> set[str]:
        """The chats with a draft."""
        return {str(r[0]) for r in self.conn.execute("SELECT chat_id FROM drafts")}

    # --- reads for the UI ----------------------------------------------------------------------

    def chats(self) -> list[Chat]:
        """Most recent activity first: a chat's newest message, or its creation."""
        rows = self.conn.execute(
            """SELECT c.*, COALESCE((SELECT MAX(m.created_at) FROM messages m WHERE m.chat_id = c.id), c.created_at)
                   AS active FROM chats c ORDER BY active DESC, c.id DESC"""
        ).fetchall()
        return [Chat.model_validate(dict(r)) for r in rows]

    def running(self) -> set[str]:
        """The chats with a reply being written."""
        rows = self.conn.execute(f"SELECT DISTINCT chat_id FROM messages WHERE status IN {UNFINISHED!r}")
        return {str(r[0]) for r in rows}

    def unsent(self) -> dict[str, int]:
        """Chat -> how many of its changes wait to be sent (the outbox but what the server took)."""
        counts: dict[str, int] = {}
        for row in self.conn.execute(f"SELECT entity_id, body FROM pending_events WHERE status IN {UNSENT!r}"):
            payload = json.loads(row["body"])["payload"]
            chat = payload.get("chatId") or row["entity_id"]  # a chat's own event: the chat
            counts[chat] = counts.get(chat, 0) + 1
        return counts

    def search(self, text: str) -> list[fulltext.Hit]:
        """Titles and messages matching what was typed, newest first (webapp/search.py)."""
        return fulltext.search(self.conn, text)

    def messages_count(self, chat_id: str) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM messages WHERE chat_id = ?", (chat_id,)).fetchone()[0])

    def chat(self, chat_id: str) -> Chat | None:
        row = self.conn.execute("SELECT * FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return None if row is None else Chat.model_validate(dict(row))

    def message(self, message_id: str) -> Message | None:
        row = self.conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return None if row is None else Message.model_validate(dict(row))

    def unfinished_local_replies(self) -> list[Message]:
        """Replies still being written that no server run writes (a local assistant's)."""
        rows = self.conn.execute(
            f"SELECT * FROM messages WHERE status IN {UNFINISHED!r} AND run_id IS NULL"
        ).fetchall()
        return [Message.model_validate(dict(r)) for r in rows]

    def messages(self, chat_id: str) -> list[Message]:
        rows = self.conn.execute(
            "SELECT * FROM messages WHERE chat_id = ? ORDER BY created_at, id", (chat_id,)
        ).fetchall()
        return [Message.model_validate(dict(r)) for r in rows]

    def all_messages(self) -> list[Message]:
        rows = self.conn.execute("SELECT * FROM messages ORDER BY created_at, id").fetchall()
        return [Message.model_validate(dict(r)) for r in rows]

    def links(self, chat_id: str) -> list[Link]:
        """The chat's tree, without the messages' text (cheap for a long chat)."""
        rows = self.conn.execute("SELECT id, parent_id, created_at FROM messages WHERE chat_id = ?", (chat_id,))
        return [Link(*r) for r in rows]

    def messages_by_id(self, ids: list[str]) -> dict[str, Message]:
        found: dict[str, Message] = {}
        for start in range(0, len(ids), 500):  # SQLite's limit on parameters
            part = ids[start : start + 500]
            marks = ", ".join("?" for _ in part)
            for row in self.conn.execute(f"SELECT * FROM messages WHERE id IN ({marks})", part):
                found[row["id"]] = Message.model_validate(dict(row))
        return found

    def run_infos(self, chat_id: str) -> dict[str, RunInfo]:
        """How the server's runs of a chat ended, by reply id, as it last said (kept for offline)."""
        known = json.loads(self.setting("runs:" + chat_id) or "[]")
        return {r["message_id"]: RunInfo(**r) for r in known}

    def confirmed(self) -> Snapshot:
        """The confirmed state (for tests and diagnostics): the shown rows the overlay did not
        change, and the server's version of those it did."""

        def rows(table: str) -> list[sqlite3.Row]:
            return self.conn.execute(
                f"""SELECT * FROM {table} WHERE id NOT IN (SELECT id FROM overlaid WHERE tbl = '{table}')
                    UNION ALL SELECT * FROM confirmed_{table} ORDER BY id"""
            ).fetchall()

        return Snapshot(
            chats=[Chat.model_validate(dict(r)) for r in rows("chats")],
            messages=[Message.model_validate(dict(r)) for r in rows("messages")],
        )


def is_pending(row: Chat | Message) -> bool:
    """A shown row that a still-unconfirmed local event made."""
    return row.last_seq == PENDING_SEQ
