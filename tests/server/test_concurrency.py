"""Concurrent writers and polling readers on one account: every reader sees every committed
event exactly once, in order, with no gap, even when commits are slow to follow seq assignment
(the "reader skips a late-committing seq" race of SEQUENCE-based logs)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.appender import Appender
from server.databases import open_database
from server.event_store import SqlEventStore
from shared.models import DomainEvent
from tests.conftest import drop_schema, postgres_schema
from tests.server.events import chat_created, new_id
from tests.server.events import message as event_message
from tests.server.stores import Clock, open_store

WRITERS, EVENTS_EACH, READERS = 8, 25, 4


@pytest.fixture(params=["postgres", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlEventStore]:
    store, cleanup = await open_store(request.param, tmp_path, Clock())
    try:
        yield store
    finally:
        await cleanup()


async def test_readers_never_skip_or_repeat_a_seq(store: SqlEventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = Appender._write

    async def slow_write(self: Appender, *args: Any) -> None:
        # Widen the window between writing a seq and committing it.
        await real_write(self, *args)
        await asyncio.sleep(random.random() * 0.005)

    monkeypatch.setattr(Appender, "_write", slow_write)
    account = new_id()
    total = WRITERS * EVENTS_EACH
    done = asyncio.Event()

    async def writer() -> None:
        for _ in range(EVENTS_EACH):
            await store.append(account, "dev", [DomainEvent.model_validate(chat_created(new_id()))])

    async def reader() -> list[int]:
        cursor, seen = 0, []
        while cursor < total:
            page = await store.read_updates(account, cursor, random.randint(1, 7))
            for event in page.events:
                seen.append(event.seq)
                cursor = event.seq
            if not page.events:
                if done.is_set() and cursor >= await store.current_seq(account):
                    break
                await asyncio.sleep(0.001)
        return seen

    readers = [asyncio.ensure_future(reader()) for _ in range(READERS)]
    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    done.set()
    seen = await asyncio.gather(*readers)

    assert await store.current_seq(account) == total
    for sequence in seen:
        assert sequence == list(range(1, total + 1))


async def test_concurrent_requests_share_transactions(store: SqlEventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    transactions = 0
    real_transaction = Appender._transaction

    async def counting(self: Appender, group: Any) -> Any:
        nonlocal transactions
        transactions += 1
        return await real_transaction(self, group)

    monkeypatch.setattr(Appender, "_transaction", counting)
    accounts = [new_id() for _ in range(20)]
    outcomes = await asyncio.gather(
        *(store.append(a, "dev", [DomainEvent.model_validate(chat_created(new_id()))]) for a in accounts)
    )
    assert all(o[0][0].status == "accepted" for o in outcomes)
    assert transactions < len(accounts) / 2  # group commit: far fewer transactions than requests
    for account in accounts:
        assert await store.current_seq(account) == 1


async def test_a_failing_request_does_not_fail_the_others_it_shared_a_transaction_with(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import server.appender

    real_mutations = server.appender.mutations
    poisoned = new_id()

    def poisoned_mutations(kind: Any, payload: Any, seq: int, at: str) -> Any:
        if payload.id == poisoned:
            raise RuntimeError("this request's own failure")
        return real_mutations(kind, payload, seq, at)

    monkeypatch.setattr(server.appender, "mutations", poisoned_mutations)
    accounts = [new_id() for _ in range(10)]
    calls = [store.append(a, "dev", [DomainEvent.model_validate(chat_created(new_id()))]) for a in accounts]
    calls.insert(5, store.append(accounts[0], "dev", [DomainEvent.model_validate(chat_created(poisoned))]))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)

    assert isinstance(outcomes.pop(5), RuntimeError)
    assert all(not isinstance(o, BaseException) and o[0][0].status == "accepted" for o in outcomes)
    assert [await store.current_seq(a) for a in accounts] == [1] * len(accounts)


async def test_a_transaction_that_waited_for_the_lock_sees_what_the_one_before_it_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two server processes append to one account at once. The second one's read of the
    account's rows must show what the first committed while the second waited for its lock
    (PostgreSQL takes a statement's snapshot before the lock is granted)."""
    schema, url = await postgres_schema()
    first, second = SqlEventStore(open_database(url), Clock()), SqlEventStore(open_database(url), Clock())
    await first.open()
    await second.open()
    writing, release = asyncio.Event(), asyncio.Event()
    try:
        account, chat = new_id(), new_id()
        created = chat_created(chat)
        real_write = Appender._write

        async def paused_write(self: Appender, *args: Any) -> None:
            if self is first._appender:  # the first process holds the lock until released
                writing.set()
                await release.wait()
            await real_write(self, *args)

        monkeypatch.setattr(Appender, "_write", paused_write)
        creating = asyncio.ensure_future(first.append(account, "dev-1", [DomainEvent.model_validate(created)]))
        await asyncio.wait_for(writing.wait(), 10)
        message = DomainEvent.model_validate(event_message("MessageAppended", new_id(), chat))
        retry = DomainEvent.model_validate(created)  # its eventId: committed by the first meanwhile
        adding = asyncio.ensure_future(second.append(account, "dev-2", [retry, message]))
        async with asyncio.timeout(10):  # the second's statement has started, and waits for the lock
            while not await first.db.read_one(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH locked AS%'"
            ):
                await asyncio.sleep(0.01)
        release.set()
        assert (await creating)[0][0].status == "accepted"
        results, head = await adding
        assert [(r.status, r.seq) for r in results] == [("duplicate", 1), ("accepted", 2)] and head == 2
    finally:
        release.set()
        await first.close()
        await second.close()
        await drop_schema(schema)


