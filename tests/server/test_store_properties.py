"""Hypothesis: random histories against both backends keep the seed's invariants.

Each example runs in a fresh account of one store (accounts are isolated), so the store is opened
once per backend; Hypothesis drives the event loop itself.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.event_store import SqlEventStore
from server.store import Rejected
from shared.models import DomainEvent, LoggedEvent, Snapshot
from tests.server.events import chat_created, event, message, new_id
from tests.server.replay import as_state, at_most, replay
from tests.server.stores import Clock, open_store
from tests.shared.strategies import characters

TEXT = st.text(characters, max_size=8)


@st.composite
def histories(draw: st.DrawFn) -> list[list[dict[str, Any] | Rejected]]:
    """Batches of events; ids are drawn from those already used, so many events fit the state
    and some do not (unknown or deleted chats and messages), with duplicates and malformed ones."""
    chats: list[str] = []
    messages: list[tuple[str, str]] = []
    sent: list[dict[str, Any]] = []
    batches: list[list[dict[str, Any] | Rejected]] = []
    for _ in range(draw(st.integers(1, 14))):
        batch: list[dict[str, Any] | Rejected] = []
        for _ in range(draw(st.integers(1, 3))):
            chat = draw(st.sampled_from(chats)) if chats and draw(st.booleans()) else new_id()
            kind = draw(
                st.sampled_from(
                    ["ChatCreated", "ChatUpdated", "ChatDeleted", "MessageAppended", "MessageAppended",
                     "MessageEdited", "MessageDeleted", "duplicate", "malformed"]
                )
            )
            if kind == "duplicate" and sent:
                batch.append(draw(st.sampled_from(sent)))
                continue
            if kind == "malformed":
                batch.append(Rejected(new_id(), "payload: invalid"))
                continue
            if kind in ("ChatCreated", "ChatUpdated", "duplicate"):
                raw = chat_created(chat, draw(TEXT))
                raw["type"] = "ChatUpdated" if kind == "ChatUpdated" else "ChatCreated"
                chats.append(chat)
            elif kind == "ChatDeleted":
                raw = event("ChatDeleted", {"id": chat})
            else:
                if messages and kind != "MessageAppended" or (messages and draw(st.booleans())):
                    msg, chat = draw(st.sampled_from(messages))
                else:
                    msg = new_id()
                if kind == "MessageDeleted":
                    raw = event("MessageDeleted", {"id": msg, "chatId": chat})
                else:
                    raw = message(kind, msg, chat, draw(TEXT))
                    messages.append((msg, chat))
            sent.append(raw)
            batch.append(raw)
        batches.append(batch)
    return batches


def parse(batch: list[dict[str, Any] | Rejected]) -> list[DomainEvent | Rejected]:
    return [b if isinstance(b, Rejected) else DomainEvent.model_validate(b) for b in batch]


async def full_state(store: SqlEventStore, account: str, up_to: int | None = None) -> tuple[Snapshot, int]:
    """The state at ``up_to`` (default: now), read in small pages."""
    page = await store.read_state(account, up_to, None, 4, None)
    chats, messages, token = list(page.snapshot.chats), list(page.snapshot.messages), page.next_page
    while token is not None:
        more = await store.read_state(account, page.up_to_seq, None, 4, token)
        chats += more.snapshot.chats
        messages += more.snapshot.messages
        token = more.next_page
    return Snapshot(chats=chats, messages=messages), page.up_to_seq


async def log(store: SqlEventStore, account: str) -> list[LoggedEvent]:
    return (await store.read_updates(account, 0, 10_000)).events


async def check_invariants(store: SqlEventStore, account: str, compacted: bool) -> None:
    events = await log(store, account)
    current, head = await full_state(store, account)
    state = as_state(current)
    assert replay(events) == state  # the log, replayed, is the state
    for n in range(head + 1):
        upto = replay([e for e in events if e.seq <= n])
        if compacted:
            # The seed's invariant 3, literally: apply(events <= N) == rows with last_seq <= N.
            assert upto == at_most(state, n), n
        else:
            # Before compaction, older versions of rows changed after N are still in the log:
            # the invariant holds for every row not changed since N...
            for table, rows in at_most(state, n).items():
                for key, row in rows.items():
                    assert upto[table][key] == row, (n, table, key)
            # ...and every other row of the replay is changed (or deleted) by an event after N.
            later = {e.entity_id() for e in events if e.seq > n}
            later |= {e.payload.id for e in events if e.seq > n and e.type == "ChatDeleted"}
            for table, rows in upto.items():
                for key, row in rows.items():
                    if key not in at_most(state, n)[table]:
                        assert key in later or row.get("chat_id") in later, (n, table, key)
        # Snapshot at N plus the updates after N is the current state.
        snapshot, _ = await full_state(store, account, n)
        after = (await store.read_updates(account, n, 10_000)).events
        assert replay(after, snapshot) == state, n


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_random_histories_keep_the_invariants(backend: str, tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    clock = Clock()
    store, cleanup = loop.run_until_complete(open_store(backend, tmp_path, clock))

    async def run(batches: list[list[dict[str, Any] | Rejected]]) -> None:
        account = new_id()
        accepted: dict[str, int] = {}
        seqs: list[int] = []
        for batch in batches:
            results, head = await store.append(account, "dev", parse(batch))
            for result in results:
                if result.status == "accepted":
                    seqs.append(result.seq or 0)
                    accepted[result.event_id] = result.seq or 0
                elif result.status == "duplicate":
                    assert accepted[result.event_id] == result.seq
                else:
                    assert result.error
            assert head == len(seqs)
        assert seqs == list(range(1, len(seqs) + 1))  # gapless, in order

        await check_invariants(store, account, compacted=False)

        # Resubmitting any prefix: every event is a duplicate with its original seq; nothing changes.
        before = (await full_state(store, account))[0]
        flat = [e for b in batches for e in b if not isinstance(e, Rejected) and e["eventId"] in accepted]
        for size in range(1, len(flat) + 1, 3):
            results, head = await store.append(account, "dev", parse(flat[:size]))
            assert [(r.status, r.seq) for r in results] == [("duplicate", accepted[e["eventId"]]) for e in flat[:size]]
            assert head == len(seqs)
        assert (await full_state(store, account))[0] == before

        clock.now += timedelta(seconds=1)  # past the grace period
        result = await store.compact(account, retention_seconds=10**9, grace_seconds=0)
        assert result.min_available_seq == 1 and result.truncated == 0
        await check_invariants(store, account, compacted=True)

    @settings(
        max_examples=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(histories())
    def check(batches: list[list[dict[str, Any] | Rejected]]) -> None:
        loop.run_until_complete(run(batches))

    try:
        check()
    finally:
        loop.run_until_complete(cleanup())
        loop.close()


