"""What a live socket and the hub decide, as pure state machines: no asyncio, no socket, no clock
(``server/live.py`` is the I/O around them, and passes the time in where it is needed).

``LiveSocket`` is one socket (docs/protocol.md, "WS /sync/live"). Its inputs are what happens to it
(``handle``: the log advanced, the hub read the log for it, its own read came back or found its
cursor expired, a delta arrived, the texts so far it asked for, a ping is due, the server is going
away), and ``writable()``: the socket can take a frame now, so what does it do next? The answer
is one output: a frame to send (an event, ``caughtUp``, a delta, a ping), a read to do (the log
after its cursor, or the texts so far of the replies streaming now), a pause between backlog
pages, a close, or nothing until the next input. What it promises, whatever the order of its
inputs (``tests/server/test_live_machine.py``):

- events go out in seq order with no duplicate, gapless after ``caughtUp`` (each comes from a
  read of the log after the socket's cursor: a missed or merged wake-up cannot cause a gap);
- ``caughtUp`` once, after the backlog, then at once the texts so far of the replies streaming
  now (one delta at offset 0 each, in place of their older deltas still waiting), so the next
  delta of each follows its text exactly; again after the socket fell ``max_deltas`` behind,
  before any more of the log is read (a delta that came after the drop waits for its text);
- the deltas that arrived before a commit was notified go out before that commit's events (a
  reply's last words before the event that ends it), and no delta of a reply goes out after the
  event that ended it (its status one of ``ENDED``, or its Stop): across processes of one
  PostgreSQL a final event can be read before the last deltas arrive, and a run goes on
  streaming for up to a second after a Stop;
- a ping only when one is due and nothing else is to be sent.

``Feed`` is the hub's side for one account: when to read the log for its sockets (once per
commit, before any socket wakes), and when a notification costs nothing. (The hub's copy of the
replies streaming now, what ``ReadStreams`` reads, is ``server/streams.py``.)
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, assert_never

from server.store import Updates
from shared.models import ENDED, CaughtUpFrame, EventFrame, LoggedEvent, Message, PingFrame, RunCancel

# Deltas are not durable: a socket too slow to take this many is given the texts so far instead
# (from the hub's streams) and the deltas after them.
MAX_PENDING_DELTAS = 1000
# How many ended runs a socket remembers, to drop their late deltas (which come within about a
# second of the end: a run notices a Stop within one, another process's NOTIFY sooner).
MAX_ENDED = 256


# --- frames ---------------------------------------------------------------------------------


class Event(NamedTuple):
    """An event frame, serialized once for every socket that sends it."""

    seq: int
    text: str  # the JSON text of its event frame
    ends: str | None  # the run this event ends (its reply's last words came before), if it ends one


@dataclass(frozen=True, slots=True)
class CaughtUp:
    seq: int

    @property
    def text(self) -> str:
        return json.dumps(CaughtUpFrame(seq=self.seq).wire())


@dataclass(frozen=True, slots=True)
class Delta:
    """A delta frame of a reply: an input when it arrives, the same object an output when sent."""

    message_id: str
    text: str  # the JSON text of the frame
    run_id: str  # the run that wrote it (a reply continued has several, one after the other)


@dataclass(frozen=True, slots=True)
class Ping:
    text = json.dumps(PingFrame().wire())


PING = Ping()
Frame = Event | CaughtUp | Delta | Ping


def ended_run(event: LoggedEvent) -> str | None:
    """The run ``event`` ends: its reply logged with an ended status, or its Stop. (An ended run
    writes nothing more: a reply continued is written by a new run, whose deltas go out.)"""
    payload = event.payload
    if isinstance(payload, RunCancel):
        return payload.run_id
    if isinstance(payload, Message) and payload.run_id is not None and payload.status in ENDED:
        return payload.run_id
    return None


@dataclass(frozen=True)
class Page:
    """One read of the log after ``after``, each event's frame serialized once for every socket."""

    after: int
    frames: list[Event]
    has_more: bool
    current_seq: int


def page_of(after: int, updates: Updates) -> Page:
    frames = [Event(e.seq, json.dumps(EventFrame(event=e).wire()), ended_run(e)) for e in updates.events]
    return Page(after, frames, updates.has_more, updates.current_seq)


# --- the socket's inputs and outputs --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogAdvanced:
    """A commit of the account was notified (up to ``seq``, when known). To a socket: the deltas
    waiting now came before it, and go out before its events."""

    seq: int | None = None


@dataclass(frozen=True, slots=True)
class LogChanged:
    """The hub woke the socket after the log changed, with its read of the log after where the
    sockets stand (``None``: read for yourself)."""

    page: Page | None