async def test_a_head_that_moves_between_the_read_and_the_write_sends_the_append_down_the_locking_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On PostgreSQL an append to a known account reads without a lock, then writes in one
    statement that checks, under the lock, that the heads have not moved. Here another process
    commits in between: the write must write nothing, and the append is done again under the lock."""
    import server.appender
    from server.postgres_db import _PostgresTx

    schema, url = await postgres_schema()
    first, second = SqlEventStore(open_database(url), Clock()), SqlEventStore(open_database(url), Clock())
    await first.open()
    await second.open()
    try:
        account, chat = new_id(), new_id()
        await first.append(account, "dev-1", [DomainEvent.model_validate(chat_created(new_id()))])
        created = chat_created(chat)
        real_fetchall, cut_in = _PostgresTx.fetchall, []

        async def fetchall(self: _PostgresTx, sql: str, *params: Any) -> Any:
            if "FOR UPDATE" in sql and not cut_in:  # the first's write: the second commits first
                cut_in.append(None)
                cut_in[0] = await second.append(account, "dev-2", [DomainEvent.model_validate(created)])
            return await real_fetchall(self, sql, *params)

        locking = 0
        real_lock_and_prefetch = server.appender.lock_and_prefetch

        async def counting(*args: Any) -> Any:
            nonlocal locking
            locking += 1
            return await real_lock_and_prefetch(*args)

        monkeypatch.setattr(_PostgresTx, "fetchall", fetchall)
        monkeypatch.setattr(server.appender, "lock_and_prefetch", counting)
        message = DomainEvent.model_validate(event_message("MessageAppended", new_id(), chat))
        results, head = await first.append(account, "dev-1", [DomainEvent.model_validate(created), message])

        assert [(r.status, r.seq) for r in cut_in[0][0]] == [("accepted", 2)]
        assert [(r.status, r.seq) for r in results] == [("duplicate", 2), ("accepted", 3)] and head == 3
        assert locking == 1  # the first's write wrote nothing; its append was done under the lock
        updates = await first.read_updates(account, 0, 10)
        assert [e.seq for e in updates.events] == [1, 2, 3]
    finally:
        await first.close()
        await second.close()
        await drop_schema(schema)


async def test_an_append_made_as_the_last_writer_finishes_is_still_written(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that comes while the only writer task is ending (its queue empty, the task not
    yet done) must get a writer, not wait for some later append to start one."""
    import server.appender

    monkeypatch.setattr(server.appender, "MAX_WRITERS", 1)
    account, later = new_id(), []
    real_transaction = Appender._transaction

    async def transaction(self: Appender, group: Any) -> Any:
        outcomes = await real_transaction(self, group)
        if not later:  # its first step runs after the writer's loop ends, before the task is done
            event = DomainEvent.model_validate(chat_created(new_id()))
            later.append(asyncio.ensure_future(store.append(account, "dev", [event])))
        return outcomes

    monkeypatch.setattr(Appender, "_transaction", transaction)
    await store.append(account, "dev", [DomainEvent.model_validate(chat_created(new_id()))])
    [result], head = await asyncio.wait_for(later[0], 5)
    assert result.seq == 2 and head == 2
