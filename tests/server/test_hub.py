"""The live hub (server/live.py) against an in-memory log: a commit is read once for all of an
account's sockets, and whatever the timing of commits, reads, notifications and sockets joining,
every socket receives exactly the seqs after its cursor, in order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.live import Hub, SharedReads, follow
from server.live_machine import PING_DUE
from server.store import Updates
from shared.models import DeltaFrame, LoggedEvent
from tests.server.events import chat_created, new_id
from tests.waiting import until

PAGE = 3  # the log's own page limit, so that backlogs come in several pages


class MemoryLog:
    """One account's log. A read sees the log as it is partway through it, after ``delay()``,
    and returns after another ``delay()``: commits can land before, during and after it."""

    def __init__(self, delays: list[float] | None = None) -> None:
        self.events: list[LoggedEvent] = []
        self.reads = 0
        self._delays = delays or []

    def delay(self) -> float:
        return self._delays[self.reads % len(self._delays)] if self._delays else 0.001

    def commit(self) -> int:
        seq = len(self.events) + 1
        self.events.append(LoggedEvent.model_validate({**chat_created(new_id()), "seq": seq, "origin": "d"}))
        return seq

    async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
        self.reads += 1
        await asyncio.sleep(self.delay())
        events, current = self.events[after_seq : after_seq + min(limit, PAGE)], len(self.events)
        await asyncio.sleep(self.delay())
        return Updates(events=events, has_more=after_seq + len(events) < current, current_seq=current)


class Socket:
    def __init__(self, hub: Hub, cursor: int, slow: bool = False) -> None:
        self.cursor = cursor
        self.seqs: list[int] = []
        self.caught_up = asyncio.Event()
        self.closed: list[int] = []
        self._slow = slow
        self.task = asyncio.ensure_future(follow(self.send, self.close, hub, "a", cursor, 60))

    async def send(self, text: str) -> None:
        frame: dict[str, Any] = json.loads(text)
        if frame["type"] == "event":
            self.seqs.append(frame["event"]["seq"])
        elif frame["type"] == "caughtUp":
            self.caught_up.set()
        if self._slow:
            await asyncio.sleep(0)

    async def close(self, code: int, reason: str) -> None:
        self.closed.append(code)


async def test_a_commit_is_read_once_for_all_the_sockets_of_its_account() -> None:
    log = MemoryLog()
    hub = Hub(SharedReads(log))  # type: ignore[arg-type]
    sockets = [Socket(hub, 0) for _ in range(50)]
    await asyncio.gather(*(s.caught_up.wait() for s in sockets))
    for expected in (1, 2):
        reads = log.reads
        seq = log.commit()
        hub.notify("a", seq)  # the request handler's notification ...
        hub.notify("a", seq)  # ... and the same commit's from PostgreSQL's LISTEN
        await until(lambda: all(len(s.seqs) == expected for s in sockets))  # noqa: B023 (awaited at once)
        assert log.reads - reads == 1  # one read by the hub; no socket read for itself
        await until(lambda: not hub._tasks, "the hub's read is over")
        hub.notify("a", seq)  # late: already read for every socket
        await until(lambda: not hub._tasks, "any read it began is over")  # (a read begins at the notify)
        assert log.reads - reads == 1
    assert all(s.seqs == [1, 2] for s in sockets)
    for s in sockets:
        s.task.cancel()
    await asyncio.gather(*(s.task for s in sockets), return_exceptions=True)


async def test_the_deltas_that_came_before_a_commit_go_out_before_its_events() -> None:
    """A reply's last words reach the socket before the event that ends the reply, even when the
    socket gets to both at once (here: held up sending a ping meanwhile)."""
    log = MemoryLog()
    hub = Hub(SharedReads(log))  # type: ignore[arg-type]
    order: list[str] = []
    gate = asyncio.Event()

    async def send(text: str) -> None:
        frame = json.loads(text)
        order.append(f"{frame['type']} {frame.get('text') or frame.get('event', {}).get('seq', '')}".strip())
        if frame["type"] == "ping":
            await gate.wait()

    async def close(code: int, reason: str) -> None:
        pass

    task = asyncio.ensure_future(follow(send, close, hub, "a", 0, 60))
    await until(lambda: order == ["caughtUp"])
    [mailbox] = hub._feeds["a"].subscriptions
    mailbox.take(PING_DUE)
    await until(lambda: order[-1:] == ["ping"])  # held up there
    message_id, run_id = new_id(), new_id()
    for offset, word in enumerate("abc"):
        hub.publish("a", json.dumps(DeltaFrame(message_id=message_id, run_id=run_id, offset=offset, text=word).wire()))
    hub.notify("a", log.commit())  # the reply's end
    await until(lambda: mailbox.log_changed, "the hub has read the commit")
    gate.set()
    await until(lambda: len(order) == 6, lambda: order)
    assert order == ["caughtUp", "ping", "delta a", "delta b", "delta c", "event 1"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.integers(1, 4)),
        st.tuples(st.just("join"), st.floats(0, 1), st.booleans()),  # where its cursor is; a slow socket
        st.tuples(st.just("notify"), st.sampled_from(["seq", "old seq", "unknown", "all"])),
        st.tuples(st.just("wait"), st.sampled_from([0, 0.001, 0.003])),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, delays=st.lists(st.sampled_from([0, 0.0005, 0.002]), min_size=1, max_size=5))
def test_every_socket_receives_every_seq_after_its_cursor_once_in_order(
    steps: list[tuple[Any, ...]], delays: list[float]
) -> None:
    async def run() -> None:
        log = MemoryLog(delays)
        hub = Hub(SharedReads(log))  # type: ignore[arg-type]
        sockets = [Socket(hub, 0)]
        pending: list[asyncio.Task[None]] = []

        async def notify_later(seq: int, after: float) -> None:
            await asyncio.sleep(after)
            hub.notify("a", seq)

        for step in steps:
            if step[0] == "commit":
                for _ in range(step[1]):
                    seq = log.commit()
                # Every commit is notified, in this process at once and through LISTEN a bit later.
                hub.notify("a", seq)
                pending.append(asyncio.ensure_future(notify_later(seq, delays[seq % len(delays)])))
            elif step[0] == "join":
                sockets.append(Socket(hub, int(step[1] * len(log.events)), slow=step[2]))
            elif step[0] == "notify":
                kind = step[1]
                if kind == "seq":
                    hub.notify("a", len(log.events))
                elif kind == "old seq":
                    hub.notify("a", max(0, len(log.events) - 2))
                elif kind == "unknown":
                    hub.notify("a")
                else:
                    hub.notify_all()
            else:
                await asyncio.sleep(step[1])
        await asyncio.gather(*pending)
        head = len(log.events)
        try:
            await until(lambda: all(len(s.seqs) == head - s.cursor for s in sockets))
        finally:
            for s in sockets:
                s.task.cancel()
            await asyncio.gather(*(s.task for s in sockets), return_exceptions=True)
        for s in sockets:
            assert s.seqs == list(range(s.cursor + 1, head + 1)) and not s.closed

    asyncio.run(run())
