"""The RunStore contract (server/run_store.py), one suite for both backends (SQLite and
PostgreSQL): claim order and exclusivity, leases expiring and renewed, a run's end with its usage
or error, a chat's runs, and whether a reply is still running. Runs come into being as they do
in the app: an appended ``AssistantRunRequested`` (server/appender.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from server.event_store import SqlEventStore
from server.run_store import Run, RunRecord, SqlRunStore
from shared.assistants import Usage
from shared.models import DomainEvent, EventType, Message, format_time
from tests.server.events import chat_created, event, message, new_id
from tests.server.stores import Clock, open_store

LEASE = timedelta(seconds=30)
INTERRUPTED = "the server stopped while writing this answer"


@dataclass
class Backend:
    clock: Clock
    events: SqlEventStore
    runs: SqlRunStore

    def later(self, delta: timedelta = LEASE) -> datetime:
        return self.clock.now + delta

    async def append(self, account: str, *raw: dict[str, Any], origin: str = "dev") -> None:
        results, _ = await self.events.append(account, origin, [DomainEvent.model_validate(r) for r in raw])
        assert all(r.status == "accepted" for r in results), results

    async def chat(self, account: str) -> tuple[str, str]:
        """A new chat with a question in it: (chat, question)."""
        chat, question = new_id(), new_id()
        await self.append(account, chat_created(chat), message("MessageAppended", question, chat, "What is up?"))
        return chat, question

    async def request(self, account: str, chat: str, parent: str) -> Run:
        """A run asked for, a second after the one before (claims go by the time of the request)."""
        self.clock.now += timedelta(seconds=1)
        run = Run(account, new_id(), chat, new_id(), "fake")
        payload = {"runId": run.id, "chatId": chat, "parentId": parent, "messageId": run.message_id, "assistantId": "fake"}
        await self.append(account, event("AssistantRunRequested", payload))
        return run

    async def a_run(self, account: str | None = None) -> Run:
        """A run asked for in a chat of its own."""
        account = account or new_id()
        return await self.request(account, *await self.chat(account))

    async def edit(self, run: Run, status: str, content: str = "") -> bool:
        """The reply written as the worker writes it (from the server); whether it was accepted."""
        [reply] = [m for m in await self.runs.chat_messages(run.account_id, run.chat_id) if m.id == run.message_id]
        edited = reply.model_copy(update={"status": status, "content": content, "updated_at": None, "last_seq": None})
        domain = DomainEvent(event_id=new_id(), type=EventType.MESSAGE_EDITED, payload=edited, created_at=format_time(self.clock.now))
        [result], _ = await self.events.append(run.account_id, "server", [domain])
        return result.status == "accepted"

    async def record(self, run: Run) -> RunRecord:
        [record] = [r for r in await self.runs.chat_runs(run.account_id, run.chat_id) if r.id == run.id]
        return record

    async def claim_all(self, owner: str) -> list[Run]:
        """What one claimer takes until nothing more may start."""
        claimed = []
        while (run := await self.runs.claim(owner, self.later())) is not None:
            claimed.append(run)
        return claimed


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    clock = Clock()
    store, cleanup = await open_store(request.param, tmp_path, clock)
    try:
        yield Backend(clock, store, SqlRunStore(store.db))
    finally:
        await cleanup()


async def finish(b: Backend, run: Run, owner: str, status: str = "completed") -> None:
    await b.runs.finish(run, owner, status, usage=Usage(7, 3), reported=True, error=None, now=b.clock.now)


async def test_runs_are_claimed_oldest_first_one_at_a_time_per_chat(backend: Backend) -> None:
    b = backend
    alice, bob = new_id(), new_id()
    first_chat, first_question = await b.chat(alice)
    first = await b.request(alice, first_chat, first_question)
    other_chat = await b.a_run(alice)
    again = await b.request(alice, first_chat, first_question)  # the same chat: waits for `first`
    bobs = await b.a_run(bob)
    assert await b.claim_all("p") == [first, other_chat, bobs]
    assert [r.status for r in await b.runs.chat_runs(alice, first_chat)] == ["streaming", "queued"]
    await finish(b, first, "p")
    assert await b.claim_all("p") == [again]  # its turn, once the chat's run before it ended
    await finish(b, again, "p")
    assert await b.runs.claim("p", b.later()) is None


async def test_two_claimers_never_get_the_same_run(backend: Backend) -> None:
    """Claimers at once (on PostgreSQL, each in a transaction of its own on its own connection):
    every run that may start is taken by exactly one, and a chat's second run by none."""
    b = backend
    firsts, seconds = [], []
    for _ in range(8):
        account = new_id()
        chat, question = await b.chat(account)
        firsts.append(await b.request(account, chat, question))
        seconds.append(await b.request(account, chat, question))
    takes = await asyncio.gather(*(b.claim_all(f"p{i}") for i in range(4)))
    claimed = [run for take in takes for run in take]
    assert sorted(claimed, key=lambda r: r.id) == sorted(firsts, key=lambda r: r.id)
    for owner, take in enumerate(takes):
        for run in take:
            await finish(b, run, f"p{owner}")
    takes = await asyncio.gather(*(b.claim_all(f"q{i}") for i in range(4)))
    assert sorted((run for take in takes for run in take), key=lambda r: r.id) == sorted(seconds, key=lambda r: r.id)
    assert {(await b.record(run)).upstream_calls for run in firsts + seconds} == {1}  # each model asked once