@dataclass(frozen=True, slots=True)
class LogRead:
    """The socket's own read of the log (asked for with ``ReadLog``) came back."""

    page: Page


@dataclass(frozen=True, slots=True)
class ReadExpired:
    """The socket's own read found its cursor older than the log."""


@dataclass(frozen=True, slots=True)
class StreamsRead:
    """The texts so far (asked for with ``ReadStreams``): message id -> a delta at offset 0 with
    the whole text, for each reply streaming now whose text the hub knows whole."""

    texts: Mapping[str, Delta]


@dataclass(frozen=True, slots=True)
class PingDue:
    """Nothing was sent for the ping interval."""


@dataclass(frozen=True, slots=True)
class GoingAway:
    """The server is shutting down."""


Input = LogAdvanced | LogChanged | LogRead | ReadExpired | Delta | StreamsRead | PingDue | GoingAway


@dataclass(frozen=True, slots=True)
class ReadLog:
    """Read the log after ``after``; then ``LogRead`` (or ``ReadExpired``)."""

    after: int


@dataclass(frozen=True, slots=True)
class ReadStreams:
    """Ask the hub for the texts so far; then, at once, ``StreamsRead``."""


@dataclass(frozen=True, slots=True)
class Pause:
    """A backlog page is out: let the other sockets take a turn before the next read."""


@dataclass(frozen=True, slots=True)
class Close:
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do until the next input."""


Output = Event | CaughtUp | Delta | Ping | ReadLog | ReadStreams | Pause | Close | Idle

NOTIFIED = LogAdvanced()
PING_DUE = PingDue()
GOING_AWAY = GoingAway()
READ_EXPIRED = ReadExpired()
READ_STREAMS = ReadStreams()
PAUSE = Pause()
IDLE = Idle()
CLOSE_GOING_AWAY = Close(1001, "going_away")
CLOSE_EXPIRED = Close(4410, "cursor_expired")


class LiveSocket:
    """One live socket's decisions (see the module's docstring)."""

    __slots__ = (
        "cursor", "caught_up", "log_changed", "_page", "_pause", "_close", "_queue", "_next", "_deltas",
        "_before_log", "resend", "_ping_due", "_ended", "_max_deltas",
    )  # fmt: skip

    def __init__(self, cursor: int, max_deltas: int = MAX_PENDING_DELTAS) -> None:
        self.cursor = cursor  # every event up to here is sent or queued to be (a read begins after it)
        self.caught_up = False
        self.log_changed = True  # the log is to be read (the backlog first)
        self._page: Page | None = None  # the hub's latest read, taken if it begins at the cursor
        self._pause = False
        self._close: Close | None = None
        self._queue: list[Frame] = []  # decided, in order: a page's events, caughtUp, texts so far
        self._next = 0  # the next of ``_queue`` to send
        self._deltas: deque[Delta] = deque()
        # How many of ``_deltas`` (from the front) came before the latest commit notified.
        self._before_log = 0
        self.resend = False  # the texts so far are to be sent (after caughtUp, or deltas lost)
        self._ping_due = False
        self._ended: dict[str, None] = {}  # the runs ended, oldest first
        self._max_deltas = max_deltas

    @property
    def deltas(self) -> list[Delta]:
        """The deltas waiting, oldest first."""
        return list(self._deltas)

    def handle(self, event: Input) -> None:
        match event:
            case LogAdvanced():
                self._before_log = len(self._deltas)
            case LogChanged(page):
                self.log_changed, self._page = True, page
            case LogRead(page):
                if self.caught_up and self.resend:  # (taken once the texts so far are out)
                    self.log_changed, self._page = True, page
                else:
                    self._take(page)
            case ReadExpired():
                self._close = self._close or CLOSE_EXPIRED
            case Delta():
                self._arrived(event)
            case StreamsRead(texts):
                self._texts(texts)
            case PingDue():
                self._ping_due = True
            case GoingAway():
                self._close = self._close or CLOSE_GOING_AWAY
            case _:  # (a new input fails type-checking here until it is handled above)
                assert_never(event)

    def writable(self) -> Output:
        """The socket can take a frame (the last one is sent): what it does next."""
        if self._close is not None:
            return self._close
        while True:
            frame = self._queued()
            if frame is not None:
                return frame
            if self.resend and self.caught_up:  # deltas were dropped: the texts so far before more of the log
                self.resend = False
                return READ_STREAMS
            if not self.log_changed:
                break
            if self._pause:
                self._pause = False
                return PAUSE
            self.log_changed = False
            page, self._page = self._page, None
            if page is None or page.after != self.cursor:
                return ReadLog(self.cursor)
            self._take(page)
        while self.caught_up and self._deltas:
            delta = self._deltas.popleft()
            self._before_log = max(0, self._before_log - 1)
            if delta.run_id not in self._ended:
                return delta
        if self._ping_due:
            self._ping_due = False
            return PING
        return IDLE

    def _queued(self) -> Frame | None:
        while self._next < len(self._queue):
            frame = self._queue[self._next]
            self._next += 1
            if self._next == len(self._queue):
                self._queue, self._next = [], 0
            if isinstance(frame, Event):
                if frame.ends is not None:
                    self._end(frame.ends)
            elif isinstance(frame, Delta) and frame.run_id in self._ended:
                continue
            return frame
        return None

    def _take(self, page: Page) -> None:
        """A read of the log after the cursor: its events queued, behind the deltas that came
        before the commits notified so far."""
        if self.caught_up:
            for _ in range(min(self._before_log, len(self._deltas))):
                self._queue.append(self._deltas.popleft())
        self._before_log = 0  # (before caughtUp the deltas wait for the texts so far)
        self._queue.extend(page.frames)
        if page.has_more and page.frames:
            self.cursor = page.frames[-1].seq
            self.log_changed = self._pause = True
            return
        self.cursor = max(self.cursor, page.current_seq)
        if not self.caught_up:
            self.caught_up = True
            self._queue.append(CaughtUp(self.cursor))
            self.resend = True  # then what the replies streaming now have so far

    def _arrived(self, delta: Delta) -> None:
        if delta.run_id in self._ended:
            return
        if len(self._deltas) >= self._max_deltas:  # too slow: the texts so far instead
            self._deltas.clear()
            self._before_log = 0
            self.resend = True
        self._deltas.append(delta)

    def _texts(self, texts: Mapping[str, Delta]) -> None:
        """The texts so far go out next; the waiting deltas they hold are dropped."""
        if texts and self._deltas:
            before = list(self._deltas)[: self._before_log]
            kept = [d for d in self._deltas if d.message_id not in texts]
            self._before_log = sum(1 for d in before if d.message_id not in texts)
            self._deltas = deque(kept)
        self._queue.extend(delta for delta in texts.values() if delta.run_id not in self._ended)

    def _end(self, run_id: str) -> None:
        self._ended[run_id] = None
        if len(self._ended) > MAX_ENDED:
            del self._ended[next(iter(self._ended))]


# --- the hub's reads for one account --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HubRead:
    """The hub's read of the log for the account's sockets came back (``None``: it failed)."""

    page: Page | None


@dataclass(frozen=True, slots=True)
class ReadsStopped:
    """The hub's reading stopped (its task was cancelled, or no socket is left)."""


