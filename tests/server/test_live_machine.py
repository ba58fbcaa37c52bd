"""The live socket's and the hub's decisions (server/live_machine.py), without sockets: Hypothesis
plays any interleaving of the inputs against a model of the log, the hub and the run worker, and
checks what the socket sends; the bugs live.py had are named scenarios below."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.live_machine import (
    CLOSE_EXPIRED,
    CLOSE_GOING_AWAY,
    GOING_AWAY,
    IDLE,
    NOTIFIED,
    PAUSE,
    PING_DUE,
    READ_EXPIRED,
    READ_STREAMS,
    CaughtUp,
    Close,
    Delta,
    Event,
    Feed,
    HubRead,
    Idle,
    LiveSocket,
    LogAdvanced,
    LogChanged,
    LogRead,
    Output,
    Page,
    Pause,
    Ping,
    ReadFor,
    ReadLog,
    ReadsStopped,
    ReadStreams,
    StreamsRead,
    ended_run,
)
from shared.models import DeltaFrame, LoggedEvent, Message, RunCancel
from tests.server.events import new_id

PAGE = 3  # the log's page, small so that backlogs come in several pages
MESSAGES = ["m0", "m1", "m2"]


def delta(message_id: str, offset: int, text: str) -> Delta:
    # (one run per reply here: its id is the reply's, which the events that end it name)
    frame = DeltaFrame(message_id=message_id, run_id=message_id, offset=offset, text=text)
    return Delta(message_id, json.dumps(frame.wire()), message_id)


@dataclass
class World:
    """The log, the hub's streams and one socket's driver (live.py's ``follow``), with what the
    socket sent so far checked frame by frame."""

    socket: LiveSocket
    start: int
    log: list[Event] = field(default_factory=list)
    reading: int | None = None  # the socket's own read in flight, after this seq
    streamed: dict[str, str] = field(default_factory=dict)  # what each reply streamed, whole
    arrived_after_caught_up: list[tuple[Delta, int]] = field(default_factory=list)  # (delta, log length then)
    local_end: dict[str, int] = field(default_factory=dict)  # reply -> the seq of its first end, notified at once
    unnotified = False
    seqs: list[int] = field(default_factory=list)
    caught_up: int | None = None
    shown: dict[str, str] = field(default_factory=dict)  # each reply's text as a client builds it
    ended: set[str] = field(default_factory=set)  # the replies whose end the socket sent
    pings_due = 0
    closing: Close | None = None
    closed: Close | None = None
    sent: list[str] = field(default_factory=list)  # every frame, as "event 3", "delta m0@4", ...

    def page(self, after: int) -> Page:
        frames = self.log[after : after + PAGE]
        return Page(after, frames, after + len(frames) < len(self.log), len(self.log))

    # -- inputs --

    def commit(self, ends: str | None, local: bool) -> None:
        seq = len(self.log) + 1
        self.log.append(Event(seq, json.dumps({"type": "event", "event": {"seq": seq}}), ends))
        if local:
            if ends is not None:
                self.local_end.setdefault(ends, seq)
            self.socket.handle(LogAdvanced(seq))  # (the appender's on_commit, at once)
        else:
            self.unnotified = True  # (another process's commit: its NOTIFY comes later)

    def notify(self) -> None:
        if self.unnotified:
            self.unnotified = False
            self.socket.handle(LogAdvanced(len(self.log)))

    def stream(self, message_id: str, size: int) -> None:
        text = "abcdefgh"[:size]
        arrived = delta(message_id, len(self.streamed.get(message_id, "")), text)
        self.streamed[message_id] = self.streamed.get(message_id, "") + text
        if self.caught_up is not None:
            self.arrived_after_caught_up.append((arrived, len(self.log)))
        self.socket.handle(arrived)

    def resolve(self) -> None:
        if self.reading is not None:
            after, self.reading = self.reading, None
            self.socket.handle(LogRead(self.page(after)))

    def expire(self) -> None:
        if self.reading is not None:
            self.reading = None
            self.closing = self.closing or CLOSE_EXPIRED
            self.socket.handle(READ_EXPIRED)

    def go_away(self) -> None:
        self.closing = self.closing or CLOSE_GOING_AWAY
        self.socket.handle(GOING_AWAY)

    def ping_due(self) -> None:
        self.pings_due += 1
        self.socket.handle(PING_DUE)

    def writable(self, times: int, reads_at_once: bool = False) -> None:
        for _ in range(times):
            if self.closed is not None or self.reading is not None:
                return
            if self.perform(self.socket.writable()) and not reads_at_once:
                return
            if reads_at_once:
                self.resolve()

    # -- the driver, and the checks of what is sent --

    def perform(self, output: Output) -> bool:
        """Do what the socket said; True when it is idle."""
        if self.closing is not None:
            assert output == self.closing, "a close comes before anything else"
        if isinstance(output, Event | CaughtUp | Ping):
            self.sent.append(f"{type(output).__name__.lower()} {getattr(output, 'seq', '')}".strip())
        elif isinstance(output, Delta):
            self.sent.append(f"delta {output.message_id}@{json.loads(output.text)['offset']}")
        match output:
            case Event(seq, _, ends):
                assert seq == self.start + len(self.seqs) + 1, (seq, self.seqs)  # in order, no gap, no duplicate
                self.seqs.append(seq)
                if ends is not None and ends not in self.ended:
                    self.ended.add(ends)
                    self.check_last_words(ends, seq)
            case CaughtUp(seq):
                assert self.caught_up is None, "caughtUp once"
                assert seq == (self.seqs[-1] if self.seqs else self.start)
                self.caught_up = seq
            case Delta(message_id, text):
                assert self.caught_up is not None, "no delta before caughtUp"
                assert message_id not in self.ended, f"a delta of {message_id} after its end"
                frame = json.loads(text)
                shown = self.shown.get(message_id, "")
                assert frame["offset"] in (0, len(shown)), "each delta follows the text so far"
                self.shown[message_id] = (shown if frame["offset"] else "") + frame["text"]
            case Ping():
                assert self.pings_due > 0, "a ping only when due"
                self.pings_due = 0
                assert self.socket.writable() == IDLE, "a ping only when nothing else is to be sent"
                return True
            case ReadLog(after):
                assert after == self.socket.cursor
                self.reading = after
            case ReadStreams():
                texts = {m: delta(m, 0, t) for m, t in self.streamed.items()}  # (ended or not: the hub's end comes later)
                self.socket.handle(StreamsRead(texts))
            case Pause():
                pass
            case Close():
                self.closed = output
            case Idle():
                return True
        return False

    def check_last_words(self, message_id: str, seq: int) -> None:
        """The deltas of a reply that came (after caughtUp) before its end was committed and
        notified in this process went out before the end."""
        if self.local_end.get(message_id) != seq:
            return
        for arrived, log_length in self.arrived_after_caught_up:
            frame = json.loads(arrived.text)
            if arrived.message_id == message_id and log_length < seq:
                assert frame["offset"] + len(frame["text"]) <= len(self.shown.get(message_id, "")), "last words lost"

    def settle(self) -> None:
        """Every notification delivered, the read in flight back, the hub's read after the last
        commit given, and the socket sending until it is idle: then it has sent everything."""
        self.notify()
        self.resolve()
        self.socket.handle(LogChanged(self.page(self.socket.cursor)))
        self.writable(10_000, reads_at_once=True)
        if self.closed is not None:
            return
        assert self.socket.writable() == IDLE
        assert self.seqs == list(range(self.start + 1, len(self.log) + 1))
        assert self.caught_up is not None
        for message_id, text in self.streamed.items():
            if message_id not in self.ended:
                assert self.shown.get(message_id) == text, message_id


step = st.one_of(
    st.tuples(st.just("commit"), st.sampled_from([None, None, *MESSAGES]), st.booleans()),
    st.tuples(st.just("notify")),
    st.tuples(st.just("delta"), st.sampled_from(MESSAGES), st.integers(1, 8)),
    st.tuples(st.just("hub read"), st.sampled_from(["at the cursor", "elsewhere", "none"])),
    st.tuples(st.just("resolve")),
    st.tuples(st.just("ping")),
    st.tuples(st.just("writable"), st.integers(1, 6)),
    st.tuples(st.just("writable"), st.integers(1, 6)),
)
# A close ends the example: at most one, somewhere.
closing = st.none() | st.tuples(st.integers(0, 60), st.sampled_from([("expire",), ("go away",)]))


@settings(max_examples=300, deadline=None)
@given(
    backlog=st.integers(0, 8),
    start=st.floats(0, 1),
    max_deltas=st.sampled_from([3, 1000]),
    steps=st.lists(step, max_size=60),
    close=closing,
)
def test_any_interleaving_sends_every_event_once_in_order_and_no_delta_after_its_end(
    backlog: int, start: float, max_deltas: int, steps: list[tuple[object, ...]], close: tuple[int, tuple[str]] | None
) -> None:
    if close is not None:
        steps = [*steps[: close[0]], close[1], *steps[close[0] :]]
    cursor = int(start * backlog)
    world = World(LiveSocket(cursor, max_deltas), cursor)
    for _ in range(backlog):
        world.commit(None, True)
    for kind, *args in steps:
        match kind:
            case "commit":
                world.commit(args[0], bool(args[1]))  # type: ignore[arg-type]
            case "notify":
                world.notify()
            case "delta":
                world.stream(str(args[0]), int(args[1]))  # type: ignore[call-overload]
            case "hub read":
                if args[0] == "at the cursor":
                    world.socket.handle(LogChanged(world.page(world.socket.cursor)))
                elif args[0] == "elsewhere":
                    world.socket.handle(LogChanged(world.page(max(0, world.socket.cursor - 1))))
                else:
                    world.socket.handle(LogChanged(None))
            case "resolve":
                world.resolve()
            case "expire":
                world.expire()
            case "ping":
                world.ping_due()
            case "go away":
                world.go_away()
            case "writable":
                world.writable(int(args[0]))  # type: ignore[call-overload]
    world.settle()


# --- the bugs live.py had, as named scenarios ---------------------------------------------------


def caught_up_world(max_deltas: int = 1000) -> World:
    world = World(LiveSocket(0, max_deltas), 0)
    world.writable(10, reads_at_once=True)
    assert world.caught_up == 0
    return world


def end_while_held_up_by_a_ping(world: World) -> None:
    """0da56b4: a socket held up (sending a ping) got to the deltas and the reply's end at once,
    and sent the end first."""
    world.ping_due()
    world.writable(1)  # the ping ... and its send takes a while
    for _ in range(3):
        world.stream("m0", 2)
    world.commit("m0", True)
    world.socket.handle(LogChanged(world.page(0)))  # the hub's read of the end


def end_read_by_the_socket_itself(world: World) -> None:
    """The end read by the socket's own read (woken without the hub's read) rather than the hub's."""
    world.socket.handle(LogChanged(None))
    world.stream("m0", 3)
    world.stream("m0", 3)
    world.commit("m0", True)