async def test_a_claim_passes_over_a_run_another_postgresql_transaction_has_locked(tmp_path: Path) -> None:
    """FOR UPDATE SKIP LOCKED: a claimer neither waits for nor takes the run another is taking."""
    clock = Clock()
    store, cleanup = await open_store("postgres", tmp_path, clock)
    b = Backend(clock, store, SqlRunStore(store.db))
    try:
        taken, free = await b.a_run(), await b.a_run()
        async with store.db.transaction(write=True) as tx:  # another claimer, mid-claim
            await tx.fetchone("SELECT id FROM runs WHERE account_id = ? AND id = ? FOR UPDATE", taken.account_id, taken.id)
            assert await asyncio.wait_for(b.runs.claim("p", b.later()), 5) == free
            assert await asyncio.wait_for(b.runs.claim("p", b.later()), 5) is None
        assert await b.runs.claim("p", b.later()) == taken
    finally:
        await cleanup()


async def test_a_lease_is_renewed_by_its_owner_and_an_expired_one_is_taken_over_once(backend: Backend) -> None:
    b = backend
    run = await b.a_run()
    assert await b.runs.claim("p", b.later()) == run
    assert await b.runs.take_over("q", b.later(LEASE / 2), b.later(2 * LEASE)) == []
    assert await b.runs.renew(run, "p", b.later(2 * LEASE))
    assert not await b.runs.renew(run, "q", b.later(3 * LEASE))  # not q's lease
    assert await b.runs.take_over("q", b.later(LEASE + timedelta(seconds=1)), b.later(3 * LEASE)) == []  # renewed past it
    # The owner stops renewing (its process died): past the lease, one of the others takes the
    # run over, to end it; the run is still streaming until it does.
    past = b.later(2 * LEASE + timedelta(seconds=1))
    taken = await asyncio.gather(*(b.runs.take_over(owner, past, b.later(3 * LEASE)) for owner in "qrs"))
    assert sorted(map(len, taken)) == [0, 0, 1] and [run] in taken
    taker = "qrs"[taken.index([run])]
    assert (await b.record(run)).status == "streaming"
    # The lease is the taker's now: the old owner can neither renew it nor end the run its way.
    assert not await b.runs.renew(run, "p", b.later(4 * LEASE))
    await finish(b, run, "p")
    assert (await b.record(run)).status == "streaming"
    # Should the taker die too before it has ended the run, its lease runs out in turn.
    assert await b.runs.take_over("t", b.later(3 * LEASE + timedelta(seconds=1)), b.later(5 * LEASE)) == [run]
    assert not await b.runs.renew(run, taker, b.later(6 * LEASE))
    await b.runs.finish(run, "t", "failed_upstream", usage=None, reported=False, error=INTERRUPTED, now=b.clock.now)
    assert await b.record(run) == RunRecord(
        id=run.id, message_id=run.message_id, assistant_id="fake", status="failed_upstream", error=INTERRUPTED,
        prompt_tokens=None, completion_tokens=None, usage_reported=False, upstream_calls=1,
    )  # fmt: skip
    assert await b.runs.take_over("u", b.later(10 * LEASE), b.later(11 * LEASE)) == []  # an ended run has no lease
    assert await b.runs.claim("p", b.later()) is None  # a failed run is never taken up again


