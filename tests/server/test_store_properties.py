"""Hypothesis: random histories against both backends keep the seed's invariants.

Each example runs in a fresh account of one store (accounts are isolated), so the store is opened
once per backend; Hypothesis drives the event loop itself.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.event_store import SqlEventStore
from server.store import Rejected, StatePage
from shared.models import SETTINGS_ID, DomainEvent, LoggedEvent, QueuedSend, RunCancel, RunContinue, Snapshot, StateResponse
from tests.server.events import T, chat_created, event, message, new_id
from tests.server.replay import as_state, at_most, replay
from tests.server.stores import Clock, open_store
from tests.shared.strategies import characters

TEXT = st.text(characters, max_size=8)


@st.composite
def histories(draw: st.DrawFn) -> list[list[dict[str, Any] | Rejected]]:
    """Batches of events; ids are drawn from those already used, so many events fit the state
    and some do not (unknown or deleted chats and messages), with duplicates and malformed ones;
    and the settings, presets, replies (asked, ended, stopped, continued) and follow-ups queued
    and sent, with or without a run."""
    chats: list[str] = []
    live: list[str] = []  # the chats created and not deleted since (as far as the drawing knows)
    messages: list[tuple[str, str]] = []
    replies: dict[str, tuple[str, str]] = {}  # reply -> (chat, the latest run asked of it)
    queued: list[tuple[str, str]] = []
    presets: list[str] = []
    sent: list[dict[str, Any]] = []
    batches: list[list[dict[str, Any] | Rejected]] = []
    for _ in range(draw(st.integers(1, 14))):
        batch: list[dict[str, Any] | Rejected] = []
        for _ in range(draw(st.integers(1, 3))):
            chat = draw(st.sampled_from(chats)) if chats and draw(st.booleans()) else new_id()
            kind = draw(st.sampled_from(KINDS))
            if kind == "duplicate" and sent:
                batch.append(draw(st.sampled_from(sent)))
                continue
            if kind == "malformed":
                batch.append(Rejected(new_id(), "payload: invalid"))
                continue
            known = draw(st.sampled_from(live)) if live and draw(st.integers(0, 5)) else chat  # (mostly a chat that is there)
            raw = _steering(draw, kind, known, messages, replies, queued, presets)
            if raw is not None:
                pass
            elif kind in ("ChatCreated", "ChatUpdated", "duplicate"):
                raw = chat_created(chat, draw(TEXT))
                raw["type"] = "ChatUpdated" if kind == "ChatUpdated" else "ChatCreated"
                chats.append(chat)
                if kind == "ChatCreated" and chat not in live:
                    live.append(chat)
            elif kind == "ChatDeleted":
                raw = event("ChatDeleted", {"id": chat})
                if chat in live:
                    live.remove(chat)
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


KINDS = [
    "ChatCreated", "ChatUpdated", "ChatDeleted", "MessageAppended", "MessageAppended", "MessageEdited", "MessageDeleted",
    "duplicate", "malformed",
    "SettingsUpdated", "PresetCreated", "PresetUpdated", "PresetDeleted",
    *("Queued", "AssistantRunRequested", "ReplyEnded", "AssistantRunContinued", "QueuedMessageSent") * 2,
    "AssistantRunCancelled",
]  # fmt: skip


def _steering(
    draw: st.DrawFn,
    kind: str,
    chat: str,
    messages: list[tuple[str, str]],
    replies: dict[str, tuple[str, str]],
    queued: list[tuple[str, str]],
    presets: list[str],
) -> dict[str, Any] | None:
    """An event of the settings, presets, replies or queue, or None for the other kinds."""
    if kind == "SettingsUpdated":
        id = SETTINGS_ID if draw(st.integers(0, 5)) else new_id()  # (now and then one refused)
        return event(kind, {"id": id, "instructions": draw(TEXT), "defaultPresetId": draw(st.none() | st.sampled_from(presets or [new_id()])), "createdAt": T})
    if kind.startswith("Preset"):
        preset = draw(st.sampled_from(presets)) if presets and draw(st.booleans()) else new_id()
        presets.append(preset)
        if kind == "PresetDeleted":
            return event(kind, {"id": preset})
        return event(kind, {"id": preset, "name": draw(TEXT) or "p", "instructions": draw(TEXT), "temperature": 0.5, "createdAt": T})
    if kind == "Queued":
        msg = new_id()
        queued.append((msg, chat))
        messages.append((msg, chat))
        payload = {"id": msg, "chatId": chat, "role": "user", "content": draw(TEXT), "status": "queued", "createdAt": T}
        return event("MessageAppended", payload)
    if kind == "AssistantRunRequested":
        reply, run = new_id(), new_id()
        parent = draw(st.none() | st.sampled_from([m for m, c in messages if c == chat] or [new_id()]))
        replies[reply] = (chat, run)
        messages.append((reply, chat))
        return event(kind, {"runId": run, "chatId": chat, "parentId": parent, "messageId": reply, "assistantId": "demo"})
    if kind in ("ReplyEnded", "AssistantRunCancelled", "AssistantRunContinued") and replies:
        reply = draw(st.sampled_from(sorted(replies)))
        chat, run = replies[reply]
        if kind == "AssistantRunCancelled":
            return event(kind, {"runId": run, "messageId": reply})
        if kind == "AssistantRunContinued":
            run = new_id()
            replies[reply] = (chat, run)
            return event(kind, {"runId": run, "chatId": chat, "messageId": reply, "assistantId": "demo"})
        status = draw(st.sampled_from(["streaming", "completed", "cancelled", "failed_upstream"]))
        payload = {"id": reply, "chatId": chat, "role": "assistant", "content": draw(TEXT), "status": status,
                   "assistantId": "demo", "runId": run, "createdAt": T,
                   "finishReason": {"completed": "stop", "cancelled": "cancelled", "failed_upstream": "failed"}.get(status)}  # fmt: skip
        return event("MessageEdited", payload)
    if kind == "QueuedMessageSent" and queued:
        msg, chat = draw(st.sampled_from(queued))
        others = [m for m, c in messages if c == chat and m != msg and (m, c) not in queued]
        parent = draw(st.sampled_from(others) | st.none()) if others else None
        payload: dict[str, Any] = {"messageId": msg, "chatId": chat, "parentId": parent}
        if draw(st.booleans()):
            reply, run = new_id(), new_id()
            replies[reply] = (chat, run)
            messages.append((reply, chat))
            payload |= {"runId": run, "replyId": reply, "assistantId": "demo"}
        return event(kind, payload)
    if kind in ("ReplyEnded", "AssistantRunCancelled", "AssistantRunContinued", "QueuedMessageSent", "Queued"):
        return chat_created(chat, "instead")  # (nothing to act on yet)
    return None


def parse(batch: list[dict[str, Any] | Rejected]) -> list[DomainEvent | Rejected]:
    return [b if isinstance(b, Rejected) else DomainEvent.model_validate(b) for b in batch]


async def full_state(store: SqlEventStore, account: str, up_to: int | None = None) -> tuple[Snapshot, int]:
    """The state at ``up_to`` (default: now), read in small pages; each page's JSON as
    ``GET /sync/state`` sends it (made from the rows) is checked against the models'."""
    page = await read_page(store, account, up_to, None)
    kinds = ("chats", "messages", "settings", "presets")
    found: dict[str, list[Any]] = {kind: list(getattr(page.snapshot, kind)) for kind in kinds}
    token = page.next_page
    while token is not None:
        more = await read_page(store, account, page.up_to_seq, token)
        for kind in kinds:
            found[kind] += getattr(more.snapshot, kind)
        token = more.next_page
    return Snapshot(**found), page.up_to_seq