def end_while_sending_a_page(world: World) -> None:
    """The deltas and the end come while the socket is still sending an earlier page."""
    for _ in range(4):
        world.commit(None, True)
    world.socket.handle(LogChanged(world.page(0)))
    world.writable(1)  # one event out of three
    world.stream("m0", 5)
    world.commit("m0", True)
    world.socket.handle(LogChanged(world.page(3)))


def deltas_after_a_stop(world: World) -> None:
    """A Stop ends the reply in the log; its run goes on streaming until it notices (up to a
    second): those deltas are not sent after the Stop."""
    world.stream("m0", 4)
    world.commit("m0", True)  # the AssistantRunCancelled
    world.socket.handle(LogChanged(world.page(0)))
    world.writable(10)
    world.stream("m0", 4)
    world.stream("m0", 4)


def end_read_before_its_last_deltas(world: World) -> None:
    """Another process's final event read here before its last deltas reach this process."""
    world.stream("m0", 2)
    world.commit("m0", False)
    world.notify()
    world.socket.handle(LogChanged(world.page(0)))
    world.writable(10)
    world.stream("m0", 2)  # late: dropped


def a_delta_between_the_end_and_its_sending(world: World) -> None:
    """A late delta comes after the end is committed and read, before the socket sent it."""
    world.stream("m0", 2)
    world.commit("m0", True)
    world.socket.handle(LogChanged(world.page(0)))
    world.stream("m0", 2)  # late: dropped once the end is out


