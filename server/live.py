"""Live sockets: in-process fan-out (a commit wakes every live socket of its account) and the
socket loop itself.

A socket never receives events from here, only a wake-up; it then reads the events after its own
cursor from the store. So a missed or merged wake-up can never cause a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from server.store import CursorExpired, EventStore
from shared.models import CaughtUpFrame, EventFrame, PingFrame

BACKLOG_PAGE = 500
PING = json.dumps(PingFrame().wire())


# Deltas are not durable: a socket too slow to take them loses the oldest, and the message's next
# checkpoint in the log brings it up to date.
MAX_PENDING_DELTAS = 1000


class Subscription:
    """One live socket's mailbox: whether the log changed, and the delta frames to pass on."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.log_changed = True  # the backlog is to be read first
        self.deltas: deque[str] = deque(maxlen=MAX_PENDING_DELTAS)
        self.ping_due = False


class Hub:
    def __init__(self) -> None:
        self._listeners: dict[str, set[Subscription]] = defaultdict(set)
        self.closing = False

    def go_away(self) -> None:
        """The server is shutting down: every socket closes with 1001 "going away"."""
        self.closing = True
        self.notify_all()

    def subscribe(self, account_id: str) -> Subscription:
        subscription = Subscription()
        self._listeners[account_id].add(subscription)
        return subscription

    def unsubscribe(self, account_id: str, subscription: Subscription) -> None:
        listeners = self._listeners.get(account_id)
        if listeners is not None:
            listeners.discard(subscription)
            if not listeners:
                del self._listeners[account_id]

    def notify(self, account_id: str) -> None:
        """The account's log changed: its sockets read what is new after their own cursors."""
        for subscription in self._listeners.get(account_id, ()):
            subscription.log_changed = True
            subscription.ready.set()

    def notify_all(self) -> None:
        """Wake every socket (after a notification may have been missed): each re-reads from its
        own cursor, so a spurious wake-up costs one read and nothing else."""
        for account_id in list(self._listeners):
            self.notify(account_id)

    def publish(self, account_id: str, frame: str) -> None:
        """Pass a non-durable frame (a ``delta``) to the account's sockets in this process."""
        for subscription in self._listeners.get(account_id, ()):
            subscription.deltas.append(frame)
            subscription.ready.set()

    def socket_count(self) -> int:
        return sum(len(s) for s in self._listeners.values())


@dataclass(frozen=True)
class Page:
    """One read of the log, with each event's frame serialized once for every socket."""

    frames: list[tuple[int, str]]  # (seq, the JSON text of its event frame)
    has_more: bool
    current_seq: int


class SharedReads:
    """Sockets of one account woken by the same commit sit at the same cursor: the first one's
    read of the log is shared with the others that ask for the same (account, cursor) while it is
    in flight, so one commit costs one read, not one per socket."""

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._pending: dict[tuple[str, int], asyncio.Future[Page]] = {}

    async def read(self, account_id: str, cursor: int) -> Page:
        key = (account_id, cursor)
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read(account_id, cursor))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _read(self, account_id: str, cursor: int) -> Page:
        updates = await self._store.read_updates(account_id, cursor, BACKLOG_PAGE)
        frames = [(e.seq, json.dumps(EventFrame(event=e).wire())) for e in updates.events]
        return Page(frames, updates.has_more, updates.current_seq)


async def follow(
    send: Callable[[str], Awaitable[None]],
    close: Callable[[int, str], Awaitable[None]],
    reads: SharedReads,
    hub: Hub,
    account_id: str,
    cursor: int,
    ping_seconds: float,
) -> None:
    """One live socket (PROTOCOL.md, WS /sync/live): the backlog after ``cursor``, ``caughtUp``,
    then every new event as it commits, pings while idle. Every event comes from the store after
    the socket's own cursor, so the stream has no gap and no duplicate."""
    mailbox = hub.subscribe(account_id)  # before the backlog read, so no commit slips between
    loop = asyncio.get_running_loop()
    sent_at = loop.time()

    async def deliver(frame: str) -> None:
        nonlocal sent_at
        sent_at = loop.time()
        await send(frame)

    # One timer per socket per ping interval, not one per wake-up: it wakes the socket for a ping
    # when nothing was sent for ping_seconds, and arms itself again.
    timer: asyncio.TimerHandle

    def tick() -> None:
        nonlocal timer
        idle = loop.time() - sent_at
        if idle >= ping_seconds * 0.99:
            mailbox.ping_due = True
            mailbox.ready.set()
            idle = 0
        timer = loop.call_later(ping_seconds - idle, tick)

    timer = loop.call_later(ping_seconds, tick)
    try:
        caught_up = False
        while True:
            mailbox.ready.clear()
            if hub.closing:
                await close(1001, "going_away")
                return
            if mailbox.log_changed:
                mailbox.log_changed = False
                try:
                    page = await reads.read(account_id, cursor)
                except CursorExpired:
                    await close(4410, "cursor_expired")
                    return
                for _, frame in page.frames:
                    await deliver(frame)
                if page.has_more:
                    cursor = page.frames[-1][0]
                    mailbox.log_changed = True
                    continue
                cursor = max(cursor, page.current_seq)
                if not caught_up:
                    caught_up = True
                    await deliver(json.dumps(CaughtUpFrame(seq=cursor).wire()))
            while mailbox.deltas:
                await deliver(mailbox.deltas.popleft())
            if mailbox.ping_due:
                mailbox.ping_due = False
                await deliver(PING)
            if not (mailbox.log_changed or mailbox.deltas or hub.closing):
                await mailbox.ready.wait()
    finally:
        timer.cancel()
        hub.unsubscribe(account_id, mailbox)
