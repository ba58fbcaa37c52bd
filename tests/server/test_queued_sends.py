"""A follow-up queued during an answer is sent exactly once, whatever the interleaving (Hypothesis).

Three senders act on what they last saw: two devices and the server's queue. Each may send a
queued message (``QueuedMessageSent``, with a run of its own, or without), edit or remove one (or
edit it as if it were sent), delete the chat, retry what it sent before (a lost answer), or look at
the state again. Every
event goes through the server's validation and the shared reducer: first in memory (many
interleavings), then through the real append of both backends (the same validation, with its
prefetch and its transactions, and the runs it queues).

At the end, for every queued message: at most one ``QueuedMessageSent`` of it was accepted; it is
``completed`` exactly when one was (an edit never sends it, nor puts it back); a message removed, or
whose chat was deleted, was never sent afterwards; each accepted sending with a run made exactly
one reply answering it, and the server queued exactly one run for it; its text is the last edit's.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.event_store import SqlEventStore
from server.run_store import SqlRunStore
from server.validation import validation_error
from shared.models import DomainEvent, EventResult, EventType, Message, QueuedSend
from shared.reducer import mutations
from shared.schema import MESSAGES, TABLES, Sql
from tests.server.events import T, event, new_id
from tests.server.stores import Clock, open_store

SQL = Sql("sqlite", scoped=False)
SENDERS = ("phone", "laptop", "server")
# ("edit as sent": an edit that would take a message out of the queue by itself, as a client that
# knows nothing of queues might write it)
ACTIONS = ("look", "send", "send", "send without a run", "edit", "edit as sent", "remove", "delete the chat", "retry")


class Authority(Protocol):
    """Where events are validated and applied: the account's state and its log."""

    async def submit(self, events: list[dict[str, Any]]) -> list[EventResult]: ...

    async def messages(self) -> dict[str, Message]: ...

    async def runs_of(self, reply_ids: set[str]) -> int:
        """How many runs the server queued whose reply is one of these."""


