"""Live sockets: in-process fan-out (a commit wakes every live socket of its account) and the
socket loop itself.

A socket's events always come from a read of the store after its own cursor (the hub's read of a
commit, shared by every socket at that cursor, or its own), begun after it was woken: so a missed
or merged wake-up can never cause a gap or a duplicate, and every commit reaches every socket.

The hub also keeps the text of every reply streaming now, as the delta frames that reached this
process built it (``Stream``). Right after ``caughtUp`` a socket gets, for each, one delta frame
at offset 0 with all of it, and none of the older deltas still waiting for it: a device that
joins mid-answer shows the text so far at once, and the next delta follows it exactly.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.store import CursorExpired, EventStore
from shared.models import CaughtUpFrame, DeltaFrame, EventFrame, PingFrame

BACKLOG_PAGE = 500
PING = json.dumps(PingFrame().wire())


# Deltas are not durable: a socket too slow to take this many is given the texts so far instead
# (from the hub's streams) and the deltas after them.
MAX_PENDING_DELTAS = 1000
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
    """One live socket's mailbox: whether the log changed (and the hub's read of it, when it has
    one), and the delta frames to pass on."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.log_changed = True  # the backlog is to be read first
        self.cursor = 0  # where the socket stands in the log
        self.woken = 0  # when it was last woken (SharedReads.now()): its next read begins after
        self.page: Page | None = None
        self.deltas: deque[tuple[str, str]] = deque()  # (message id, the frame's JSON text)
        # How many of ``deltas`` came before the latest commit the socket was told of: they go
        # out before that commit's events (a reply's last words before the event that ends it).
        self.deltas_before_log = 0
        self.resend = False  # the streams' texts so far are to be sent (caughtUp, or deltas lost)
        self.ping_due = False


@dataclass
class Stream:
    """A reply streaming now, as the delta frames that reached this process built it."""

    run_id: str
    text: str  # from offset 0
    complete: bool  # False: a delta was missed (this process came mid-answer, or lost one)
    touched: float  # time.monotonic() of its last delta


@dataclass(frozen=True)
class Page:
    """One read of the log after ``after``, with each event's frame serialized once for every
    socket."""

    after: int
    frames: list[tuple[int, str]]  # (seq, the JSON text of its event frame)
    has_more: bool
    current_seq: int


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
        updates = await self._store.read_updates(account_id, cursor, BACKLOG_PAGE)
        frames = [(e.seq, json.dumps(EventFrame(event=e).wire())) for e in updates.events]
        return Page(cursor, frames, updates.has_more, updates.current_seq)


class Feed:
    """The live sockets of one account in this process, and how far the log has been read for
    them."""

    def __init__(self) -> None:
        self.subscriptions: set[Subscription] = set()
        # Every socket has been woken after a read of the log up to here began (-1: not known).
        self.head = -1
        self.wanted = 0  # a commit up to here is known of
        self.unread = False  # a change of unknown seq is known of
        self.reading = False


