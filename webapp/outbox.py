"""The outbox: local changes, each queued and shown in one durable transaction, until the server
has taken them (then they wait for the log to bring them back) or refused them (then they are kept
aside, not applied, with the reason, until the user resends or discards them).

The outbox coalesces changes to an entity whose events have never left the device (see
``Outbox.add_local``). What it shows is the pending overlay (webapp/overlay.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from shared.models import DomainEvent, EventResult, EventType, Message, QueuedSend, RunRequest
from shared.thread import ROOT
from webapp import overlay
from webapp.database import Database

# Event types, for the outbox's coalescing (see Outbox.add_local).
CREATES = {EventType.CHAT_CREATED, EventType.MESSAGE_APPENDED, EventType.PRESET_CREATED}
UPSERTS = CREATES | {EventType.CHAT_UPDATED, EventType.MESSAGE_EDITED, EventType.PRESET_UPDATED, EventType.SETTINGS_UPDATED}
DELETES = {EventType.CHAT_DELETED, EventType.MESSAGE_DELETED, EventType.PRESET_DELETED}
# The table of the row an event creates (an import's events, see Outbox.add_imported).
CREATED_IN = {
    EventType.CHAT_CREATED: "chats", EventType.MESSAGE_APPENDED: "messages", EventType.PRESET_CREATED: "presets",
    EventType.SETTINGS_UPDATED: "settings",
}  # fmt: skip
# Events of the account rather than of a chat.
ACCOUNT_EVENTS = {EventType.SETTINGS_UPDATED, EventType.PRESET_CREATED, EventType.PRESET_UPDATED, EventType.PRESET_DELETED}
# Events that create a message (a new child at its parent's fork).
NEW_MESSAGES = {
    EventType.MESSAGE_APPENDED, EventType.ASSISTANT_RUN_REQUESTED, EventType.TOOL_CALL_REQUESTED,
    EventType.TOOL_CALL_SUCCEEDED, EventType.TOOL_CALL_FAILED,
}  # fmt: skip

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


class Outbox(Database):
    """The store's local changes (webapp/store.py: LocalStore)."""

    async def add_local(
        self, *events: DomainEvent, draft_of: str | None = None, resolves: Iterable[str] = (), draft_files: Iterable[str] | None = None
    ) -> None:
        """Queue ``events`` and show them, in order and in one transaction (a Send's new chat and
        its message: one durable write); returns once it is durable. In the same transaction:
        the draft of chat ``draft_of`` is cleared (the message it became supersedes it; of its
        files, those named by ``draft_files`` when given: the ones the message took), the
        rejected events ``resolves`` are forgotten (it is their corrected form), and a message
        created here is the one shown at its fork (an older choice there is dropped).

        The outbox coalesces changes to an entity whose events have never left the device: an
        edit rewrites the queued payload (only the latest full payload matters), and deleting an
        entity created here and never sent withdraws it, so nothing about it goes out at all."""
        with self._transaction() as conn:
            if draft_of is not None:
                conn.execute("DELETE FROM drafts WHERE chat_id = ?", (draft_of,))
                if draft_files is None:
                    conn.execute("DELETE FROM draft_files WHERE chat_id = ?", (draft_of,))
                else:
                    conn.executemany(
                        "DELETE FROM draft_files WHERE chat_id = ? AND sha256 = ?", [(draft_of, sha256) for sha256 in draft_files]
                    )
            conn.executemany("DELETE FROM rejected_events WHERE event_id = ?", [(e,) for e in resolves])
            for event in events:
                _add(conn, event)
        for event in events:
            self._saving[event.entity_id()] = self._committed
        await self._durable()

    async def add_imported(self, events: list[DomainEvent]) -> int:
        """Queue and show, in one transaction, the events of an import that create what this
        device does not have yet (an entity already here is left as it is, whatever the file
        says: the account's settings too; an event already queued is not queued twice). Returns
        how many were queued."""
        added = 0
        with self._transaction() as conn:
            for event in events:
                table = CREATED_IN[event.type]
                entity = event.entity_id()
                if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (entity,)).fetchone() is not None:
                    continue
                if conn.execute("SELECT 1 FROM pending_events WHERE event_id = ?", (event.event_id,)).fetchone():
                    continue
                _queue(conn, event)
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
        """Entity id -> where its first unsent change stands, for every entity with one:
        ``saving`` while its latest local change is committed but not durable yet (another
        action may draw the screen meanwhile: it must not say "saved")."""
        self._saving = {e: n for e, n in self._saving.items() if n > self._stored}
        found: dict[str, Delivery] = {e: Delivery("saving", None) for e in self._saving}
        for row in self.conn.execute(
            "SELECT entity_id, status, last_error FROM pending_events WHERE status <> 'sent' ORDER BY id"
        ):
            found.setdefault(row["entity_id"], Delivery(row["status"], row["last_error"]))
        return found

    def pending_count(self) -> int:
        """How many local changes the server has not taken yet."""
        return int(self.conn.execute("SELECT count(*) FROM pending_events WHERE status <> 'sent'").fetchone()[0])

    def unsent(self) -> dict[str, int]:
        """Chat -> how many of its changes wait to be sent (the outbox but what the server took)."""
        counts: dict[str, int] = {}
        for row in self.conn.execute(f"SELECT entity_id, body FROM pending_events WHERE status IN {UNSENT!r}"):
            body = json.loads(row["body"])
            if EventType(body["type"]) in ACCOUNT_EVENTS:
                continue  # (no chat's)
            chat = body["payload"].get("chatId") or row["entity_id"]  # a chat's own event: the chat
            counts[chat] = counts.get(chat, 0) + 1
        return counts

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
            changed = drop_logged(conn, self.last_seq()) or rejected
            if changed:
                overlay.reapply(conn)
        await self._durable()
        return changed

    async def record_failure(self, event_ids: list[str], error: str) -> None:
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE pending_events SET status = 'failed', last_error = ? WHERE event_id = ? AND status = 'sending'",
                [(error, e) for e in event_ids],
            )
        await self._durable()

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


