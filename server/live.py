"""Live sockets: in-process fan-out (a commit wakes every live socket of its account) and the
socket loop itself, the I/O around the state machines of ``server/live_machine.py`` (which decide
what each socket sends when, and when the hub reads the log).

A socket's events always come from a read of the store after its own cursor (the hub's read of a
commit, shared by every socket at that cursor, or its own), begun after it was woken: so a missed
or merged wake-up can never cause a gap or a duplicate, and every commit reaches every socket.

The hub also keeps the text of every reply streaming now, as the delta frames that reached this
process built it (``live_machine.Streams``). Right after ``caughtUp`` a socket gets, for each, one delta frame
at offset 0 with all of it, and none of the older deltas still waiting for it: a device that
joins mid-answer shows the text so far at once, and the next delta follows it exactly.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, assert_never

from server.live_machine import (
    GOING_AWAY,
    PING_DUE,
    READ_EXPIRED,
    CaughtUp,
    Close,
    Delta,
    Event,
    Feed,
    HubRead,
    Idle,
    Input,
    LiveSocket,
    LogAdvanced,
    LogChanged,
    LogRead,
    Page,
    Pause,
    Ping,
    ReadFor,
    ReadLog,
    ReadsStopped,
    ReadStreams,
    StreamsRead,
    page_of,
)
from server.store import CursorExpired, EventStore
from server.streams import Stream, Streams
from shared.models import DeltaFrame

BACKLOG_PAGE = 500
READS_STOPPED = ReadsStopped()

# A stream no delta or end has touched for this long is forgotten (its run's process died, or
# its end was missed while PostgreSQL's listener was away).
STREAM_IDLE_SECONDS = 300.0


# Where a WebSocket's scope keeps the ASGI server's own send callable (see KeepAsgiSend).
ASGI_SEND = "chat.asgi_send"


class KeepAsgiSend:
    """ASGI middleware: a WebSocket's scope keeps the server's send callable, so a live socket
    sends each frame straight to it. Quart's ``websocket.send`` first awaits ``asyncio.sleep(0)``,
    one more turn of the event loop per frame: a fan-out to a thousand sockets paid for a thousand
    of them. A live socket yields on its own between pages (``follow``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            scope = {**scope, ASGI_SEND: send}
        await self.app(scope, receive, send)


def text_sender(scope: Mapping[str, Any]) -> Callable[[str], Awaitable[None]]:
    """Send a text frame on the (accepted) WebSocket of this scope."""
    send = scope[ASGI_SEND]

    async def send_text(text: str) -> None:
        await send({"type": "websocket.send", "text": text})

    return send_text


class Subscription:
    """One live socket in the hub: its state machine (``LiveSocket``), an event set when an input
    may have given it something to do, and when it was last woken (its next read begins after)."""

    __slots__ = ("machine", "ready", "woken")

    def __init__(self, cursor: int, woken: int) -> None:
        self.machine = LiveSocket(cursor)
        self.ready = asyncio.Event()
        self.woken = woken  # (SharedReads.now())

    def take(self, event: Input) -> None:
        self.machine.handle(event)
        self.ready.set()

    @property
    def log_changed(self) -> bool:
        """The socket is to read the log (or take the hub's read of it)."""
        return self.machine.log_changed


class SharedReads:
    """Sockets of one account that ask for the same (account, cursor) while a read of it is in
    flight share that read (after a restart, a thousand reconnecting sockets cost one read), but
    only a read begun after the caller's ``since``: a socket woken by a commit must not take a
    read that began before the commit."""

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._pending: dict[tuple[str, int], tuple[int, asyncio.Future[Page]]] = {}
        self._ticks = itertools.count(1)

    def now(self) -> int:
        """A point in the order of reads: a read begun after it sees every commit made before."""
        return next(self._ticks)

    async def read(self, account_id: str, cursor: int, since: int) -> Page:
        key = (account_id, cursor)
        pending = self._pending.get(key)
        if pending is None or pending[0] <= since:
            pending = self._pending[key] = (self.now(), asyncio.ensure_future(self._read(account_id, cursor)))
            pending[1].add_done_callback(functools.partial(self._forget, key, pending))
        return await asyncio.shield(pending[1])

    def _forget(self, key: tuple[str, int], pending: tuple[int, asyncio.Future[Page]], _: object) -> None:
        if self._pending.get(key) is pending:
            del self._pending[key]

    async def _read(self, account_id: str, cursor: int) -> Page:
        return page_of(cursor, await self._store.read_updates(account_id, cursor, BACKLOG_PAGE))



class Sockets:
    """The live sockets of one account in this process, and the hub's reads for them."""

    __slots__ = ("subscriptions", "reads")

    def __init__(self) -> None:
        self.subscriptions: set[Subscription] = set()
        self.reads = Feed()


class Hub:
    """Wakes the live sockets of an account when its log changes, and passes them the deltas.

    A commit is read once, by the hub, before any socket wakes (``live_machine.Feed`` decides
    when): the read starts after the commit, from where the account's sockets stand, and every
    socket at that cursor takes its frames from it without a read (or a wait) of its own; a
    socket elsewhere (still in its backlog) reads for itself.
    """

    def __init__(self, reads: SharedReads) -> None:
        self._reads = reads
        self._feeds: dict[str, Sockets] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._streams = Streams(time.monotonic(), STREAM_IDLE_SECONDS)
        self.closing = False

    def go_away(self) -> None:
        """The server is shutting down: every socket closes with 1001 "going away"."""
        self.closing = True
        for feed in self._feeds.values():
            for subscription in feed.subscriptions:
                subscription.take(GOING_AWAY)

    def subscribe(self, account_id: str, cursor: int = 0) -> Subscription:
        subscription = Subscription(cursor, self._reads.now())
        if self.closing:
            subscription.take(GOING_AWAY)
        self._feeds.setdefault(account_id, Sockets()).subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, account_id: str, subscription: Subscription) -> None:
        feed = self._feeds.get(account_id)
        if feed is not None:
            feed.subscriptions.discard(subscription)
            if not feed.subscriptions:
                del self._feeds[account_id]

    def notify(self, account_id: str, seq: int | None = None) -> None:
        """The account's log changed (up to ``seq``, when known): its sockets read what is new
        after their own cursors. A commit already read for them costs nothing."""
        feed = self._feeds.get(account_id)
        if feed is None:
            return
        advanced = LogAdvanced(seq)
        for subscription in feed.subscriptions:
            subscription.machine.handle(advanced)  # (nothing to send before the read: not woken)
        read = feed.reads.handle(advanced)
        if read is not None:
            task = asyncio.ensure_future(self._read_for(account_id, feed, read))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read_for(self, account_id: str, feed: Sockets, read: ReadFor | None) -> None:
        try:
            while read is not None and feed.subscriptions:
                after = read.after
                if after is None:
                    after = max(s.machine.cursor for s in feed.subscriptions)
                try:
                    page: Page | None = await self._reads.read(account_id, after, self._reads.now())
                except Exception:  # the sockets read for themselves, and meet the error there
                    page = None
                read = feed.reads.handle(HubRead(page))
                self._wake(feed, page)
        finally:
            feed.reads.handle(READS_STOPPED)

    def _wake(self, feed: Sockets, page: Page | None) -> None:
        now, changed = self._reads.now(), LogChanged(page)
        for subscription in feed.subscriptions:
            subscription.woken = now
            subscription.take(changed)

    async def read(self, subscription: Subscription, account_id: str, cursor: int) -> Page:
        """A socket's own read of the log after its cursor, begun after it was last woken (and
        shared with others at that cursor)."""
        return await self._reads.read(account_id, cursor, subscription.woken)

    def notify_all(self) -> None:
        """Wake every socket (after a notification may have been missed): each re-reads from its
        own cursor, so a spurious wake-up costs one read and nothing else."""
        for feed in self._feeds.values():
            self._wake(feed, None)

    def publish(self, account_id: str, frame: str) -> None:
        """Pass a ``delta`` frame (its JSON text) to the account's sockets in this process, and
        add it to the reply's stream."""
        delta = DeltaFrame.model_validate_json(frame)
        self._streams.add(account_id, delta, time.monotonic())
        feed = self._feeds.get(account_id)
        if feed is not None:
            arrived = Delta(delta.message_id, frame, delta.run_id)
            for subscription in feed.subscriptions:
                subscription.take(arrived)

    def end(self, account_id: str, message_id: str) -> None:
        """The reply's run has ended (its text is in the log): its stream is forgotten."""
        self._streams.end(account_id, message_id)

    def streams_interrupted(self) -> None:
        """Deltas may have been missed (PostgreSQL's listener was away): no stream is known whole."""
        self._streams.interrupted()

    def text_so_far(self, account_id: str, message_id: str) -> str | None:
        """The reply's text so far, when this process knows it whole."""
        return self._streams.text_so_far(account_id, message_id)

    def streaming(self, account_id: str) -> dict[str, Stream]:
        """The account's replies streaming now whose text this process knows whole."""
        return self._streams.streaming(account_id)

    def texts(self, account_id: str) -> dict[str, Delta]:
        """A delta at offset 0 with the whole text so far of each reply streaming now."""
        return {m: Delta(m, text, run_id) for m, (run_id, text) in self._streams.texts(account_id).items()}

    def socket_count(self) -> int:
        return sum(len(f.subscriptions) for f in self._feeds.values())


