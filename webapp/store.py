"""The local database (one SQLite file, webapp/database.py): the server's confirmed state with
the pending overlay on top (webapp/overlay.py), the outbox (webapp/outbox.py), snapshots
(webapp/snapshots.py), the attachments to upload (webapp/uploads.py), the sync cursor, and what
this device keeps for itself (the account signed in, settings, drafts, the branch shown at each
fork). ``LocalStore`` is the one object the
client and the sync engine use: it is made of those parts, and runs the migrations (frozen in
webapp/migrations.py), applies the log's events, and holds the reads the UI draws from.

Every write is one SQLite transaction followed by ``Persistence.flush()``; a change counts as
saved (and may reach the network) only once that has returned.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from shared.models import SETTINGS_ID, UNFINISHED, Attachment, Chat, LoggedEvent, Message, Preset, RunSummary, Settings, Snapshot
from shared.thread import ROOT, Link, Step, children, shown_path
from webapp import overlay
from webapp import search as fulltext
from webapp.database import Persistence, utc_now
from webapp.migrations import MIGRATIONS
from webapp.outbox import Outbox, drop_logged
from webapp.snapshots import Snapshots
from webapp.uploads import Uploads


@dataclass(frozen=True)
class Account:
    user_id: str
    device_id: str
    username: str


# Everything that belongs to the account signed in (emptied when another one signs in).
ACCOUNT_TABLES = (
    "chats", "messages", "confirmed_chats", "confirmed_messages", "meta", "pending_events", "drafts",
    "rejected_events", "branch_choices", "overlaid", "snapshot_ids", "uploads", "draft_files",
    "presets", "confirmed_presets", "settings", "confirmed_settings",
)  # fmt: skip

# A queued follow-up (a user message waiting to be sent, shared/models.py ``is_queued_follow_up``)
# is not part of its chat's conversation until it is sent: the tree, and what is running, leave it out.
_NOT_QUEUED = "NOT (role = 'user' AND status = 'queued')"


class LocalStore(Outbox, Snapshots, Uploads):
    def __init__(self, path: str, persistence: Persistence, now: Callable[[], str] = utc_now) -> None:
        super().__init__(path, persistence, now)
        self._migrate()

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

    # --- account and settings ------------------------------------------------------------------

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

    # --- remote changes: the log (a snapshot: webapp/snapshots.py) --------------------------------

    async def apply_remote(self, events: list[LoggedEvent], current_seq: int | None = None) -> int:
        """Apply events from the log in seq order (those at or below the cursor are skipped), then
        re-apply the pending overlay. Returns how many were new."""
        applied = 0
        with self._transaction() as conn:
            cursor = self.last_seq()
            overlaid = overlay.overlaid(conn)
            for event in events:
                if event.seq <= cursor:
                    continue
                overlay.confirm(conn, event, overlaid)
                # Our own event, back from the log (maybe before the push's answer): it is
                # confirmed now, so it leaves the overlay.
                conn.execute("DELETE FROM pending_events WHERE event_id = ?", (event.event_id,))
                cursor = event.seq
                applied += 1
            if current_seq is not None:
                cursor = max(cursor, current_seq)  # compaction may have skipped superseded seqs
            self._set_meta(conn, "last_seq", str(cursor))
            self._set_meta(conn, "synced_at", self._now())
            if drop_logged(conn, self.last_seq()) or (applied and overlaid):
                overlay.reapply(conn)
        await self._durable()
        return applied

    # --- branches: which child this device shows at each fork -------------------------------------

    def shown_path(self, chat_id: str) -> list[Step]:
        """The chat's path as it is shown: at each fork the branch chosen, else the newest."""
        return shown_path(self.links(chat_id), self.branch_choices(chat_id))

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
        await self.save_drafts({chat_id: text})

    async def save_drafts(self, drafts: dict[str, str]) -> None:
        """Each chat's draft ("": none), in one durable write (none when each is what the
        database has, and durable: the composer emptied by a Send whose message cleared it)."""
        changed = {chat_id: text for chat_id, text in drafts.items() if self.draft(chat_id) != text}
        if not changed and self.all_durable():
            return
        with self._transaction() as conn:
            conn.executemany(
                "INSERT INTO drafts VALUES (?, ?) ON CONFLICT (chat_id) DO UPDATE SET text = excluded.text",
                [(chat_id, text) for chat_id, text in changed.items() if text],
            )
            conn.executemany("DELETE FROM drafts WHERE chat_id = ?", [(chat_id,) for chat_id, text in changed.items() if not text])
        await self._durable()

    def draft(self, chat_id: str) -> str:
        row = self.conn.execute("SELECT text FROM drafts WHERE chat_id = ?", (chat_id,)).fetchone()
        return "" if row is None else str(row[0])

    def drafted(self) -> set[str]:
        """The chats with a draft (text, or files attached)."""
        return {str(r[0]) for r in self.conn.execute("SELECT chat_id FROM drafts UNION SELECT chat_id FROM draft_files")}

    async def add_draft_file(self, chat_id: str, attachment: Attachment) -> None:
        """A file attached in the chat's composer (attached twice: kept once, where it was)."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO draft_files VALUES (?, ?, ?)", (chat_id, attachment.sha256, attachment.model_dump_json())
            )
        await self._durable()

    async def remove_draft_file(self, chat_id: str, sha256: str) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM draft_files WHERE chat_id = ? AND sha256 = ?", (chat_id, sha256))
        await self._durable()

    async def change_draft_files(self, added: list[tuple[str, Attachment]], removed: list[tuple[str, str]]) -> None:
        """Files added to drafts (``(chat, attachment)``, kept once each as ``add_draft_file``)
        and taken off (``(chat, sha256)``), in one durable write, in that order."""
        with self._transaction() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO draft_files VALUES (?, ?, ?)", [(chat, a.sha256, a.model_dump_json()) for chat, a in added]
            )
            conn.executemany("DELETE FROM draft_files WHERE chat_id = ? AND sha256 = ?", removed)
        await self._durable()

    def draft_files(self, chat_id: str) -> list[Attachment]:
        """The files attached in the chat's composer, in the order they were attached."""
        rows = self.conn.execute("SELECT attachment FROM draft_files WHERE chat_id = ? ORDER BY rowid", (chat_id,))
        return [Attachment.model_validate_json(r[0]) for r in rows]

    def unsent_files(self) -> dict[str, int]:
        """The files this device has not uploaded yet, by SHA-256, with their sizes: those in
        any chat's draft, and those queued (waiting or uploading; a failed one is not counted
        until it is tried again)."""
        found: dict[str, int] = {}
        for sha256, attachment in self.conn.execute("SELECT sha256, attachment FROM draft_files"):
            found[str(sha256)] = int(json.loads(attachment).get("size", 0))
        for sha256, size in self.conn.execute("SELECT sha256, size FROM uploads WHERE state IN ('waiting', 'uploading')"):
            found[str(sha256)] = int(size)
        return found

    # --- reads for the UI ----------------------------------------------------------------------

    def chats(self) -> list[Chat]:
        """Most recent activity first: a chat's newest message, or its creation."""
        return [chat for chat, _ in self.listed()]

    def listed(self) -> list[tuple[Chat, str]]:
        """The chats as ``chats`` orders them, each with the time of its latest activity."""
        rows = self.conn.execute(
            """SELECT c.*, COALESCE((SELECT MAX(m.created_at) FROM messages m WHERE m.chat_id = c.id), c.created_at)
                   AS active FROM chats c ORDER BY active DESC, c.id DESC"""
        ).fetchall()
        return [(Chat.model_validate(dict(r)), str(r["active"])) for r in rows]

    def running(self) -> set[str]:
        """The chats with a reply being written (a queued follow-up is not one)."""
        rows = self.conn.execute(f"SELECT DISTINCT chat_id FROM messages WHERE status IN {UNFINISHED!r} AND role <> 'user'")
        return {str(r[0]) for r in rows}

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

    def unfinished_local_replies(self, local: tuple[str, ...] = ()) -> list[Message]:
        """Replies still being written that no server run writes: a local assistant's (with no
        run; or, continued, by one of the ``local`` assistants, whose run no server has)."""
        marks = ", ".join("?" for _ in local) or "NULL"
        rows = self.conn.execute(
            f"SELECT * FROM messages WHERE status IN {UNFINISHED!r} AND role <> 'user'"
            f" AND (run_id IS NULL OR assistant_id IN ({marks}))",
            local,
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
        """The chat's tree, without the messages' text (cheap for a long chat); its queued
        follow-ups are not in it (``queued``) until they are sent."""
        rows = self.conn.execute(f"SELECT id, parent_id, created_at FROM messages WHERE chat_id = ? AND {_NOT_QUEUED}", (chat_id,))
        return [Link(*r) for r in rows]

    def queued(self, chat_id: str) -> list[Message]:
        """The chat's queued follow-ups, in the order they are to be sent: oldest first (by
        createdAt, then id)."""
        rows = self.conn.execute(
            "SELECT * FROM messages WHERE chat_id = ? AND role = 'user' AND status = 'queued' ORDER BY created_at, id", (chat_id,)
        ).fetchall()
        return [Message.model_validate(dict(r)) for r in rows]

    def queue_rows(self, chat_id: str) -> list[Message]:
        """What shared/followups.py's ``queue_state`` reads of a chat, and no more: its queued
        follow-ups, the replies still being written and the latest reply (a chat's whole history
        is not read at every redraw while something is queued)."""
        rows = self.conn.execute(
            f"""SELECT * FROM messages WHERE chat_id = :chat AND (
                    (role = 'user' AND status = 'queued') OR (role = 'assistant' AND status IN {UNFINISHED!r})
                    OR id = (SELECT id FROM messages WHERE chat_id = :chat AND role = 'assistant'
                             ORDER BY created_at DESC, id DESC LIMIT 1))""",
            {"chat": chat_id},
        ).fetchall()
        return [Message.model_validate(dict(r)) for r in rows]

    def settings(self) -> Settings | None:
        """The account's settings (its instructions, the default preset), or None before any were made."""
        row = self.conn.execute("SELECT * FROM settings WHERE id = ?", (SETTINGS_ID,)).fetchone()
        return None if row is None else Settings.model_validate(dict(row))

    def presets(self) -> list[Preset]:
        """The account's presets, by name (then id)."""
        rows = self.conn.execute("SELECT * FROM presets ORDER BY name, id").fetchall()
        return [Preset.model_validate(dict(r)) for r in rows]

    def preset(self, preset_id: str) -> Preset | None:
        """A preset, or None when there is none of that id (deleted: a chat naming it has none)."""
        row = self.conn.execute("SELECT * FROM presets WHERE id = ?", (preset_id,)).fetchone()
        return None if row is None else Preset.model_validate(dict(row))

    def messages_by_id(self, ids: list[str]) -> dict[str, Message]:
        found: dict[str, Message] = {}
        for start in range(0, len(ids), 500):  # SQLite's limit on parameters
            part = ids[start : start + 500]
            marks = ", ".join("?" for _ in part)
            for row in self.conn.execute(f"SELECT * FROM messages WHERE id IN ({marks})", part):
                found[row["id"]] = Message.model_validate(dict(row))
        return found

    def run_infos(self, chat_id: str) -> dict[str, RunSummary]:
        """How the server's runs of a chat ended, by reply id, as it last said (kept for offline)."""
        known = json.loads(self.setting("runs:" + chat_id) or "[]")
        return {r["message_id"]: RunSummary(**r) for r in known}

    def confirmed(self) -> Snapshot:
        """The confirmed state (for tests and diagnostics; webapp/overlay.py)."""
        return overlay.confirmed(self.conn)