def drop_logged(conn: sqlite3.Connection, cursor: int) -> bool:
    """Sent events whose seq the ``cursor`` has passed are part of the confirmed state now.
    True when any went: their effect on the shown state is then the log's, not theirs (an
    old duplicate, or an event compacted away), so the shown state must be rebuilt."""
    dropped = conn.execute("DELETE FROM pending_events WHERE status = 'sent' AND seq <= ?", (cursor,))
    return dropped.rowcount > 0


def _add(conn: sqlite3.Connection, event: DomainEvent) -> None:
    """Queue ``event`` and show it (in ``Outbox.add_local``'s transaction)."""
    entity = event.entity_id()
    if event.type is EventType.CHAT_DELETED:  # what this device kept about the chat goes with it
        for table in ("drafts", "branch_choices", "rejected_events"):
            conn.execute(f"DELETE FROM {table} WHERE chat_id = ?", (entity,))
    _show_new_branch(conn, event)
    queued = conn.execute(
        "SELECT id, body, status FROM pending_events WHERE entity_id = ? AND status <> 'sent' ORDER BY id",
        (entity,),
    ).fetchall()
    unsent = bool(queued) and all(row["status"] == "pending" for row in queued)
    first = DomainEvent.model_validate_json(queued[0]["body"]) if unsent else None
    # (Only a run of whole payloads is rewritten: a patch among them, such as the sending
    # of a queued message, would be lost.)
    whole = first is not None and all(json.loads(row["body"])["type"] in UPSERTS for row in queued)
    if first is not None and whole and event.type in UPSERTS and first.type in UPSERTS:
        rewritten = first.model_copy(update={"payload": event.payload})
        conn.execute("UPDATE pending_events SET body = ? WHERE id = ?", (json.dumps(rewritten.wire()), queued[0]["id"]))
        conn.execute("DELETE FROM pending_events WHERE entity_id = ? AND id > ?", (entity, queued[0]["id"]))
        overlay.add(conn, event)
    elif first is not None and event.type in DELETES and first.type in CREATES:
        conn.execute("DELETE FROM pending_events WHERE entity_id = ?", (entity,))
        if event.type is EventType.CHAT_DELETED:  # and what was queued inside the chat
            for row in conn.execute("SELECT id, body FROM pending_events").fetchall():
                if json.loads(row["body"])["payload"].get("chatId") == entity:
                    conn.execute("DELETE FROM pending_events WHERE id = ?", (row["id"],))
        overlay.reapply(conn)
    else:
        _queue(conn, event)


def _queue(conn: sqlite3.Connection, event: DomainEvent) -> None:
    """Into the outbox, and onto the shown state."""
    conn.execute(
        "INSERT INTO pending_events (event_id, entity_id, body) VALUES (?, ?, ?)",
        (event.event_id, event.entity_id(), json.dumps(event.wire())),
    )
    overlay.add(conn, event)


def _show_new_branch(conn: sqlite3.Connection, event: DomainEvent) -> None:
    """A message created here is the one its fork shows: the newest, once no older choice stands
    (a queued message sent from here, too: where it now follows, and its reply under it)."""
    payload = event.payload
    if event.type in NEW_MESSAGES and isinstance(payload, (Message, RunRequest)):
        conn.execute(
            "DELETE FROM branch_choices WHERE chat_id = ? AND fork = ?", (payload.chat_id, payload.parent_id or ROOT)
        )
    elif isinstance(payload, QueuedSend):
        forks = [payload.parent_id or ROOT] + ([payload.message_id] if payload.reply_id is not None else [])
        conn.executemany("DELETE FROM branch_choices WHERE chat_id = ? AND fork = ?", [(payload.chat_id, f) for f in forks])