FeedInput = LogAdvanced | HubRead | ReadsStopped


@dataclass(frozen=True, slots=True)
class ReadFor:
    """Read the log for the sockets after ``after`` (``None``: after the furthest socket's cursor,
    where they stand not being known), then ``HubRead``."""

    after: int | None


class Feed:
    """When the hub reads the log for an account's sockets. A commit is read once, before any
    socket wakes, from where the sockets stand; each socket's next frames come from a read begun
    after the commit, so a notification of a seq already so read is dropped, and one that comes
    during a read brings another read after it."""

    __slots__ = ("head", "wanted", "unread", "reading", "_known")

    def __init__(self) -> None:
        # Every socket has been woken after a read of the log up to here began (-1: not known).
        self.head = -1
        self.wanted = 0  # a commit up to here is known of
        self.unread = False  # a change of unknown seq is known of
        self.reading = False
        self._known = 0  # ``wanted`` when the read in flight began

    def handle(self, event: FeedInput) -> ReadFor | None:
        """The next read to do, if one is to start now."""
        match event:
            case LogAdvanced(seq):
                if seq is not None and seq <= self.head:
                    return None
                if seq is None:
                    self.unread = True
                else:
                    self.wanted = max(self.wanted, seq)
                if self.reading:
                    return None
                self.reading = True
                return self._next()
            case HubRead(page):
                if page is None or page.has_more:
                    # The sockets' own reads, which begin after this, see everything committed
                    # so far; where they stand is not known until the next read.
                    self.head, self.unread, self.wanted = -1, False, 0
                else:
                    self.head = page.current_seq
                    if self.wanted == self._known:  # nothing new came while reading: all is read
                        self.wanted = 0
                return self._next()
            case ReadsStopped():
                self.reading = False
                return None
            case _:
                assert_never(event)

    def _next(self) -> ReadFor | None:
        if self.unread or self.wanted > self.head:
            self._known, self.unread = self.wanted, False
            return ReadFor(self.head if self.head >= 0 else None)
        self.reading = False
        return None