async def read_page(store: SqlEventStore, account: str, up_to: int | None, token: str | None) -> StatePage:
    page = await store.read_state(account, up_to, None, 4, token)
    body = await store.read_state_json(account, up_to, None, 4, token)
    models = StateResponse(
        snapshot=page.snapshot, up_to_seq=page.up_to_seq, current_seq=page.current_seq, next_page=page.next_page, total=page.total
    )
    assert json.loads(body) == models.model_dump(mode="json", by_alias=True)
    return page


def touched(event: LoggedEvent) -> set[str]:
    """The ids of the rows an event changes (a sent follow-up's reply too)."""
    ids = {event.entity_id()}
    if isinstance(event.payload, QueuedSend) and event.payload.reply_id is not None:
        ids.add(event.payload.reply_id)
    return ids


def replaced(event: LoggedEvent) -> set[str]:
    """The ids of the rows an event writes whole or deletes (the others it touches, it patches)."""
    payload = event.payload
    if isinstance(payload, QueuedSend):
        return {payload.reply_id} if payload.reply_id is not None else set()
    if isinstance(payload, (RunCancel, RunContinue)):
        return set()
    return {event.entity_id()}


async def log(store: SqlEventStore, account: str) -> list[LoggedEvent]:
    return (await store.read_updates(account, 0, 10_000)).events


async def check_invariants(store: SqlEventStore, account: str, compacted: bool) -> None:
    events = await log(store, account)
    current, head = await full_state(store, account)
    state = as_state(current)
    assert replay(events) == state  # the log, replayed, is the state
    for n in range(head + 1):
        upto = replay([e for e in events if e.seq <= n])
        after_n = [e for e in events if e.seq > n]
        later = {i for e in after_n for i in touched(e)}
        later |= {e.payload.id for e in after_n if e.type == "ChatDeleted"}
        # A row whose changes after N are patches only (a Stop, a Continue, a queued message
        # sent) is in the replay to N as it was then, while the state's row is newer: the seed's
        # invariant 3 leaves such rows out. And a QueuedMessageSent that made a reply is kept
        # while its chat is (it changed two rows: no later event of one of them replaces it), so
        # its reply is in the replay to N even once later versions replaced what it made.
        replaced_after = {i for e in after_n for i in replaced(e)}
        patched_after = later - replaced_after
        kept_replies = {e.payload.reply_id for e in events if e.seq <= n and isinstance(e.payload, QueuedSend) and e.payload.reply_id}
        # The invariant holds for every row not changed since N...
        for table, rows in at_most(state, n).items():
            for key, row in rows.items():
                assert upto[table][key] == row, (n, table, key)
        # ...and every other row of the replay is changed (or deleted) by an event after N: before
        # compaction any event (older versions of rows changed after N are still in the log),
        # after it only such a patch or such a reply (the seed's invariant 3, literally, when
        # there are none: apply(events <= N) == rows with last_seq <= N).
        for table, rows in upto.items():
            for key, row in rows.items():
                if key not in at_most(state, n)[table]:
                    assert key in later or row.get("chat_id") in later, (n, table, key)
                    assert not compacted or key in patched_after or key in kept_replies, (n, table, key)
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


