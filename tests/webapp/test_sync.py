"""The client's store and sync engine under CPython, against the real server app in-process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from quart import Quart

from server.app import create_app
from server.config import Settings
from shared.models import Chat, ChatRef, EventType, Message, PingFrame, Snapshot, UpdatesResponse
from tests.conftest import QUICK_PASSWORDS
from tests.waiting import until
from tests.webapp.devices import Device, T, new_id, signup
from webapp.database import FilePersistence
from webapp.overlay import is_pending
from webapp.store import LocalStore
from webapp.sync import Status, SyncEngine
from webapp.transport import NetworkError


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[Quart]:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url, ping_seconds=0.2))
    async with app.test_app():
        yield app


async def server_state(device: Device) -> Snapshot:
    state = await device.transport.state_models(None, None)
    chats, messages, page = list(state.snapshot.chats), list(state.snapshot.messages), state.next_page
    while page:
        more = await device.transport.state_models(state.up_to_seq, page)
        chats += more.snapshot.chats
        messages += more.snapshot.messages
        page = more.next_page
    return Snapshot(chats=sorted(chats, key=lambda c: c.id), messages=sorted(messages, key=lambda m: m.id))


def shown(device: Device) -> list[tuple[str, bool]]:
    return [
        (m.content, is_pending(m)) for c in device.store.chats() for m in device.store.messages(c.id)
    ]


async def stop(runs: list[asyncio.Task[Any]], *devices: Device) -> None:
    """The devices' engines stopped and their live sockets closed (a test's end)."""
    for run in runs:
        run.cancel()
    await asyncio.gather(*runs, return_exceptions=True)
    for device in devices:
        for socket in device.transport.sockets:
            await socket.close()


async def test_two_devices_converge_on_the_server_state(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a, b = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    chat = await a.new_chat()
    await a.say(chat, "hello")
    assert shown(a) == [("hello", True)]
    await a.sync()
    await b.sync()
    assert shown(a) == shown(b) == [("hello", False)]
    assert a.store.confirmed() == b.store.confirmed() == await server_state(a)
    assert a.store.pending_count() == 0 and a.store.last_seq() == 2


async def test_offline_messages_survive_a_reload_and_are_delivered_once(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a, b = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    chat = await a.new_chat()
    await a.sync()
    await a.transport.go_offline()
    await a.say(chat, "one")
    await a.say(chat, "two")
    with pytest.raises(NetworkError):
        await a.engine.push()
    a.reload()
    assert shown(a) == [("one", True), ("two", True)]
    assert (a.store.outbox()[0].status, a.store.outbox()[0].attempts) == ("failed", 1)  # the failed attempt was recorded
    a.transport.offline = False
    await a.sync()
    await a.sync()  # a second push sends nothing again
    await b.sync()
    assert shown(b) == [("one", False), ("two", False)]
    updates = await b.transport.updates(0, 100)
    assert [e.type for e in updates.events] == ["ChatCreated", "MessageAppended", "MessageAppended"]


async def test_a_lost_answer_is_resent_and_counted_once(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    chat = await a.new_chat()
    await a.say(chat, "hi")
    # The server takes the batch but the answer never arrives: the events stay pending.
    await a.transport.submit([p.event for p in a.store.outbox()])
    assert a.store.pending_count() == 2
    await a.sync()
    assert (await a.transport.updates(0, 10)).current_seq == 2
    assert shown(a) == [("hi", False)] and a.store.pending_count() == 0


async def test_a_rejected_event_is_rolled_back_to_the_confirmed_state(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a, b = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    chat = await a.new_chat()
    message_id = await a.say(chat, "original")
    await a.sync()
    await b.sync()
    # B deletes the chat; A, not yet knowing, edits the message in it.
    await b.add(EventType.CHAT_DELETED, ChatRef(id=chat))
    await b.sync()
    edit = Message(id=message_id, chat_id=chat, role="user", content="edited", created_at=T)
    edited = await a.add(EventType.MESSAGE_EDITED, edit)
    assert shown(a) == [("edited", True)]
    await a.engine.push()
    assert shown(a) == [("original", False)]  # rolled back to what the server had confirmed to A
    assert [(r.event.event_id, r.error) for r in a.store.rejected(chat)] == [(edited.event_id, "unknown chat")]  # kept aside
    await a.engine.pull()
    assert shown(a) == [] and a.store.chats() == []
    assert a.store.confirmed() == await server_state(a)


async def test_our_own_event_arriving_before_the_push_answer_is_not_left_pending(
    app: Quart, tmp_path: Path
) -> None:
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    await a.engine.pull()  # (the first sync of a new device is a snapshot, which carries no eventIds)
    chat = await a.new_chat()
    await a.transport.submit([p.event for p in a.store.outbox()])
    await a.engine.pull()  # the log brings our own event back first
    assert a.store.pending_count() == 0
    assert [is_pending(c) for c in a.store.chats()] == [False]
    assert a.store.chat(chat) is not None


async def test_a_full_resync_replaces_and_keeps_pending_work(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    chat = await a.new_chat()
    await a.say(chat, "confirmed")
    await a.sync()
    ghost = Chat(id=new_id(), title="ghost", created_at=T, updated_at=T, last_seq=1)
    # A row the server does not have sneaks into the confirmed state...
    a.store.conn.execute(
        "INSERT INTO confirmed_chats (id, title, created_at, updated_at, last_seq) VALUES (?, ?, ?, ?, ?)", (ghost.id, "ghost", T, T, 1)
    )
    await a.say(chat, "pending")
    await a.engine.resync()
    # ...and a resync replaces, never merges: it is gone, the pending message is still shown.
    assert [c.title for c in a.store.chats()] == ["chat"]
    assert shown(a) == [("confirmed", False), ("pending", True)]
    assert a.store.confirmed() == await server_state(a)


async def test_the_engine_follows_the_live_socket(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a, b = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    statuses: list[Status] = []
    b.engine._on_status = statuses.append
    runs = [asyncio.ensure_future(d.engine.run()) for d in (a, b)]
    try:
        chat = await a.new_chat()
        a.engine.kick()
        await a.say(chat, "live")
        a.engine.kick()

        def why() -> str:
            return f"a={shown(a)} b={shown(b)} {a.engine.status} {b.engine.status} {statuses}"

        await until(lambda: shown(b) == [("live", False)], why)
        assert Status.ONLINE in statuses
        await b.transport.go_offline()
        await until(lambda: b.engine.status is Status.OFFLINE, why)
        await a.say(chat, "while b was away")
        a.engine.kick()
        b.transport.offline = False
        await until(lambda: [t for t, _ in shown(b)] == ["live", "while b was away"], why)
        await until(lambda: b.engine.status is Status.ONLINE, why)
    finally:
        await stop(runs, a, b)


@contextlib.asynccontextmanager
async def following_live(app: Quart, tmp_path: Path) -> AsyncIterator[tuple[Device, Device, str]]:
    """(a, b, b's chat): a's engine running, caught up with b's chat and following the live
    socket, whose event frames it holds (``hold_frames``); stopped after."""
    token = await signup(app)
    a, b = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    chat = await b.new_chat()
    await b.sync()
    run = asyncio.ensure_future(a.engine.run())
    try:
        await until(lambda: a.engine.status is Status.ONLINE and a.store.last_seq() == 1, "a never caught up")
        a.transport.hold_frames = True
        yield a, b, chat
    finally:
        await stop([run], a)


async def test_live_frames_reordered_duplicated_or_lost_still_give_every_event_once(app: Quart, tmp_path: Path) -> None:
    async with following_live(app, tmp_path) as (a, b, chat):
        texts = lambda: [t for t, _ in shown(a)]  # noqa: E731
        for i in range(4):
            await b.say(chat, f"m{i}")
        await b.sync()
        await until(lambda: len(a.transport.held_frames) == 4, "the frames never came")
        a.transport.release_frames([3, 1, 1, 0, 2, 3])  # out of order, twice over
        await until(lambda: texts() == ["m0", "m1", "m2", "m3"], texts)

        await b.say(chat, "m4")
        await b.say(chat, "m5")
        await b.sync()
        await until(lambda: len(a.transport.held_frames) == 2, "the frames never came")
        a.transport.hold_frames = False
        a.transport.release_frames([1])  # m4's frame is lost: m5's shows the gap, a pull fills it
        await until(lambda: texts() == ["m0", "m1", "m2", "m3", "m4", "m5"], texts)
        assert a.store.last_seq() == 7
        assert a.store.confirmed() == await server_state(a)


async def test_live_frames_that_came_while_the_page_was_busy_are_applied_in_one_flush(app: Quart, tmp_path: Path) -> None:
    """A busy page falls behind a stream: the event frames waiting for it are applied together,
    one transaction and one flush (each flush a wait on IndexedDB), not one each."""
    async with following_live(app, tmp_path) as (a, b, chat):
        applied: list[int] = []
        apply_remote = a.store.apply_remote

        async def counted(events: Any, current_seq: int | None = None) -> int:
            applied.append(len(events))
            return await apply_remote(events, current_seq)

        a.store.apply_remote = counted  # type: ignore[method-assign]
        for i in range(5):
            await b.say(chat, f"m{i}")
        await b.sync()
        await until(lambda: len(a.transport.held_frames) == 5, "the frames never came")
        applied.clear()  # (a caughtUp applied meanwhile is not what is counted)
        a.transport.release_frames([0, 1, 2, 3, 4])  # (all at once, as a page busy for a while finds them)
        await until(lambda: [t for t, _ in shown(a)] == [f"m{i}" for i in range(5)], lambda: shown(a))
        assert applied == [5]


async def test_an_unexpected_error_in_a_push_does_not_stop_the_pushes(app: Quart, tmp_path: Path) -> None:
    """The live socket stays up while pushes fail for a reason of ours: the next change is sent
    all the same, and the one that failed with it."""
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    submit, failures = a.transport.submit, [RuntimeError("a bug of ours")]

    async def failing_once(events: Any) -> Any:
        if failures:
            raise failures.pop()
        return await submit(events)

    a.engine._min_backoff = 0.01
    run = asyncio.ensure_future(a.engine.run())
    try:
        await until(lambda: a.engine.status is Status.ONLINE, lambda: a.engine.status)
        a.transport.submit = failing_once  # type: ignore[method-assign]
        chat = await a.new_chat()
        await a.say(chat, "when the push failed")
        a.engine.kick()
        await until(lambda: not failures, "the push was tried")
        await a.say(chat, "after it")
        a.engine.kick()
        await until(lambda: shown(a) == [("when the push failed", False), ("after it", False)], lambda: shown(a))
    finally:
        await stop([run], a)


async def test_an_unexpected_error_does_not_stop_the_sync_for_good(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    updates, failures = a.transport.updates, [RuntimeError("a bug of ours")]

    async def failing_once(after_seq: int, limit: int) -> Any:
        if failures:
            raise failures.pop()
        return await updates(after_seq, limit)

    a.transport.updates = failing_once  # type: ignore[method-assign]
    a.engine._min_backoff = 0.01
    run = asyncio.ensure_future(a.engine.run())
    try:
        chat = await a.new_chat()
        a.engine.kick()
        await until(lambda: a.engine.status is Status.ONLINE and not failures, lambda: a.engine.status)
        await a.say(chat, "after the error")
        a.engine.kick()
        await until(lambda: shown(a) == [("after the error", False)], lambda: shown(a))
    finally:
        await stop([run], a)


@pytest.mark.parametrize("request_name", ["submit", "updates"])
async def test_a_request_never_answered_is_given_up_and_made_again(
    app: Quart, tmp_path: Path, request_name: str
) -> None:
    """A request whose answer never comes (a connection left half-open when a phone changed
    networks, a server stuck) is given up after ``push_seconds`` (a pull: ``pull_seconds``) and
    made again: the message written meanwhile is delivered (pushes waited for good before)."""
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    original, unanswered = getattr(a.transport, request_name), []

    async def unanswered_once(*args: Any) -> Any:
        if not unanswered:
            unanswered.append(args)
            await asyncio.Event().wait()
        return await original(*args)

    a.engine._min_backoff = 0.01
    a.engine.push_seconds = a.engine.pull_seconds = 0.2
    run = asyncio.ensure_future(a.engine.run())
    try:
        await until(lambda: a.engine.status is Status.ONLINE, lambda: a.engine.status)
        setattr(a.transport, request_name, unanswered_once)
        chat = await a.new_chat()
        await a.say(chat, "while a request went unanswered")
        a.engine.kick()
        if request_name == "updates":
            await a.transport.sockets[-1].close()  # (the connection lost: the loop pulls again)
        await until(lambda: shown(a) == [("while a request went unanswered", False)], lambda: shown(a))
        assert unanswered, f"no {request_name} was left unanswered"
    finally:
        await stop([run], a)


async def test_a_cancelled_engine_stops_even_when_a_frame_arrives_at_that_moment(tmp_path: Path) -> None:
    """Stopping the engine (a sign-out, another tab taking over) ends it, however its waits
    stand: on CPython 3.11, ``asyncio.wait_for`` returned a frame that arrived with the Cancel
    and lost the Cancel, and the engine then ran for good."""
    arrivals: list[asyncio.Future[Any]] = []

    class Socket:
        async def receive(self) -> Any:
            arrivals.append(asyncio.get_running_loop().create_future())
            return await arrivals[-1]

        def ready(self) -> None:
            return None

        async def close(self) -> None:
            pass

    class Transport:
        async def updates(self, after_seq: int, limit: int) -> UpdatesResponse:
            return UpdatesResponse(events=[], has_more=False, current_seq=0)

        async def live(self, after_seq: int) -> Socket:
            return Socket()

    store = LocalStore(str(tmp_path / "local.db"), FilePersistence())
    await store.open()
    await store.apply_remote([], 0)  # (synced once: no snapshot to take)
    engine = SyncEngine(store, Transport(), lambda: None, lambda status: None)  # type: ignore[arg-type]
    run = asyncio.ensure_future(engine.run())
    await until(lambda: arrivals, "the engine follows the live socket")
    arrivals[-1].set_result(PingFrame())  # a frame, and the Cancel, at once
    run.cancel()
    done, _ = await asyncio.wait({run}, timeout=5)
    assert run in done and run.cancelled(), "the engine went on after it was cancelled"
    store.close()