class Hub:
    """Wakes the live sockets of an account when its log changes.

    A commit is read once, by the hub, before any socket wakes: the read starts after the commit,
    from where the account's sockets stand, and every socket at that cursor takes its frames from
    it without a read (or a wait) of its own; a socket elsewhere (still in its backlog) reads for
    itself. Either way each socket's next frames come from a read begun after the commit, so a
    notification of a seq already so read can be dropped, and one that comes during a read brings
    another read after it.
    """

    def __init__(self, reads: SharedReads) -> None:
        self._reads = reads
        self._feeds: dict[str, Feed] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._streams: dict[str, dict[str, Stream]] = {}  # account -> message id -> its stream
        self._pruned = time.monotonic()
        self.closing = False

    def go_away(self) -> None:
        """The server is shutting down: every socket closes with 1001 "going away"."""
        self.closing = True
        self.notify_all()

    def subscribe(self, account_id: str, cursor: int = 0) -> Subscription:
        subscription = Subscription()
        subscription.cursor, subscription.woken = cursor, self._reads.now()
        self._feeds.setdefault(account_id, Feed()).subscriptions.add(subscription)
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
        for subscription in feed.subscriptions:
            subscription.deltas_before_log = len(subscription.deltas)
        if seq is not None and seq <= feed.head:
            return
        if seq is None:
            feed.unread = True
        else:
            feed.wanted = max(feed.wanted, seq)
        if not feed.reading:
            feed.reading = True
            task = asyncio.ensure_future(self._read_for(account_id, feed))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read_for(self, account_id: str, feed: Feed) -> None:
        try:
            while (feed.unread or feed.wanted > feed.head) and feed.subscriptions:
                known, feed.unread = feed.wanted, False
                cursor = feed.head if feed.head >= 0 else max(s.cursor for s in feed.subscriptions)
                try:
                    page: Page | None = await self._reads.read(account_id, cursor, self._reads.now())
                except Exception:  # the sockets read for themselves, and meet the error there
                    page = None
                if page is None or page.has_more:
                    # The sockets' own reads, which begin after this, see everything committed
                    # so far; where they stand is not known until the next read.
                    feed.head, feed.unread, feed.wanted = -1, False, 0
                else:
                    feed.head = page.current_seq
                    if feed.wanted == known:  # nothing new came while reading: all is read
                        feed.wanted = 0
                self._wake(feed, page)
        finally:
            feed.reading = False

    def _wake(self, feed: Feed, page: Page | None) -> None:
        now = self._reads.now()
        for subscription in feed.subscriptions:
            subscription.woken = now
            subscription.page = page
            subscription.log_changed = True
            subscription.ready.set()

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
        self._add(account_id, delta)
        feed = self._feeds.get(account_id)
        for subscription in feed.subscriptions if feed is not None else ():
            if len(subscription.deltas) >= MAX_PENDING_DELTAS:  # too slow: the texts so far instead
                subscription.deltas.clear()
                subscription.resend = True
            subscription.deltas.append((delta.message_id, frame))
            subscription.ready.set()

    def _add(self, account_id: str, delta: DeltaFrame) -> None:
        now = time.monotonic()
        if now - self._pruned > STREAM_IDLE_SECONDS / 10:
            self._prune(now)
        streams = self._streams.setdefault(account_id, {})
        stream = streams.get(delta.message_id)
        if stream is None or delta.offset == 0:
            stream = streams[delta.message_id] = Stream(delta.run_id, "", delta.offset == 0, now)
        stream.touched = now
        if not stream.complete:
            return
        if delta.offset > len(stream.text):
            stream.complete = False  # a gap: what came between is not known here
        elif delta.offset + len(delta.text) > len(stream.text):  # (less: an old piece, repeated)
            stream.text = stream.text[: delta.offset] + delta.text

    def _prune(self, now: float) -> None:
        self._pruned = now
        for account_id, streams in list(self._streams.items()):
            for message_id, stream in list(streams.items()):
                if now - stream.touched > STREAM_IDLE_SECONDS:
                    del streams[message_id]
            if not streams:
                del self._streams[account_id]

    def end(self, account_id: str, message_id: str) -> None:
        """The reply's run has ended (its text is in the log): its stream is forgotten."""
        streams = self._streams.get(account_id, {})
        streams.pop(message_id, None)
        if not streams:
            self._streams.pop(account_id, None)

    def streams_interrupted(self) -> None:
        """Deltas may have been missed (PostgreSQL's listener was away): no stream is known whole."""
        for streams in self._streams.values():
            for stream in streams.values():
                stream.complete = False

    def text_so_far(self, account_id: str, message_id: str) -> str | None:
        """The reply's text so far, when this process knows it whole."""
        stream = self._streams.get(account_id, {}).get(message_id)
        return stream.text if stream is not None and stream.complete else None

    def streaming(self, account_id: str) -> dict[str, Stream]:
        """The account's replies streaming now whose text this process knows whole."""
        return {m: s for m, s in self._streams.get(account_id, {}).items() if s.complete and s.text}

    def texts_so_far(self, account_id: str, subscription: Subscription) -> list[str]:
        """A delta frame at offset 0 with the whole text so far of each reply streaming now; the
        socket's waiting deltas of those replies are dropped (the texts hold them), so the next
        delta it gets of each follows its text exactly."""
        streams = self.streaming(account_id)
        if streams and subscription.deltas:
            kept = [d for d in subscription.deltas if d[0] not in streams]
            subscription.deltas.clear()
            subscription.deltas.extend(kept)
        return [
            json.dumps(DeltaFrame(message_id=m, run_id=s.run_id, offset=0, text=s.text).wire())
            for m, s in streams.items()
        ]

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
    then every new event as it commits, pings while idle. Every event comes from the store after
    the socket's own cursor, so the stream has no gap and no duplicate."""
    mailbox = hub.subscribe(account_id, cursor)  # before the backlog read: no commit slips between
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
                if caught_up:  # the deltas that came before the commit, first
                    for _ in range(min(mailbox.deltas_before_log, len(mailbox.deltas))):
                        await deliver(mailbox.deltas.popleft()[1])
                mailbox.deltas_before_log = 0
                page, mailbox.page = mailbox.page, None
                if page is None or page.after != cursor:
                    try:
                        page = await hub.read(mailbox, account_id, cursor)
                    except CursorExpired:
                        await close(4410, "cursor_expired")
                        return
                for _, frame in page.frames:
                    await deliver(frame)
                if page.has_more:
                    cursor = mailbox.cursor = page.frames[-1][0]
                    mailbox.log_changed = True
                    await asyncio.sleep(0)  # a long backlog takes turns with the other sockets
                    continue
                cursor = mailbox.cursor = max(cursor, page.current_seq)
                if not caught_up:
                    caught_up = True
                    await deliver(json.dumps(CaughtUpFrame(seq=cursor).wire()))
                    mailbox.resend = True  # then what the replies streaming now have so far
            if mailbox.resend and caught_up:
                mailbox.resend = False
                for frame in hub.texts_so_far(account_id, mailbox):  # (composed at once, then sent)
                    await deliver(frame)
            while mailbox.deltas:
                await deliver(mailbox.deltas.popleft()[1])
            if mailbox.ping_due:
                mailbox.ping_due = False
                await deliver(PING)
            if not (mailbox.log_changed or mailbox.deltas or (mailbox.resend and caught_up) or hub.closing):
                await mailbox.ready.wait()
    finally:
        timer.cancel()
        hub.unsubscribe(account_id, mailbox)
