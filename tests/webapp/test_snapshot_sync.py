"""The state path of the sync engine (webapp/sync.py, LocalStore.apply_snapshot_page), under
CPython against the real server app in-process, on both backends: a device synced through
paged ``/sync/state`` snapshots ends in exactly the state of one synced through the log, with
writes between the pages and compaction; an interrupted snapshot is resumed at the same
upToSeq, or started over, and never taken for complete; the pending overlay survives; the
progress is shown."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quart import Quart

from server.app import create_app
from server.config import Settings
from shared.models import (
    SETTINGS_ID,
    Chat,
    ChatRef,
    EventType,
    Message,
    MessageRef,
    Preset,
    PresetRef,
    QueuedSend,
    RunContinue,
    StateResponse,
)
from shared.models import Settings as AccountSettings
from tests.conftest import QUICK_PASSWORDS
from tests.webapp.devices import Device, T, new_id
from webapp import sync, ui
from webapp.overlay import is_pending
from webapp.sync import Status
from webapp.transport import NetworkError

USERS = itertools.count()


def ticking_clock() -> Any:
    """A second later at each reading: every event is older than "now" when compaction runs."""
    moments = (datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=n) for n in itertools.count())
    return lambda: next(moments)


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[Quart]:
    settings_ = Settings(
        **QUICK_PASSWORDS,
        database_url=database_url, compact_interval_seconds=0, rate_limit_per_minute=0, auth_rate_limit_per_minute=0
    )
    app = create_app(settings_, clock=ticking_clock())
    async with app.test_app():
        yield app


async def new_account(app: Quart) -> str:
    body = {"username": f"user{next(USERS)}", "password": "long enough"}
    response = await app.test_client().post("/auth/signup", json=body)
    token: str = (await response.get_json())["token"]
    return token


class Writer:
    """Another device of the account, writing through the server what the test draws."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.chats: list[Chat] = []
        self.messages: list[Message] = []
        self.presets: list[Preset] = []
        self.queued: list[Message] = []
        self.replies: list[Message] = []
        self.words = itertools.count()

    async def write(self, ops: list[tuple[str, int]]) -> None:
        d = self.device
        for kind, pick in ops:
            text = f"word{next(self.words) % 7} text{pick}"
            if kind == "chat" or not self.chats:
                chat = Chat(id=new_id(), title=f"chat {pick}", created_at=T)
                await d.add(EventType.CHAT_CREATED, chat)
                self.chats.append(chat)
            elif kind == "say" or not self.messages:
                chat = self.chats[pick % len(self.chats)]
                parent = next((m.id for m in reversed(self.messages) if m.chat_id == chat.id), None)
                message = Message(id=new_id(), chat_id=chat.id, role="user", content=text, parent_id=parent, created_at=T)
                await d.add(EventType.MESSAGE_APPENDED, message)
                self.messages.append(message)
            elif kind == "edit":
                i = pick % len(self.messages)
                self.messages[i] = self.messages[i].model_copy(update={"content": text})
                await d.add(EventType.MESSAGE_EDITED, self.messages[i])
            elif kind == "delete":
                message = self.messages.pop(pick % len(self.messages))
                await d.add(EventType.MESSAGE_DELETED, MessageRef(id=message.id, chat_id=message.chat_id))
            elif kind in STEERING:
                await self._steer(kind, pick, text)
            elif kind == "rename":
                i = pick % len(self.chats)
                self.chats[i] = self.chats[i].model_copy(update={"title": text})
                await d.add(EventType.CHAT_UPDATED, self.chats[i])
            else:  # drop a chat, and its messages with it
                chat = self.chats.pop(pick % len(self.chats))
                self.messages = [m for m in self.messages if m.chat_id != chat.id]
                await d.add(EventType.CHAT_DELETED, ChatRef(id=chat.id))
        await d.engine.push()

    async def _steer(self, kind: str, pick: int, text: str) -> None:
        """The account's settings and presets, follow-ups queued and sent (answered by an
        assistant of the device's own: no run of the server's), replies ended and continued."""
        d = self.device
        if kind == "settings":
            await d.add(EventType.SETTINGS_UPDATED, AccountSettings(id=SETTINGS_ID, instructions=text, created_at=T))
        elif kind == "preset" or (kind in ("retune", "unpreset") and not self.presets):
            preset = Preset(id=new_id(), name=text, instructions=text, temperature=pick / 50, created_at=T)
            self.presets.append(preset)
            await d.add(EventType.PRESET_CREATED, preset)
        elif kind == "retune":
            i = pick % len(self.presets)
            self.presets[i] = self.presets[i].model_copy(update={"instructions": text, "max_tokens": pick + 1})
            await d.add(EventType.PRESET_UPDATED, self.presets[i])
        elif kind == "unpreset":
            preset = self.presets.pop(pick % len(self.presets))
            await d.add(EventType.PRESET_DELETED, PresetRef(id=preset.id))
        elif not self.chats:
            return
        elif kind == "queue" or (kind == "send" and not self.queued):
            chat = self.chats[pick % len(self.chats)]
            queued = Message(id=new_id(), chat_id=chat.id, role="user", content=text, status="queued", created_at=T)
            self.queued.append(queued)
            await d.add(EventType.MESSAGE_APPENDED, queued)
            if kind == "send":
                await self._steer(kind, pick, text)
        elif kind == "send":
            queued = self.queued.pop(0)
            parent = next((m.id for m in reversed(self.messages) if m.chat_id == queued.chat_id), None)
            reply = None if pick % 3 == 0 else new_id()
            run = None if reply is None else new_id()
            sent = QueuedSend(message_id=queued.id, chat_id=queued.chat_id, parent_id=parent, run_id=run, reply_id=reply,
                              assistant_id=None if reply is None else "on-device")  # fmt: skip
            await d.add(EventType.QUEUED_MESSAGE_SENT, sent)
            self.messages.append(queued.model_copy(update={"status": "completed", "parent_id": parent}))
            if reply is not None:
                self.replies.append(Message(id=reply, chat_id=queued.chat_id, role="assistant", content="", parent_id=queued.id,
                                            status="queued", assistant_id="on-device", run_id=run, created_at=T))  # fmt: skip
        elif kind in ("end", "continue") and not self.replies and pick % 3:
            await self._steer("send", pick, text)  # (a reply to end, and continue)
            await self._steer(kind, pick, text)
        elif kind in ("end", "continue") and self.replies:
            i = pick % len(self.replies)
            reply = self.replies[i]
            if reply.status == "queued":  # ended first (its device's assistant wrote it), then maybe continued
                reply = self.replies[i] = reply.model_copy(update={"status": "completed", "content": text, "finish_reason": "length"})
                await d.add(EventType.MESSAGE_EDITED, reply)
            if kind == "continue":
                self.replies[i] = reply.model_copy(update={"status": "queued", "run_id": new_id(), "finish_reason": None})
                again = RunContinue(run_id=self.replies[i].run_id or "", chat_id=reply.chat_id, message_id=reply.id, assistant_id="on-device")
                await d.add(EventType.ASSISTANT_RUN_CONTINUED, again)