class InMemory:
    """The server's validation and the shared reducer, over the reducer's rows in SQLite."""

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.row_factory = sqlite3.Row
        for table in TABLES.values():
            for statement in SQL.create(table):
                self.conn.execute(statement)
        self.logged: dict[str, int] = {}
        self.runs: dict[str, str] = {}  # run -> its reply
        self.seq = 0

    # (StateReader)
    def _row(self, message_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return row if row is not None and self.chat_exists(row["chat_id"]) else None

    def chat_exists(self, chat_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM chats WHERE id = ?", (chat_id,)).fetchone() is not None

    def message_chat(self, message_id: str) -> str | None:
        row = self._row(message_id)
        return None if row is None else str(row["chat_id"])

    def message_status(self, message_id: str) -> str | None:
        row = self._row(message_id)
        return None if row is None else str(row["status"])

    def message_role(self, message_id: str) -> str | None:
        row = self._row(message_id)
        return None if row is None else str(row["role"])

    def message_run(self, message_id: str) -> str | None:
        row = self._row(message_id)
        return None if row is None or row["run_id"] is None else str(row["run_id"])

    def run_exists(self, run_id: str) -> bool:
        return run_id in self.runs

    def preset_exists(self, preset_id: str) -> bool:
        return False

    async def submit(self, events: list[dict[str, Any]]) -> list[EventResult]:
        results = []
        for raw in events:
            parsed = DomainEvent.model_validate(raw)
            if parsed.event_id in self.logged:
                results.append(EventResult(event_id=parsed.event_id, status="duplicate", seq=self.logged[parsed.event_id]))
                continue
            error = validation_error(parsed, self)
            if error is not None:
                results.append(EventResult(event_id=parsed.event_id, status="rejected", error=error))
                continue
            self.seq += 1
            for mutation in mutations(parsed.type, parsed.payload, self.seq, T):
                self.conn.execute(*SQL.mutation(mutation))
            payload = parsed.payload
            if isinstance(payload, QueuedSend) and payload.run_id is not None and payload.reply_id is not None:
                self.runs[payload.run_id] = payload.reply_id
            self.logged[parsed.event_id] = self.seq
            results.append(EventResult(event_id=parsed.event_id, status="accepted", seq=self.seq))
        return results

    async def messages(self) -> dict[str, Message]:
        rows = self.conn.execute(f"SELECT {', '.join(MESSAGES.column_names)} FROM messages").fetchall()
        return {r["id"]: Message.model_validate(dict(r)) for r in rows}

    async def runs_of(self, reply_ids: set[str]) -> int:
        return sum(reply in reply_ids for reply in self.runs.values())


class Stored:
    """The real append of a store (SQLite or PostgreSQL), one account."""

    def __init__(self, store: SqlEventStore, chat: str) -> None:
        self.store, self.account, self.chat = store, new_id(), chat

    async def submit(self, events: list[dict[str, Any]]) -> list[EventResult]:
        results, _ = await self.store.append(self.account, "dev", [DomainEvent.model_validate(e) for e in events])
        return results

    async def messages(self) -> dict[str, Message]:
        page = await self.store.read_state(self.account, None, None, 1000, None)
        return {m.id: m for m in page.snapshot.messages}

    async def runs_of(self, reply_ids: set[str]) -> int:
        return sum(r.message_id in reply_ids for r in await SqlRunStore(self.store.db).chat_runs(self.account, self.chat))


@dataclass
class Sender:
    seen: dict[str, Message] = field(default_factory=dict)  # the messages as this sender last saw them
    submitted: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Record:
    """What the senders did, for the checks at the end."""

    sends: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)  # message -> (status, event)
    edits: dict[str, str] = field(default_factory=dict)  # message -> the text of its last accepted edit
    gone_at: dict[str, int] = field(default_factory=dict)  # message -> the step it was removed (or its chat deleted)
    accepted_after_gone: list[str] = field(default_factory=list)


async def scenario(authority: Authority, chat: str, data: st.DataObject, steps: int) -> None:
    question, reply, run = new_id(), new_id(), new_id()
    queued = [new_id() for _ in range(data.draw(st.integers(1, 3), label="queued"))]
    setup = [
        event("ChatCreated", {"id": chat, "title": "t", "createdAt": T}),
        event("MessageAppended", {"id": question, "chatId": chat, "role": "user", "content": "q", "createdAt": T}),
        event("AssistantRunRequested", {"runId": run, "chatId": chat, "parentId": question, "messageId": reply, "assistantId": "demo"}),
        event("MessageEdited", {"id": reply, "chatId": chat, "role": "assistant", "content": "a", "parentId": question,
                                "status": "completed", "assistantId": "demo", "runId": run, "createdAt": T}),  # fmt: skip
        *(
            event("MessageAppended", {"id": q, "chatId": chat, "role": "user", "content": "v0", "status": "queued", "createdAt": T})
            for q in queued
        ),
    ]
    assert all(r.status == "accepted" for r in await authority.submit(setup))
    senders = {name: Sender() for name in SENDERS}
    for sender in senders.values():
        sender.seen = await authority.messages()
    record = Record(sends={q: [] for q in queued})
    for step in range(steps):
        name = data.draw(st.sampled_from(SENDERS), label="sender")
        sender = senders[name]
        action = data.draw(st.sampled_from(ACTIONS if name != "server" else ("look", "send", "retry")), label="action")
        target = data.draw(st.sampled_from(queued), label="message")
        if action == "look":
            sender.seen = await authority.messages()
            continue
        if action == "retry":
            if not sender.submitted:
                continue
            raw = data.draw(st.sampled_from(sender.submitted), label="again")
        elif action in ("send", "send without a run"):
            # The server sends the oldest it sees queued; a device, the one its person chose. Each
            # follows the newest message it sees (the reply that ended, or what came after).
            waiting = [q for q in queued if q in sender.seen and sender.seen[q].is_queued_follow_up]
            if name == "server" and waiting:
                target = waiting[0]
            newest = max((m for m in sender.seen.values() if not m.is_queued_follow_up), key=lambda m: (m.last_seq or 0, m.id), default=None)
            parent = None if newest is None else newest.id
            payload: dict[str, Any] = {"messageId": target, "chatId": chat, "parentId": parent}
            if action == "send":
                payload |= {"runId": new_id(), "replyId": new_id(), "assistantId": "demo"}
            raw = event("QueuedMessageSent", payload)
        elif action in ("edit", "edit as sent"):
            row = sender.seen.get(target)
            if row is None:
                continue
            change: dict[str, Any] = {"content": f"v{step + 1}", "updated_at": None, "last_seq": None}
            if action == "edit as sent":
                change["status"] = "completed"
            raw = event("MessageEdited", row.model_copy(update=change).wire())
        elif action == "remove":
            raw = event("MessageDeleted", {"id": target, "chatId": chat})
        else:
            raw = event("ChatDeleted", {"id": chat})
        sender.submitted.append(raw)
        [result] = await authority.submit([raw])
        if result.status != "accepted":
            continue
        kind, payload = raw["type"], raw["payload"]
        if kind == EventType.QUEUED_MESSAGE_SENT:
            record.sends[payload["messageId"]].append((result.status, raw))
            if payload["messageId"] in record.gone_at:
                record.accepted_after_gone.append(payload["messageId"])
        elif kind == EventType.MESSAGE_EDITED:
            record.edits[payload["id"]] = payload["content"]
        elif kind == EventType.MESSAGE_DELETED:
            record.gone_at.setdefault(payload["id"], step)
        elif kind == EventType.CHAT_DELETED:
            for q in queued:
                record.gone_at.setdefault(q, step)
    await check(authority, queued, record)


async def check(authority: Authority, queued: list[str], record: Record) -> None:
    rows = await authority.messages()
    assert record.accepted_after_gone == []  # nothing removed is ever sent
    for q in queued:
        sends = record.sends[q]
        assert len(sends) <= 1, sends  # at most once
        row = rows.get(q)
        if q in record.gone_at:
            assert row is None
            continue
        assert row is not None
        assert row.status == ("completed" if sends else "queued")  # sent exactly when one was accepted
        assert row.content == record.edits.get(q, "v0")
        replies = {m.id for m in rows.values() if m.parent_id == q and m.role == "assistant"}
        made = [raw["payload"]["replyId"] for _, raw in sends if "replyId" in raw["payload"]]
        assert replies == set(made)  # one reply per sending with a run, none without
        if made:
            reply = rows[made[0]]
            assert (reply.status, reply.run_id) == ("queued", sends[0][1]["payload"]["runId"])
        assert await authority.runs_of(replies) == len(made)  # and one run queued for it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_queued_message_is_sent_once_whatever_the_interleaving(data: st.DataObject) -> None:
    asyncio.run(scenario(InMemory(), new_id(), data, data.draw(st.integers(1, 25), label="steps")))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_same_through_the_real_append(backend: str, tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    store, cleanup = loop.run_until_complete(open_store(backend, tmp_path, Clock()))

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        chat = new_id()
        loop.run_until_complete(scenario(Stored(store, chat), chat, data, data.draw(st.integers(1, 20), label="steps")))

    try:
        run()
    finally:
        loop.run_until_complete(cleanup())
        loop.close()
