"""Hypothesis drives several clients against one in-process server: sends, edits and deletes,
chats created and deleted, devices going offline and online, answers lost or duplicated, requests
and answers delayed while other things happen and delivered in another order than they were
sent, tabs reloaded (memory lost, disk kept), the log compacted, events rejected.

Invariants at every step: a client's confirmed state is the server's state at that client's cursor
(the replay of the whole history up to it); the log never holds a message twice. At the end, after
everyone syncs, every client shows exactly the server's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from server.app import create_app
from server.config import Settings
from shared.models import ChatRef, EventType, LoggedEvent, Message, MessageRef
from tests.conftest import QUICK_PASSWORDS
from tests.server.replay import as_state, replay
from tests.webapp.devices import Device, T, new_id, signup
from webapp.transport import NetworkError

DEVICES = 3


def ticking_clock() -> Callable[[], datetime]:
    """The server's clock, a second later at each reading: every event is older than "now" when
    compaction runs, however fast the steps go."""
    moments = (datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=n) for n in itertools.count())
    return lambda: next(moments)


class SyncMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        root = Path(self.dir.name)
        settings = Settings(
            **QUICK_PASSWORDS,
            database_url=f"sqlite:///{root / 'server.db'}", compact_interval_seconds=0, rate_limit_per_minute=0
        )
        self.app = create_app(settings, clock=ticking_clock())
        self.context = self.app.test_app()
        self.run(self.context.__aenter__())
        token = self.run(signup(self.app))
        self.devices = [Device(self.app, token, root / f"device{i}.db") for i in range(DEVICES)]
        self.reader = self.devices[0].transport  # reads the log for the test's own record
        self.history: list[LoggedEvent] = []  # every event ever logged, compacted or not
        self.chats: list[str] = []
        self.messages: list[tuple[str, str]] = []  # (message, chat)

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        under_way = [task for device in self.devices for task in device.under_way.values()]
        for task in under_way:
            task.cancel()
        if under_way:
            self.run(asyncio.wait(under_way))
        for device in self.devices:
            device.store.close()
        self.run(self.context.__aexit__(None, None, None))
        self.loop.close()
        self.dir.cleanup()

    def record(self) -> None:
        """Catch the test's own record up with the log (before anything can compact it)."""
        offline, self.reader.offline = self.reader.offline, False
        while True:
            after = self.history[-1].seq if self.history else 0
            page = self.run(self.reader.updates(after, 1000))
            self.history += page.events
            if not page.has_more:
                break
        self.reader.offline = offline

    # --- what users do --------------------------------------------------------------------

    @rule(device=st.integers(0, DEVICES - 1))
    def create_chat(self, device: int) -> None:
        self.chats.append(self.run(self.devices[device].new_chat()))

    @precondition(lambda self: self.chats)
    @rule(device=st.integers(0, DEVICES - 1), pick=st.integers(0, 1000))
    def send(self, device: int, pick: int) -> None:
        chat = self.chats[pick % len(self.chats)]
        self.messages.append((self.run(self.devices[device].say(chat, f"m{len(self.messages)}")), chat))

    @precondition(lambda self: self.messages)
    @rule(device=st.integers(0, DEVICES - 1), pick=st.integers(0, 1000))
    def edit(self, device: int, pick: int) -> None:
        message, chat = self.messages[pick % len(self.messages)]
        edited = Message(id=message, chat_id=chat, role="user", content=f"edited {pick}", created_at=T)
        self.run(self.devices[device].add(EventType.MESSAGE_EDITED, edited))

    @precondition(lambda self: self.messages)
    @rule(device=st.integers(0, DEVICES - 1), pick=st.integers(0, 1000))
    def delete_message(self, device: int, pick: int) -> None:
        message, chat = self.messages[pick % len(self.messages)]
        self.run(self.devices[device].add(EventType.MESSAGE_DELETED, MessageRef(id=message, chat_id=chat)))

    @precondition(lambda self: self.chats)
    @rule(device=st.integers(0, DEVICES - 1), pick=st.integers(0, 1000))
    def delete_chat(self, device: int, pick: int) -> None:
        chat = self.chats[pick % len(self.chats)]
        self.run(self.devices[device].add(EventType.CHAT_DELETED, ChatRef(id=chat)))

    @rule(device=st.integers(0, DEVICES - 1))
    def send_to_a_chat_the_server_never_had(self, device: int) -> None:
        self.run(self.devices[device].say(new_id(), "rejected"))

    # --- what the network and the browser do ------------------------------------------------

    @rule(device=st.integers(0, DEVICES - 1), offline=st.booleans())
    def network(self, device: int, offline: bool) -> None:
        target = self.devices[device]
        self.run(target.transport.set_offline(offline))
        self.settle(target)

    @rule(device=st.integers(0, DEVICES - 1), step=st.sampled_from(["pull", "push"]), request_arrives=st.booleans())
    def delay_a_pull_or_push(self, device: int, step: str, request_arrives: bool) -> None:
        """The device starts a pull or a push whose answer is held back (and, unless the request
        arrives at once, its request too); other steps happen before it is delivered."""
        target = self.devices[device]
        if step in target.under_way or target.transport.offline:
            return
        target.transport.hold_next = request_arrives
        task = self.loop.create_task(getattr(target.engine, step)())
        target.under_way[step] = task

        async def parked() -> None:
            while not (task.done() or any(not c.gate.is_set() for c in target.transport.held)):
                await asyncio.sleep(0)

        self.run(parked())
        target.transport.hold_next = None  # (a push with nothing to send makes no call)
        self.settle(target)
        self.record()

    @precondition(lambda self: any(d.transport.held for d in self.devices))
    @rule(pick=st.integers(0, 1000), lose=st.booleans())
    def deliver_a_delayed_call(self, pick: int, lose: bool) -> None:
        """Any held call, whichever was sent first: delivered, or lost on the way."""
        held = [(d, call) for d in self.devices for call in d.transport.held]
        device, call = held[pick % len(held)]
        device.transport.release(call, lose)
        self.settle(device)
        self.record()

    def settle(self, device: Device) -> None:
        """Let the device's steps under way run on until they end or wait on a held call."""

        async def quiet() -> None:
            deadline = self.loop.time() + 30  # (the server's SQLite works in threads: real time)
            while self.loop.time() < deadline:
                waiting = sum(not c.gate.is_set() for c in device.transport.held)
                if sum(not t.done() for t in device.under_way.values()) <= waiting:
                    return
                await asyncio.sleep(0.001)
            raise AssertionError("a step under way neither ends nor waits")

        self.run(quiet())
        for step, task in list(device.under_way.items()):
            if task.done():
                del device.under_way[step]
                if not task.cancelled() and not isinstance(task.exception(), NetworkError | type(None)):
                    raise task.exception()  # type: ignore[misc]

    @rule(device=st.integers(0, DEVICES - 1))
    def a_request_arrives_twice(self, device: int) -> None:
        target = self.devices[device]
        target.transport.duplicate_next = True
        with contextlib.suppress(NetworkError):
            self.run(target.sync())
        target.transport.duplicate_next = False
        self.record()

    @rule(device=st.integers(0, DEVICES - 1), compact_first=st.sampled_from([None, None, 0, 10**9]))
    def sync(self, device: int, compact_first: int | None) -> None:
        if compact_first is not None:  # often just before a device comes back: the case that matters
            self.compact(compact_first)
        with contextlib.suppress(NetworkError):
            self.run(self.devices[device].sync())
        self.record()

    @rule(device=st.integers(0, DEVICES - 1), times=st.integers(1, 2))
    def push_whose_answer_is_lost(self, device: int, times: int) -> None:
        """The server takes the batch (maybe twice) but the answers never arrive."""
        target = self.devices[device]
        pending = [p.event for p in target.store.outbox()]
        if pending and not target.transport.offline:
            for _ in range(times):
                self.run(target.transport.submit(pending))
        self.record()

    @rule(device=st.integers(0, DEVICES - 1))
    def reload(self, device: int) -> None:
        self.devices[device].reload()

    @rule(retention=st.sampled_from([0, 10**9]))
    def compact_the_log(self, retention: int) -> None:
        self.compact(retention)

    def compact(self, retention: int) -> None:
        self.record()
        self.run(self.app.extensions["store"].compact_all(retention_seconds=retention, grace_seconds=0))

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def confirmed_state_is_the_servers_state_at_the_cursor(self) -> None:
        for device in self.devices:
            cursor = device.store.last_seq()
            progress = device.store.snapshot_progress()
            if progress is not None:
                # A snapshot under way (its cursor has not moved): what it has stored so far is
                # part of the state at its upToSeq, rows as they were then.
                at = replay([e for e in self.history if e.seq <= progress.up_to_seq])
                for table, rows in as_state(device.store.confirmed()).items():
                    for key, row in rows.items():
                        assert at[table].get(key) == row, f"snapshot at {progress.up_to_seq}: {table} {key}"
                continue
            expected = replay([e for e in self.history if e.seq <= cursor])
            assert as_state(device.store.confirmed()) == expected, f"device at {cursor}"

    @invariant()
    def no_message_is_logged_twice(self) -> None:
        appended = [e.payload.id for e in self.history if e.type == EventType.MESSAGE_APPENDED]
        assert len(appended) == len(set(appended))

    def check_convergence(self) -> None:
        for device in self.devices:
            device.transport.offline = False
            for call in list(device.transport.held):
                device.transport.release(call)
            self.settle(device)
        for _ in range(2):  # everyone pushes, then everyone pulls what the others pushed
            for device in self.devices:
                self.run(device.sync())
        self.record()
        server = as_state(self.run(server_snapshot(self.reader)))
        assert server == replay(self.history)
        for device in self.devices:
            assert device.store.pending_count() == 0
            assert as_state(device.store.confirmed()) == server
            shown = {c.id for c in device.store.chats()}, {
                m.id for c in device.store.chats() for m in device.store.messages(c.id)
            }
            assert shown == (set(server["chats"]), set(server["messages"]))


async def server_snapshot(transport: Any) -> Any:
    from shared.models import Snapshot

    state = await transport.state_models(None, None)
    chats, messages, page = list(state.snapshot.chats), list(state.snapshot.messages), state.next_page
    while page:
        more = await transport.state_models(state.up_to_seq, page)
        chats, messages, page = chats + more.snapshot.chats, messages + more.snapshot.messages, more.next_page
    return Snapshot(chats=chats, messages=messages)


class ConvergingMachine(SyncMachine):
    """The same, with a final sync of every device and the end-state check as the last step."""

    def teardown(self) -> None:
        try:
            self.check_convergence()
        finally:
            super().teardown()


ConvergingMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)
test_clients_converge = ConvergingMachine.TestCase