def too_slow_then_resent_once(world: World) -> None:
    """1ac58b9 (the socket clears its resend flag itself): fallen behind, the socket gets the
    texts so far once, then the deltas after them."""
    for _ in range(5):
        world.stream("m1", 1)
    assert world.socket.resend
    world.writable(1)  # the texts asked for (ReadStreams, answered at once)
    assert not world.socket.resend
    world.stream("m1", 1)


def joined_mid_answer(world: World) -> None:
    """(Starting again:) a socket that joins while a reply streams gets its text so far right
    after caughtUp, then the next delta follows it."""
    world.stream("m2", 3)
    world.commit(None, True)
    world.socket.handle(LogChanged(world.page(0)))
    world.stream("m2", 3)


SCENARIOS = [
    (end_while_held_up_by_a_ping, ["ping", "delta m0@0", "delta m0@2", "delta m0@4", "event 1"]),
    (end_read_by_the_socket_itself, ["delta m0@0", "delta m0@3", "event 1"]),
    (end_while_sending_a_page, ["event 1", "event 2", "event 3", "delta m0@0", "event 4", "event 5"]),
    (deltas_after_a_stop, ["delta m0@0", "event 1"]),
    (end_read_before_its_last_deltas, ["delta m0@0", "event 1"]),
    (a_delta_between_the_end_and_its_sending, ["delta m0@0", "event 1"]),
    (too_slow_then_resent_once, ["delta m1@0", "delta m1@5"]),
    (joined_mid_answer, ["delta m2@0", "event 1", "delta m2@3"]),
]