async def follow(
    send: Callable[[str], Awaitable[None]],
    close: Callable[[int, str], Awaitable[None]],
    hub: Hub,
    account_id: str,
    cursor: int,
    ping_seconds: float,
) -> None:
    """One live socket (docs/protocol.md, "WS /sync/live"): the backlog after ``cursor``, ``caughtUp``,
    then every new event as it commits, pings while idle. What to send and when is the socket's
    state machine's (``LiveSocket``); this is its I/O: each time the socket can take a frame, it
    does what the machine says next."""
    mailbox = hub.subscribe(account_id, cursor)  # before the backlog read: no commit slips between
    machine = mailbox.machine
    loop = asyncio.get_running_loop()
    sent_at = loop.time()

    # One timer per socket per ping interval, not one per wake-up: it tells the socket a ping is
    # due when nothing was sent for ping_seconds, and arms itself again.
    timer: asyncio.TimerHandle

    def tick() -> None:
        nonlocal timer
        idle = loop.time() - sent_at
        if idle >= ping_seconds * 0.99:
            mailbox.take(PING_DUE)
            idle = 0
        timer = loop.call_later(ping_seconds - idle, tick)

    timer = loop.call_later(ping_seconds, tick)
    try:
        while True:
            output = machine.writable()
            match output:
                case Event() | CaughtUp() | Delta() | Ping():
                    sent_at = loop.time()
                    await send(output.text)
                case ReadLog(after):
                    try:
                        page = await hub.read(mailbox, account_id, after)
                    except CursorExpired:
                        machine.handle(READ_EXPIRED)
                    else:
                        machine.handle(LogRead(page))
                case ReadStreams():
                    machine.handle(StreamsRead(hub.texts(account_id)))
                case Pause():
                    await asyncio.sleep(0)  # a long backlog takes turns with the other sockets
                case Close(code, reason):
                    await close(code, reason)
                    return
                case Idle():
                    mailbox.ready.clear()  # (every input so far is in the machine)
                    await mailbox.ready.wait()
                case _:
                    assert_never(output)
    finally:
        timer.cancel()
        hub.unsubscribe(account_id, mailbox)