async def test_finish_records_the_usage_or_the_error_and_ends_the_lease(backend: Backend) -> None:
    b = backend
    done, failed, stopped, demo = await b.a_run(), await b.a_run(), await b.a_run(), await b.a_run()
    assert await b.claim_all("p") == [done, failed, stopped, demo]
    await b.runs.finish(done, "q", "failed_upstream", usage=None, reported=False, error="not q's", now=b.clock.now)
    assert (await b.record(done)).status == "streaming"  # only the lease's owner ends a run
    await b.runs.finish(done, "p", "completed", usage=Usage(7, 600), reported=True, error=None, now=b.clock.now)
    await b.runs.finish(failed, "p", "failed_upstream", usage=Usage(0, 3), reported=False, error="HTTP 502", now=b.clock.now)
    await b.runs.finish(stopped, "p", "cancelled", usage=None, reported=False, error="stopped before it started", now=b.clock.now)
    await b.runs.finish(demo, "p", "completed", usage=Usage(5, 80, estimated=True), reported=True, error=None, now=b.clock.now)
    assert [(await b.record(r)).summary().wire() for r in (done, failed, stopped, demo)] == [
        {"runId": done.id, "messageId": done.message_id, "assistantId": "fake", "status": "completed",
         "error": None, "promptTokens": 7, "completionTokens": 600, "usageReported": True, "usageEstimated": False},
        {"runId": failed.id, "messageId": failed.message_id, "assistantId": "fake", "status": "failed_upstream",
         "error": "HTTP 502", "promptTokens": 0, "completionTokens": 3, "usageReported": False, "usageEstimated": False},
        {"runId": stopped.id, "messageId": stopped.message_id, "assistantId": "fake", "status": "cancelled",
         "error": "stopped before it started", "promptTokens": None, "completionTokens": None, "usageReported": False, "usageEstimated": False},
        {"runId": demo.id, "messageId": demo.message_id, "assistantId": "fake", "status": "completed",
         "error": None, "promptTokens": 5, "completionTokens": 80, "usageReported": True, "usageEstimated": True},
    ]  # fmt: skip
    for run in (done, failed, stopped, demo):
        assert not await b.runs.renew(run, "p", b.later())
    assert await b.runs.take_over("q", b.later(10 * LEASE), b.later(11 * LEASE)) == []  # an ended run has no lease to run out


async def test_a_chats_runs_are_its_own_in_the_order_requested(backend: Backend) -> None:
    b = backend
    alice = new_id()
    chat, question = await b.chat(alice)
    runs = [await b.request(alice, chat, question) for _ in range(3)]
    elsewhere = await b.a_run(alice)
    assert await b.runs.claim("p", b.later()) == runs[0]
    assert await b.runs.chat_runs(alice, chat) == [
        RunRecord(
            id=run.id,
            message_id=run.message_id,
            assistant_id="fake",
            status=status,
            error=None,
            prompt_tokens=None,
            completion_tokens=None,
            usage_reported=False,
            upstream_calls=calls,
        )  # fmt: skip
        for run, status, calls in zip(runs, ["streaming", "queued", "queued"], [1, 0, 0])
    ]
    assert [r.id for r in await b.runs.chat_runs(alice, elsewhere.chat_id)] == [elsewhere.id]
    assert await b.runs.chat_runs(new_id(), chat) == []  # another account's chat of that id: none
    assert await b.runs.chat_runs(alice, new_id()) == []


async def test_a_runs_chat_messages_are_its_history_and_its_reply(backend: Backend) -> None:
    b = backend
    alice = new_id()
    chat, question = await b.chat(alice)
    run = await b.request(alice, chat, question)
    await b.a_run(alice)  # another chat's messages are not this one's
    messages = {m.id: m for m in await b.runs.chat_messages(alice, chat)}
    assert set(messages) == {question, run.message_id}
    assert messages[question].role == "user" and messages[question].content == "What is up?"
    reply = messages[run.message_id]
    assert isinstance(reply, Message) and reply.role == "assistant" and reply.status == "queued"
    assert reply.parent_id == question and reply.assistant_id == "fake" and reply.run_id == run.id
    assert await b.runs.chat_messages(new_id(), chat) == []


async def test_a_reply_is_still_running_until_stopped_finished_or_deleted(backend: Backend) -> None:
    b = backend
    stopped, finished, deleted = await b.a_run(), await b.a_run(), await b.a_run()
    for run in (stopped, finished, deleted):
        assert await b.runs.still_running(run.account_id, run.message_id)  # queued
        assert await b.edit(run, "streaming", "so far")
        assert await b.runs.still_running(run.account_id, run.message_id)
    await b.append(stopped.account_id, event("AssistantRunCancelled", {"runId": stopped.id, "messageId": stopped.message_id}))
    assert await b.edit(finished, "completed", "all of it")
    await b.append(deleted.account_id, event("ChatDeleted", {"id": deleted.chat_id}))
    for run in (stopped, finished, deleted):
        assert not await b.runs.still_running(run.account_id, run.message_id)
    live = await b.a_run()
    assert not await b.runs.still_running(new_id(), live.message_id)  # another account's
    assert not await b.runs.still_running(live.account_id, new_id())