@pytest.mark.parametrize(("scenario", "sent"), SCENARIOS, ids=[s.__name__ for s, _ in SCENARIOS])
def test_scenario(scenario: Callable[[World], None], sent: list[str]) -> None:
    world = caught_up_world(max_deltas=3)
    scenario(world)
    world.settle()  # (which checks the properties above too)
    assert world.sent[1:] == sent  # (after caughtUp)


def test_a_socket_that_joins_mid_answer_gets_the_text_so_far_after_caught_up() -> None:
    world = World(LiveSocket(0), 0)
    world.commit(None, True)
    world.stream("m2", 3)  # waiting: the backlog is not read yet
    world.writable(10, reads_at_once=True)
    world.stream("m2", 2)
    world.settle()
    assert world.caught_up == 1 and world.shown == {"m2": "abcab"}


def test_a_backlog_comes_in_pages_with_a_pause_between_then_caught_up() -> None:
    socket = LiveSocket(1)
    log = [Event(seq, f"e{seq}", None) for seq in range(1, 6)]
    assert socket.writable() == ReadLog(1)
    socket.handle(LogRead(Page(1, log[1:4], True, 5)))
    assert [socket.writable() for _ in range(4)] == [log[1], log[2], log[3], PAUSE]
    assert socket.writable() == ReadLog(4)
    socket.handle(LogChanged(Page(0, log, False, 5)))  # the hub's read from elsewhere: not taken
    socket.handle(LogRead(Page(4, log[4:], False, 5)))
    assert [socket.writable() for _ in range(3)] == [log[4], CaughtUp(5), READ_STREAMS]  # the texts so far, once caught up
    socket.handle(StreamsRead({}))
    assert socket.writable() == ReadLog(5)  # (the hub's read was from elsewhere)
    socket.handle(LogRead(Page(5, [], False, 5)))
    assert socket.writable() == IDLE


def test_deltas_dropped_after_caught_up_are_followed_by_the_texts_so_far_before_any_delta() -> None:
    """Found by Hypothesis: deltas dropped by a slow socket after caughtUp, then a commit notified
    and read. The delta that came after the drop went out before the text so far it follows."""
    world = World(LiveSocket(0, 3), 0)
    for _ in range(3):
        world.stream("m0", 1)
    world.writable(1)  # the socket's read of the log, in flight
    world.stream("m0", 1)  # a fourth delta: the three before it dropped
    world.resolve()  # caught up
    world.commit(None, False)
    world.settle()
    assert world.shown == {"m0": "aaaa"}
    assert world.sent[:2] == ["caughtup 0", "delta m0@0"]


def test_a_continued_reply_streams_again_after_the_run_before_it_ended() -> None:
    """Continue writes on an ended reply with a new run: the first run's late deltas stay
    dropped, the new run's go out (a socket remembers ended runs, not ended replies)."""

    def piece(run_id: str, offset: int, text: str) -> Delta:
        frame = DeltaFrame(message_id="m0", run_id=run_id, offset=offset, text=text)
        return Delta("m0", json.dumps(frame.wire()), run_id)

    socket = LiveSocket(0)
    ended = Event(1, json.dumps({"type": "event", "event": {"seq": 1}}), "r1")  # the first run's end
    assert socket.writable() == ReadLog(0)
    socket.handle(LogRead(Page(0, [ended], False, 1)))
    assert [socket.writable(), socket.writable(), socket.writable()] == [ended, CaughtUp(1), READ_STREAMS]
    socket.handle(StreamsRead({}))
    socket.handle(piece("r1", 5, "late"))  # the first run's, after its end: dropped
    continued = [piece("r2", 0, "Hello"), piece("r2", 5, " again")]  # (the text so far, then the rest)
    for delta in continued:
        socket.handle(delta)
    assert [socket.writable() for _ in range(3)] == [*continued, IDLE]


