"""The EventStore contract, one suite for both backends (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import server.append_sql
from server.event_store import SqlEventStore
from server.store import Commit, CursorExpired, Rejected
from shared.models import DomainEvent
from tests.server.events import chat_created, event, message, new_id
from tests.server.stores import Clock, open_store


@pytest.fixture(params=["sqlite", "postgres"])
async def clock_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Clock, SqlEventStore]]:
    clock = Clock()
    store, cleanup = await open_store(request.param, tmp_path, clock)
    try:
        yield clock, store
    finally:
        await cleanup()


@pytest.fixture
def store(clock_store: tuple[Clock, SqlEventStore]) -> SqlEventStore:
    return clock_store[1]


def parse(*raw: dict[str, Any]) -> list[DomainEvent | Rejected]:
    return [DomainEvent.model_validate(r) for r in raw]


async def test_seqs_are_gapless_per_account_and_duplicates_keep_theirs(store: SqlEventStore) -> None:
    a, b = new_id(), new_id()
    first = chat_created(new_id())
    results, head = await store.append(a, "dev", parse(first, chat_created(new_id())))
    assert [r.seq for r in results] == [1, 2] and head == 2
    results, head = await store.append(b, "dev", parse(first))  # another account: its own log
    assert results[0].status == "accepted" and results[0].seq == 1 and head == 1
    unknown = message("MessageAppended", new_id(), new_id())
    results, head = await store.append(a, "dev", parse(unknown, first, chat_created(new_id())))
    assert [(r.status, r.seq) for r in results] == [("rejected", None), ("duplicate", 1), ("accepted", 3)]
    assert head == 3 and await store.current_seq(a) == 3
    assert [e.seq for e in (await store.read_updates(a, 0, 10)).events] == [1, 2, 3]


async def test_each_commit_that_accepted_events_calls_on_commit_once_with_them(store: SqlEventStore) -> None:
    commits: list[Commit] = []
    store.on_commit = commits.append
    account, chat = new_id(), new_id()
    first, second = chat_created(chat), message("MessageAppended", new_id(), chat)
    unknown = message("MessageAppended", new_id(), new_id())
    await store.append(account, "dev", parse(first, unknown, second))
    assert [(c.account_id, c.current_seq, [e.event_id for e in c.accepted]) for c in commits] == [
        (account, 2, [first["eventId"], second["eventId"]])  # (not the rejected one)
    ]
    await store.append(account, "dev", parse(first))  # a duplicate only: nothing new
    await store.append(account, "dev", parse(unknown))  # a rejection only
    await store.append(account, "dev", [Rejected(new_id(), "not an event")])
    assert len(commits) == 1
    together = [store.append(new_id(), "dev", parse(chat_created(new_id()))) for _ in range(5)]
    await asyncio.gather(*together)  # (committed in one group, perhaps: still one call per append)
    assert len(commits) == 6 and all(len(c.accepted) == 1 for c in commits[1:])


async def test_a_rejected_event_leaves_no_trace(store: SqlEventStore) -> None:
    account = new_id()
    bad = Rejected(new_id(), "payload.role: Field required")
    results, head = await store.append(account, "dev", [bad])
    assert results[0].status == "rejected" and head == 0
    assert (await store.read_updates(account, 0, 10)).events == []
    # Rejected events are not remembered: the same eventId may come back, fixed, and be accepted.
    fixed = chat_created(new_id())
    fixed["eventId"] = bad.event_id
    results, _ = await store.append(account, "dev", parse(fixed))
    assert results[0].status == "accepted"


async def test_an_error_in_the_middle_of_a_batch_applies_nothing(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    account, chat = new_id(), new_id()
    await store.append(account, "dev", parse(chat_created(chat)))
    real_runs = server.append_sql._runs

    def failing_runs(*args: Any) -> Any:
        # Called once the batch's log rows are inserted: the first run of state writes goes out,
        # then the failure.
        for index, run in enumerate(real_runs(*args)):
            if index == 1 or len(run[1]) > 1:
                raise RuntimeError("injected failure")
            yield run

    monkeypatch.setattr(server.append_sql, "_runs", failing_runs)
    batch = parse(message("MessageAppended", new_id(), chat), message("MessageAppended", new_id(), chat))
    with pytest.raises(RuntimeError, match="injected"):
        await store.append(account, "dev", batch)
    monkeypatch.setattr(server.append_sql, "_runs", real_runs)

    assert await store.current_seq(account) == 1
    assert [e.seq for e in (await store.read_updates(account, 0, 10)).events] == [1]
    state = await store.read_state(account, None, None, 100, None)
    assert state.snapshot.messages == []
    # Neither eventId was recorded: a retry is accepted, with the next seqs.
    results, head = await store.append(account, "dev", batch)
    assert [r.status for r in results] == ["accepted", "accepted"] and head == 3


async def test_superseded_events_go_and_cursors_stay_valid(clock_store: tuple[Clock, SqlEventStore]) -> None:
    clock, store = clock_store
    account, chat, kept, gone = new_id(), new_id(), new_id(), new_id()
    await store.append(account, "dev", parse(chat_created(chat, "v1"), message("MessageAppended", kept, chat, "a")))
    await store.append(account, "dev", parse(message("MessageAppended", gone, chat, "b")))
    await store.append(account, "dev", parse(message("MessageEdited", kept, chat, "a2")))  # 4 supersedes 2
    await store.append(account, "dev", parse(event("MessageDeleted", {"id": gone, "chatId": chat})))  # 5 supersedes 3
    await store.append(account, "dev", parse(event("ChatUpdated", {"id": chat, "title": "v2", "createdAt": "2026-01-01T00:00:00Z"})))  # 6 supersedes 1

    # Within the grace period nothing goes, so live sockets never miss an event.
    result = await store.compact(account, retention_seconds=10**9, grace_seconds=60)
    assert result.superseded_removed == 0
    clock.now += timedelta(seconds=61)
    result = await store.compact(account, retention_seconds=10**9, grace_seconds=60)
    assert (result.superseded_removed, result.truncated, result.min_available_seq) == (3, 0, 1)
    assert [e.seq for e in (await store.read_updates(account, 0, 10)).events] == [4, 5, 6]
    # Every cursor is still valid and still reaches the same state.
    for cursor in range(0, 7):
        await store.read_updates(account, cursor, 10)
    # The idempotency record outlives its event.
    again, _ = await store.append(account, "dev", parse(chat_created(chat, "v1")))
    assert again[0].status == "rejected"  # a new eventId: the chat exists


async def test_a_chat_deleted_later_supersedes_its_messages_but_deletes_stay(
    clock_store: tuple[Clock, SqlEventStore],
) -> None:
    clock, store = clock_store
    account, chat, msg = new_id(), new_id(), new_id()
    await store.append(account, "dev", parse(chat_created(chat), message("MessageAppended", msg, chat)))
    await store.append(account, "dev", parse(event("ChatDeleted", {"id": chat})))
    await store.append(account, "dev", parse(chat_created(chat, "again")))  # the same id, re-created
    clock.now += timedelta(seconds=1)
    result = await store.compact(account, retention_seconds=10**9, grace_seconds=0)
    # The delete stays: a client that still holds the old chat's messages needs it.
    assert [e.type for e in (await store.read_updates(account, 0, 10)).events] == ["ChatDeleted", "ChatCreated"]
    assert result.superseded_removed == 2


async def test_horizon_truncation_expires_old_cursors_only(clock_store: tuple[Clock, SqlEventStore]) -> None:
    clock, store = clock_store
    account = new_id()
    old = chat_created(new_id())
    await store.append(account, "dev", parse(old, chat_created(new_id())))
    clock.now += timedelta(hours=2)
    await store.append(account, "dev", parse(chat_created(new_id()), chat_created(new_id())))
    clock.now += timedelta(seconds=1)

    result = await store.compact(account, retention_seconds=3600, grace_seconds=0)
    assert (result.truncated, result.min_available_seq) == (2, 3)
    with pytest.raises(CursorExpired) as expired:
        await store.read_updates(account, 1, 10)
    assert (expired.value.min_available_seq, expired.value.current_seq) == (3, 4)
    with pytest.raises(CursorExpired):
        await store.read_state(account, 1, None, 10, None)
    assert [e.seq for e in (await store.read_updates(account, 2, 10)).events] == [3, 4]
    assert (await store.read_state(account, None, None, 10, None)).up_to_seq == 4
    # A resubmitted old event is still a duplicate, with its seq.
    again, _ = await store.append(account, "dev", parse(old))
    assert (again[0].status, again[0].seq) == ("duplicate", 1)

    # Retention 0: everything older than now is below the horizon; an up-to-date cursor stays valid.
    result = await store.compact(account, retention_seconds=0, grace_seconds=0)
    assert result.min_available_seq == 5
    assert (await store.read_updates(account, 4, 10)).events == []
    with pytest.raises(CursorExpired):
        await store.read_updates(account, 3, 10)


async def test_the_horizon_waits_for_recently_active_devices(clock_store: tuple[Clock, SqlEventStore]) -> None:
    clock, store = clock_store
    account, device = new_id(), new_id()
    await store.create_account(account, f"u{device[:8]}", "hash")
    await store.create_session(new_id(), account, device, "laptop")
    await store.append(account, "dev", parse(*(chat_created(new_id()) for _ in range(4))))
    await store.record_cursor(account, device, 2)
    clock.now += timedelta(hours=2)
    await store.record_cursor(account, device, 2)  # seen again recently, still at seq 2
    result = await store.compact(account, retention_seconds=3600, grace_seconds=0)
    assert result.min_available_seq == 3  # not 5: the device's cursor holds the horizon
    assert [e.seq for e in (await store.read_updates(account, 2, 10)).events] == [3, 4]
    clock.now += timedelta(hours=2)  # the device has not been seen within the retention window
    assert (await store.compact(account, retention_seconds=3600, grace_seconds=0)).min_available_seq == 5


async def test_accounts_and_sessions(store: SqlEventStore) -> None:
    from server.store import UsernameTaken

    account = str(uuid.uuid4())
    await store.create_account(account, "dora", "h")
    with pytest.raises(UsernameTaken):
        await store.create_account(str(uuid.uuid4()), "dora", "h2")
    found = await store.find_account("dora")
    assert found is not None and found.id == account and found.password_hash == "h"
    await store.create_session("token-hash", account, "device-1", "phone")
    session = await store.find_session("token-hash")
    assert session is not None and (session.account_id, session.device_id) == (account, "device-1")
    await store.delete_session("token-hash")
    assert await store.find_session("token-hash") is None


async def test_migrations_run_once(tmp_path: Path, clock_store: tuple[Clock, SqlEventStore]) -> None:
    clock, store = clock_store
    await store._migrate()  # a second start-up applies nothing again and loses nothing
    account = new_id()
    await store.append(account, "dev", parse(chat_created(new_id())))
    await store._migrate()
    assert await store.current_seq(account) == 1


async def test_concurrent_appends_to_one_account_serialize(store: SqlEventStore) -> None:
    account = new_id()
    results = await asyncio.gather(*(store.append(account, "dev", parse(chat_created(new_id()))) for _ in range(20)))
    assert sorted(r[0][0].seq for r in results) == list(range(1, 21))


async def test_a_batch_sees_its_own_earlier_events(store: SqlEventStore) -> None:
    account, chat, msg = new_id(), new_id(), new_id()
    created = chat_created(chat)
    batch = parse(
        created,
        message("MessageAppended", msg, chat),
        created,  # the same eventId again within the batch
        message("MessageEdited", msg, chat, "edited"),
        event("ChatDeleted", {"id": chat}),
        event("AssistantRunCancelled", {"runId": new_id(), "messageId": msg}),  # went with its chat
        message("MessageAppended", new_id(), chat),
        chat_created(chat, "again"),
    )
    results, head = await store.append(account, "dev", batch)
    assert [(r.status, r.seq, r.error) for r in results] == [
        ("accepted", 1, None),
        ("accepted", 2, None),
        ("duplicate", 1, None),
        ("accepted", 3, None),
        ("accepted", 4, None),
        ("rejected", None, "unknown message"),
        ("rejected", None, "unknown chat"),
        ("accepted", 5, None),
    ]
    state = await store.read_state(account, None, None, 100, None)
    assert [c.title for c in state.snapshot.chats] == ["again"] and state.snapshot.messages == []


async def test_device_cursors_are_written_at_most_every_30_seconds(clock_store: tuple[Clock, SqlEventStore]) -> None:
    clock, store = clock_store
    account, device = new_id(), new_id()
    await store.create_account(account, f"c{device[:8]}", "hash")
    await store.create_session(new_id(), account, device, "phone")

    async def recorded() -> int:
        row = await store.db.read_one("SELECT last_ack_seq FROM devices WHERE id = ?", device)
        assert row is not None
        return int(row[0])

    await store.record_cursor(account, device, 2)
    await store.record_cursor(account, device, 5)  # a poll a moment later: not written
    assert await recorded() == 2
    clock.now += timedelta(seconds=31)
    await store.record_cursor(account, device, 7)
    assert await recorded() == 7