STEERING = ("settings", "preset", "retune", "unpreset", "queue", "send", "end", "continue")


def log_device(app: Quart, token: str, path: Path) -> Device:
    """A device that replays the log from the start (as every device did before the state path)."""
    device = Device(app, token, path)
    device.engine = sync.SyncEngine(device.store, device.transport, lambda: None, lambda s: None)
    return device


async def through_the_log(device: Device) -> None:
    await device.store.apply_remote([], None)  # it has synced (an empty account): the log path
    assert device.store.synced_at() is not None and device.store.last_seq() == 0
    far_behind, sync.FAR_BEHIND = sync.FAR_BEHIND, 10**9
    try:
        await device.sync()
    finally:
        sync.FAR_BEHIND = far_behind


def listed(device: Device) -> list[tuple[Any, ...]]:
    """What the UI lists: the chats in order, each with its messages in order, pending or not."""
    store = device.store
    return [
        (c.id, c.title, is_pending(c), [(m.id, m.content, m.parent_id, is_pending(m)) for m in store.messages(c.id)])
        for c in store.chats()
    ]


def searched(device: Device) -> list[list[tuple[str, str | None]]]:
    return [[(h.chat_id, h.message_id) for h in device.store.search(f"word{n}")] for n in range(7)]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["chat", "say", "say", "say", "edit", "delete", "rename", "drop", *STEERING, "queue", "send", "send", "end", "continue"]),
        st.integers(0, 50),
    ),
    max_size=6,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    before=st.lists(OPS, min_size=1, max_size=4),
    between=st.lists(OPS, max_size=4),
    page_size=st.integers(1, 5),
    compact=st.sampled_from([None, "superseded", "before-between"]),
    local=st.booleans(),
)
async def test_a_snapshot_sync_ends_in_the_state_of_a_log_sync(
    app: Quart, tmp_path_factory: pytest.TempPathFactory, before: list[Any], between: list[Any],
    page_size: int, compact: str | None, local: bool,
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("devices")
    token = await new_account(app)
    writer = Writer(Device(app, token, root / "writer.db"))
    for ops in before:
        await writer.write(ops)
    store = app.extensions["store"]
    if compact is not None:  # superseded events go (the log path still works: nothing truncated)
        await store.compact_all(retention_seconds=10**9, grace_seconds=0)

    snap = Device(app, token, root / "snapshot.db")
    snap.transport.state_limit = page_size
    pending_chat = None
    if local:  # written on the new device before its first sync: the overlay
        pending_chat = await snap.new_chat()
        await snap.say(pending_chat, "word1 typed offline")
    real_state = snap.transport.state
    writes = list(between)
    asked: list[int | None] = []

    async def state_with_writes_between_pages(up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        asked.append(up_to_seq)
        if page is not None and writes:
            await writer.write(writes.pop(0))
            if compact == "before-between":
                await store.compact_all(retention_seconds=10**9, grace_seconds=0)
        return await real_state(up_to_seq, page, limit)

    snap.transport.state = state_with_writes_between_pages  # type: ignore[method-assign]
    await snap.engine.pull()
    assert snap.store.snapshot_progress() is None
    assert len(set(asked[1:])) <= 1 and None not in asked[1:]  # one upToSeq for every later page
    if pending_chat is not None:  # the overlay survived the snapshot, still pending
        assert [(m.content, is_pending(m)) for m in snap.store.messages(pending_chat)] == [("word1 typed offline", True)]
    for ops in writes:
        await writer.write(ops)
    await snap.sync()  # (the overlay is sent, and comes back through the log)

    log = log_device(app, token, root / "log.db")
    await through_the_log(log)
    await caught_up(snap, log)
    assert snap.store.pending_count() == 0
    assert snap.store.confirmed() == log.store.confirmed()
    assert listed(snap) == listed(log)
    assert searched(snap) == searched(log)  # (some of the snapshot's rows maybe not indexed yet)
    while await snap.store.index_search_backlog(3):
        pass
    assert searched(snap) == searched(log)
    for table in ("messages_fts", "chats_fts"):
        snap.store.conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    for d in (writer.device, snap, log):
        d.store.close()


async def caught_up(*devices: Device) -> None:
    """Pull until every device is at the log's end. The server's run worker may still append (it
    sends a chat's queued follow-up once the answer before it ended, unless a device sent it
    first), so the end is waited for, not assumed after one pull."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        for device in devices:
            await device.engine.pull()
        current = (await devices[0].transport.updates(0, 1)).current_seq
        if all(device.store.last_seq() == current for device in devices):
            return
        assert asyncio.get_running_loop().time() < deadline, [device.store.last_seq() for device in devices]
        await asyncio.sleep(0.05)


async def written(app: Quart, tmp_path: Path, chats: int = 2, messages: int = 5) -> tuple[str, Writer]:
    token = await new_account(app)
    writer = Writer(Device(app, token, tmp_path / "writer.db"))
    await writer.write([("chat", i) for i in range(chats)] + [("say", i) for i in range(messages)])
    return token, writer


async def interrupted(device: Device, after_pages: int) -> list[tuple[int | None, str | None]]:
    """Let the device's pull get ``after_pages`` pages of a snapshot, then lose the network."""
    real_state, asked = device.transport.state, []

    async def state(up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        asked.append((up_to_seq, page))
        if len(asked) > after_pages:
            raise NetworkError("offline")
        return await real_state(up_to_seq, page, limit)

    device.transport.state = state  # type: ignore[method-assign]
    with pytest.raises(NetworkError):
        await device.engine.pull()
    del device.transport.state  # the network is back
    return asked


async def test_an_interrupted_snapshot_resumes_at_the_same_upToSeq(app: Quart, tmp_path: Path) -> None:
    token, writer = await written(app, tmp_path)
    device = Device(app, token, tmp_path / "new.db")
    await interrupted(device, after_pages=2)
    progress = device.store.snapshot_progress()
    assert progress is not None and progress.done == 4 and progress.total == 7 and progress.up_to_seq == 7
    # Not taken for complete: the cursor has not moved, and what came is shown already.
    assert device.store.last_seq() == 0 and device.store.synced_at() is None
    assert len(device.store.chats()) == 2 and len(device.store.confirmed().messages) == 2
    await writer.write([("say", 1), ("edit", 0), ("drop", 1)])  # meanwhile

    device.reload()  # the tab closed: the download's place is on disk
    asked: list[tuple[int | None, str | None]] = []
    real_state = device.transport.state

    async def state(up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        asked.append((up_to_seq, page))
        return await real_state(up_to_seq, page, limit)

    device.transport.state = state  # type: ignore[method-assign]
    await device.engine.pull()
    assert asked[0] == (7, progress.next_page) and all(up_to == 7 for up_to, _ in asked)
    log = log_device(app, token, tmp_path / "log.db")
    await through_the_log(log)
    assert device.store.confirmed() == log.store.confirmed() and listed(device) == listed(log)
    assert device.store.last_seq() == log.store.last_seq() == 10
    # With nothing pending, every row is stored once: shown, and no server's version aside.
    rows = device.store.conn.execute("SELECT (SELECT count(*) FROM confirmed_messages) + (SELECT count(*) FROM confirmed_chats)")
    assert rows.fetchone()[0] == 0


async def test_a_snapshot_whose_events_after_it_are_gone_starts_over(app: Quart, tmp_path: Path) -> None:
    token, writer = await written(app, tmp_path)
    device = Device(app, token, tmp_path / "new.db")
    await interrupted(device, after_pages=1)
    await writer.write([("edit", 0), ("edit", 1), ("say", 2)])
    await app.extensions["store"].compact_all(retention_seconds=0, grace_seconds=0)  # the horizon passes 7
    device.reload()
    await device.engine.pull()  # a 410 for the page after: a new snapshot, from its first page
    assert device.store.snapshot_progress() is None and device.store.last_seq() == 10
    log = log_device(app, token, tmp_path / "log.db")
    await log.engine.pull()  # (a new device: the log is truncated anyway)
    assert device.store.confirmed() == log.store.confirmed() and listed(device) == listed(log)


async def test_a_page_token_the_server_refuses_after_a_reload_starts_over(app: Quart, tmp_path: Path) -> None:
    token, writer = await written(app, tmp_path)
    device = Device(app, token, tmp_path / "new.db")
    await interrupted(device, after_pages=1)
    progress = device.store.snapshot_progress()
    assert progress is not None
    with device.store._transaction() as conn:  # as if the server had been upgraded meanwhile
        device.store._set_meta(conn, "snapshot", json.dumps({**progress.__dict__, "next_page": "bm90IGEgdG9rZW4="}))
    device.reload()
    await device.engine.pull()
    assert device.store.snapshot_progress() is None and len(device.store.confirmed().messages) == 5


async def test_a_resync_replaces_and_keeps_the_overlay_exactly(app: Quart, tmp_path: Path) -> None:
    token, writer = await written(app, tmp_path, chats=1, messages=4)
    device = Device(app, token, tmp_path / "old.db")
    await device.sync()
    kept, edited, deleted, gone = (m.id for m in writer.messages)
    chat = writer.chats[0].id
    await device.transport.go_offline()
    shown = {m.id: m for m in device.store.messages(chat)}
    await device.add(EventType.MESSAGE_EDITED, shown[edited].model_copy(update={"content": "my edit"}))
    await device.add(EventType.MESSAGE_DELETED, MessageRef(id=deleted, chat_id=chat))
    mine = await device.say(chat, "mine, not sent")
    await device.transport.set_offline(False)
    await writer.write([("delete", 3), ("say", 0)])  # `gone` goes, a new one comes
    before = listed(device)
    await device.engine.resync()
    assert device.store.snapshot_progress() is None
    messages = {m.id: (m.content, is_pending(m)) for m in device.store.messages(chat)}
    assert gone not in messages and deleted not in messages
    assert messages[edited] == ("my edit", True) and messages[mine] == ("mine, not sent", True)
    assert messages[kept][1] is False and len(messages) == 4 and listed(device) != before
    assert device.store.pending_count() == 3
    await device.sync()
    writer_view = Device(app, token, tmp_path / "check.db")
    await writer_view.sync()
    assert listed(device) == listed(writer_view) and device.store.confirmed() == writer_view.store.confirmed()


async def test_a_device_far_behind_takes_the_state_path(app: Quart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token, writer = await written(app, tmp_path, chats=1, messages=1)
    device = Device(app, token, tmp_path / "behind.db")
    await device.sync()
    await writer.write([("say", i) for i in range(8)])
    calls: list[str] = []
    real_state, real_updates = device.transport.state, device.transport.updates

    async def state(up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        calls.append("state")
        return await real_state(up_to_seq, page, limit)

    async def updates(after_seq: int, limit: int) -> Any:
        calls.append("updates")
        return await real_updates(after_seq, limit)

    device.transport.state, device.transport.updates = state, updates  # type: ignore[method-assign]
    monkeypatch.setattr(sync, "FAR_BEHIND", 5)
    monkeypatch.setattr(sync, "PAGE", 2)
    await device.engine.pull()
    assert calls[0] == "updates" and calls[1] == "state" and calls[-1] == "updates"
    assert len(device.store.confirmed().messages) == 9 and device.store.last_seq() == 10
    calls.clear()
    await writer.write([("say", 0)])
    await device.engine.pull()  # one event behind: the log
    assert calls == ["updates"] and len(device.store.confirmed().messages) == 10


async def test_the_progress_is_shown_while_a_snapshot_downloads(app: Quart, tmp_path: Path) -> None:
    token, writer = await written(app, tmp_path, chats=2, messages=5)
    device = Device(app, token, tmp_path / "new.db")
    seen: list[str] = []
    device.engine._on_status = lambda status: seen.append(ui.status_text(status, device.engine.progress))
    await device.engine.pull()
    assert seen == ["Syncing… 2 of 7", "Syncing… 4 of 7", "Syncing… 6 of 7", "Connecting…"]
    assert device.engine.progress is None


async def test_the_next_page_is_asked_for_before_a_page_is_stored(app: Quart, tmp_path: Path) -> None:
    """The server and the network work on the next page while this one is stored."""
    token, writer = await written(app, tmp_path, chats=2, messages=5)
    device = Device(app, token, tmp_path / "new.db")
    order: list[str] = []
    real_state, real_apply = device.transport.state, device.store.apply_snapshot_page

    async def state(up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        order.append(f"ask {sum(o.startswith('ask') for o in order) + 1}")
        return await real_state(up_to_seq, page, limit)

    async def apply(page: StateResponse, first: bool) -> Any:
        order.append(f"store {sum(o.startswith('store') for o in order) + 1}")
        return await real_apply(page, first)

    device.transport.state = state  # type: ignore[method-assign]
    device.store.apply_snapshot_page = apply  # type: ignore[method-assign]
    await device.engine.pull()
    assert order == ["ask 1", "ask 2", "store 1", "ask 3", "store 2", "ask 4", "store 3", "store 4"]


async def test_the_screen_is_drawn_after_a_snapshots_first_page_then_now_and_then_and_at_its_end(
    app: Quart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, writer = await written(app, tmp_path, chats=2, messages=5)
    device = Device(app, token, tmp_path / "new.db")
    drawn: list[int] = []
    device.engine._on_change = lambda: drawn.append(len(device.store.confirmed().messages))
    monkeypatch.setattr(sync, "SNAPSHOT_DRAW_SECONDS", 3600.0)
    await device.engine.pull()
    assert drawn == [0, 5]  # the first page (the chats), then all of it; not the pages between
    monkeypatch.setattr(sync, "SNAPSHOT_DRAW_SECONDS", 0.0)
    again = Device(app, token, tmp_path / "again.db")
    again.engine._on_change = lambda: drawn.append(len(again.store.confirmed().messages))
    drawn.clear()
    await again.engine.pull()
    assert drawn == [0, 2, 4, 5]  # (after every page when that is allowed)


def test_the_progress_in_words() -> None:
    assert ui.status_text(Status.ONLINE) == "Online"
    assert ui.status_text(Status.CONNECTING, (12_000, 50_000)) == "Syncing… 12,000 of 50,000"
    assert ui.status_text(Status.OFFLINE, (500, None)) == "Syncing… 500"


async def test_what_a_snapshot_brought_is_indexed_for_search_in_the_background(
    app: Quart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, writer = await written(app, tmp_path, chats=2, messages=9)
    monkeypatch.setattr(sync, "INDEX_AFTER_SECONDS", 0)
    monkeypatch.setattr(sync, "SEARCH_SLICE", 2)
    device = Device(app, token, tmp_path / "new.db")
    found = {m.id for m in writer.messages if "word3" in m.content}
    running = asyncio.ensure_future(device.engine.run())
    try:
        for _ in range(250):
            if device.store.synced_at() is not None and device.store.search_backlog() == 0:
                break
            await asyncio.sleep(0.02)
    finally:
        running.cancel()
    assert device.store.search_backlog() == 0 and len(device.store.confirmed().messages) == 9
    assert {h.message_id for h in device.store.search("word3")} == found and found
    for table in ("messages_fts", "chats_fts"):
        device.store.conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