def test_a_close_comes_first() -> None:
    socket = LiveSocket(0)
    socket.handle(NOTIFIED)
    socket.handle(PING_DUE)
    socket.handle(GOING_AWAY)
    socket.handle(READ_EXPIRED)
    assert socket.writable() == CLOSE_GOING_AWAY == socket.writable()


def test_an_event_ends_a_reply_when_its_message_ends_or_its_run_is_stopped() -> None:
    def logged(kind: str, payload: dict[str, object]) -> LoggedEvent:
        return LoggedEvent.model_validate(
            {"eventId": new_id(), "type": kind, "payload": payload, "createdAt": "2026-01-01T00:00:00Z", "seq": 1, "origin": "d"}
        )

    reply = Message(id=new_id(), chat_id=new_id(), role="assistant", content="", run_id=new_id(),
                    status="streaming", created_at="2026-01-01T00:00:00Z")  # fmt: skip
    edited = "MessageEdited"
    assert ended_run(logged(edited, reply.wire())) is None
    for status in ("completed", "failed_upstream", "cancelled"):
        assert ended_run(logged(edited, {**reply.wire(), "status": status})) == reply.run_id
    question = {**reply.wire(), "role": "user", "runId": None, "status": "completed"}
    assert ended_run(logged("MessageAppended", question)) is None  # (no run: no deltas)
    stop = RunCancel(run_id=new_id(), message_id=reply.id)
    assert ended_run(logged("AssistantRunCancelled", stop.wire())) == stop.run_id


# --- the hub's reads ------------------------------------------------------------------------


def test_feed_scenarios() -> None:
    """A commit is read once; one already read costs nothing; one that comes during a read
    brings another read after it; a read that failed or has more leaves the sockets to read
    for themselves, and the next read starts from the furthest of them."""
    feed = Feed()
    assert feed.handle(LogAdvanced(3)) == ReadFor(None)  # where the sockets stand is not known yet
    assert feed.handle(LogAdvanced(3)) is None  # (a read is in flight)
    assert feed.handle(HubRead(Page(0, [], False, 3))) is None and not feed.reading
    assert feed.handle(LogAdvanced(3)) is None  # read already: LISTEN's copy of it is free
    assert feed.handle(LogAdvanced(5)) == ReadFor(3)
    assert feed.handle(LogAdvanced(6)) is None  # during the read
    assert feed.handle(HubRead(Page(3, [], False, 5))) == ReadFor(5)  # so another read
    assert feed.handle(HubRead(Page(5, [], False, 6))) is None
    assert feed.handle(LogAdvanced(None)) == ReadFor(6)  # a change of unknown seq: read
    # Failed (or had more): where the sockets stand is not known until a read from the furthest.
    assert feed.handle(HubRead(None)) == ReadFor(None) and feed.head == -1
    assert feed.handle(LogAdvanced(2)) is None  # (during it)
    assert feed.handle(HubRead(Page(6, [], False, 6))) is None and feed.head == 6
    assert feed.handle(LogAdvanced(7)) == ReadFor(6)
    assert feed.handle(ReadsStopped()) is None and not feed.reading
    assert feed.handle(LogAdvanced(8)) == ReadFor(6)  # (stopped: the next notification reads)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["commit", "notify", "notify unknown", "read", "fail"]), max_size=40))
def test_once_the_hub_stops_reading_every_notification_was_read_after(steps: list[str]) -> None:
    """Whatever the order of commits, notifications and reads: whenever the hub is not reading,
    every seq notified is at or below the head it read after the notification, and a change of
    unknown seq was followed by a read (or a failed read left the sockets to read for themselves)."""
    feed, log = Feed(), 0
    in_flight: int | None = None  # the log's length when the read in flight began
    notified, unknown_since = 0, False
    for step in steps:
        read: ReadFor | None = None
        if step == "commit":
            log += 1
        elif step.startswith("notify"):
            seq = None if step == "notify unknown" else log
            notified = max(notified, log) if seq is not None else notified
            unknown_since = unknown_since or seq is None
            read = feed.handle(LogAdvanced(seq))
            if read is not None:
                in_flight, unknown_since = log, False
        elif in_flight is not None:
            read = feed.handle(HubRead(None if step == "fail" else Page(0, [], False, in_flight)))
            in_flight = None
            if read is not None:
                in_flight, unknown_since = log, False
        if read is not None:
            assert read.after == (feed.head if feed.head >= 0 else None)
        if not feed.reading:
            assert in_flight is None
            assert feed.head == -1 or (notified <= feed.head and not unknown_since), (steps, feed.head)
