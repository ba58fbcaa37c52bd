"""The client half of the sync protocol (seed spec 5.2 over docs/protocol.md).

Loop: pull the updates after our cursor, push the outbox, then follow the live socket; on any
failure wait with exponential backoff and jitter and start over. What the user sees as the
connection state comes only from real responses.

A device far behind takes the state path instead of replaying the log: a new device (never
synced), one whose cursor expired (410: replace, never merge), or one more than ``FAR_BEHIND``
events behind. It downloads ``GET /sync/state`` at one ``upToSeq`` page by page, each page one
durable local transaction that is shown at once (``LocalStore.apply_snapshot_page``), then goes
on from ``upToSeq`` with the log: the snapshot at N plus the events after N is the current
state. Interrupted (a reload, the network), it resumes at the next page with the same
``upToSeq``, or starts over when the server no longer has the events after it (410) or refuses
the page token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from enum import StrEnum
from functools import partial

from shared.models import CaughtUpFrame, DeltaFrame, EventFrame, LoggedEvent
from webapp.snapshots import SnapshotProgress
from webapp.state_page import StatePage
from webapp.store import LocalStore
from webapp.transport import (
    AnyFrame,
    CursorExpiredError,
    LiveSocket,
    NetworkError,
    ServerError,
    Transport,
    Unauthorized,
    answered_within,
)

log = logging.getLogger(__name__)

PAGE = 500
PUSH_BATCH = 100
# Rows per page of /sync/state: a small first page (the chat list and the latest chat on screen
# soon), then the server's most (each page is one durable commit, and fewer, larger ones store
# about half the bytes: an index page is written once per commit however many rows it took).
FIRST_STATE_PAGE = 500
STATE_PAGE = 5000
# The screen follows a snapshot's pages: drawn after the first (the chat list, the latest chat),
# then at most this often, and at the end (the progress in the status follows every page).
SNAPSHOT_DRAW_SECONDS = 0.5
# A cursor this many events behind the log's head syncs from a snapshot rather than the log.
FAR_BEHIND = 5000
SEARCH_SLICE = 1000  # messages a snapshot brought, indexed for search per transaction afterwards
INDEX_AFTER_SECONDS, INDEX_PAUSE_SECONDS = 1.0, 0.02
# The server pings every 25 s; a socket silent for longer than this is taken for dead.
LIVE_SILENCE_SECONDS = 60.0
# A request with no answer for this long is taken as a lost connection (one left half-open when
# a phone changed networks, a server stuck): the loop connects again and the request is made
# again (a push is idempotent). Without it a push, or a pull, waited for that answer for good. A
# push's answer is small; a pull's page can be a few MB (5,000 rows), so it is given longer: at
# 300 s, a link of some 30 kbit/s still brings one.
PUSH_SECONDS, PULL_SECONDS = 60.0, 300.0


class Status(StrEnum):
    CONNECTING = "connecting"
    ONLINE = "online"
    OFFLINE = "offline"
    SIGNED_OUT = "signed-out"


class SyncEngine:
    def __init__(
        self,
        store: LocalStore,
        transport: Transport,
        on_change: Callable[[], None],
        on_status: Callable[[Status], None],
        min_backoff: float = 0.25,
        max_backoff: float = 10.0,
        on_delta: Callable[[DeltaFrame], None] = lambda frame: None,
        on_online: Callable[[], None] = lambda: None,
        state_page: int = STATE_PAGE,
    ) -> None:
        self.store = store
        self.transport = transport
        self._on_change = on_change
        self._on_status = on_status
        self._on_delta = on_delta
        self._on_online = on_online
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._kick = asyncio.Event()  # something to push
        self._retry_now = asyncio.Event()  # e.g. the browser says it is back online
        self._push_lock = asyncio.Lock()
        self._pushed = asyncio.Condition()  # notified when a push's answer is recorded (pushed)
        self._socket: LiveSocket | None = None
        self._state_page = state_page
        self.push_seconds, self.pull_seconds = PUSH_SECONDS, PULL_SECONDS
        self._indexer: asyncio.Task[None] | None = None
        self._running = False
        self.status = Status.CONNECTING
        # While a snapshot downloads: (rows stored, rows in it), shown beside the status.
        self.progress: tuple[int, int | None] | None = None

    def _set_status(self, status: Status) -> None:
        if status != self.status:
            self.status = status
            self._on_status(status)

    def kick(self) -> None:
        """A local change is durable: send it as soon as the server can be reached."""
        self._kick.set()

    def retry_now(self) -> None:
        """Skip the current backoff wait (a hint only; the status still comes from real answers)."""
        self._retry_now.set()

    async def run(self) -> None:
        """Sync until signed out. Cancel the task to stop."""
        pusher = asyncio.ensure_future(self._push_loop())
        self._running = True
        self._index_later()
        try:
            await self._connection_loop()
        finally:
            self._running = False
            pusher.cancel()
            if self._indexer is not None:
                self._indexer.cancel()

    async def _connection_loop(self) -> None:
        backoff = self._min_backoff
        while True:
            try:
                await self.pull()
                await self.push()
                self._set_status(Status.ONLINE)
                backoff = self._min_backoff
                self._on_online()
                await self._follow_live()
            except Unauthorized:
                self._set_status(Status.SIGNED_OUT)
                return
            except (NetworkError, ServerError):
                self._set_status(Status.OFFLINE)
            except Exception:  # a bug of ours must not stop syncing for good: logged, tried again later
                log.exception("sync failed; trying again")
            self._retry_now.clear()
            delay = backoff * (0.5 + random.random() / 2)
            backoff = min(backoff * 2, self._max_backoff)
            # (asyncio.timeout, not wait_for: CPython 3.11's wait_for returns the result, and
            # loses a cancellation, when both come at once; this loop would then never end.)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._retry_now.wait()

    async def _push_loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            if self.status != Status.ONLINE:
                continue  # the connection loop pushes when it gets through
            try:
                await self.push()
            except Unauthorized:
                self._set_status(Status.SIGNED_OUT)
            except Exception as e:
                # A push that fails means the live socket is no proof of a connection (it can
                # stay open while nothing gets through): drop it and let the loop reconnect,
                # which pushes again. So does a bug of ours (logged): this loop must go on, or
                # nothing written would be sent until the connection next broke.
                if isinstance(e, (NetworkError, ServerError)):
                    self._set_status(Status.OFFLINE)
                else:
                    log.exception("push failed; trying again")
                if self._socket is not None:
                    await self._socket.close()

    async def pull(self) -> None:
        """Fetch every event after the cursor: through a snapshot when far behind (above), and
        after a 410 (the cursor expired)."""
        if self.store.snapshot_progress() is not None or self.store.synced_at() is None:
            await self._snapshot(resume=True)
        snapshot_taken = False
        while True:
            try:
                page = await answered_within(partial(self.transport.updates, self.store.last_seq(), PAGE), self.pull_seconds)
            except CursorExpiredError:
                await self.resync()
                continue
            if page.has_more and not snapshot_taken and page.current_seq - self.store.last_seq() > FAR_BEHIND:
                await self._snapshot(resume=False)
                snapshot_taken = True  # (once: the log goes on from there, however much came meanwhile)
                continue
            current = None if page.has_more else page.current_seq
            if await self.store.apply_remote(page.events, current):
                self._on_change()
            if not page.has_more:
                return

    async def resync(self) -> None:
        """Replace the confirmed state with a snapshot, then the pending overlay goes back on top."""
        await self._snapshot(resume=False)

    async def _snapshot(self, resume: bool) -> None:
        """Download a snapshot page by page (resuming the one under way when ``resume``). The
        next page is asked for as soon as a page names it, so that the server and the network
        work while this page is stored."""
        progress: SnapshotProgress | None = self.store.snapshot_progress() if resume else None
        resumed = progress is not None  # its page token comes from an earlier session
        ahead: asyncio.Future[StatePage] | None = None  # the next page, asked for already
        drawn: float | None = None  # (time.monotonic() of the last draw)
        try:
            while True:
                if progress is None:
                    first = partial(self.transport.state, None, None, min(FIRST_STATE_PAGE, self._state_page))
                    page = await answered_within(first, self.pull_seconds)
                else:
                    try:
                        if ahead is None:
                            going_on = partial(self.transport.state, progress.up_to_seq, progress.next_page, self._state_page)
                            ahead = asyncio.ensure_future(answered_within(going_on, self.pull_seconds))
                        page = await ahead
                    except CursorExpiredError:  # the events after its upToSeq are gone: start over
                        progress = None
                        continue
                    except ServerError:
                        if not resumed:
                            raise
                        progress = None  # the server does not know an earlier session's token (upgraded)
                        continue
                    finally:
                        resumed, ahead = False, None
                if page.next_page is not None:
                    ahead = asyncio.ensure_future(
                        answered_within(partial(self.transport.state, page.up_to_seq, page.next_page, self._state_page), self.pull_seconds)
                    )
                    # Its request goes out now, before this page is stored: storing a page does
                    # not yield, and a task runs only when this one yields (asked for and left
                    # waiting, the next page was asked for only once this one was stored).
                    await asyncio.sleep(0)
                progress = await self.store.apply_snapshot_page(page, first=progress is None)
                if progress is not None:
                    self._progress((progress.done, progress.total))
                if progress is None or drawn is None or time.monotonic() - drawn >= SNAPSHOT_DRAW_SECONDS:
                    self._on_change()
                    drawn = time.monotonic()
                if progress is None:
                    break
        finally:
            if ahead is not None:  # (its answer, or its failure, is no one's concern now)
                ahead.cancel()
                ahead.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._progress(None)
        self._index_later()

    def _progress(self, progress: tuple[int, int | None] | None) -> None:
        if progress != self.progress:
            self.progress = progress
            self._on_status(self.status)

    def _index_later(self) -> None:
        """Index for search what a snapshot brought, a slice at a time, in the background (while
        ``run`` runs: it stops the indexing with the rest)."""
        if self._running and (self._indexer is None or self._indexer.done()):
            if self.store.search_backlog():
                self._indexer = asyncio.ensure_future(self._index_backlog())

    async def _index_backlog(self) -> None:
        await asyncio.sleep(INDEX_AFTER_SECONDS)  # once caught up (the log after the snapshot, the outbox)
        while await self.store.index_search_backlog(SEARCH_SLICE):
            await asyncio.sleep(INDEX_PAUSE_SECONDS)  # (the page stays responsive between slices)

    async def pushed(self, within: float) -> None:
        """Returns once the server has taken every change saved here (the outbox is empty), or
        after ``within`` seconds (offline, a slow server): what follows those changes waits this
        long at most (a message's files upload after the message, webapp/uploads.py)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within), self._pushed:
                await self._pushed.wait_for(lambda: self.store.pending_count() == 0)

    async def push(self) -> None:
        """Send the outbox in order, in batches; idempotent by eventId, so resending is harmless."""
        async with self._push_lock:
            while batch := self.store.outbox(PUSH_BATCH):
                events = [p.event for p in batch]
                await self.store.mark_attempted([e.event_id for e in events])
                self._on_change()  # ("Sending…")
                try:
                    response = await answered_within(partial(self.transport.submit, events), self.push_seconds)
                except (NetworkError, ServerError) as e:
                    await self.store.record_failure([e.event_id for e in events], str(e))
                    self._on_change()  # ("Not sent yet: ...", not "Sending…" until another change)
                    raise
                if await self.store.record_results(response.results):
                    self._on_change()
                async with self._pushed:
                    self._pushed.notify_all()

    async def _take(self, frames: list[AnyFrame], caught_up: bool) -> bool:
        """Live frames, in order: their events applied together (a duplicate skipped; after
        ``caughtUp``, a gap fetched by a pull), then their deltas (each says where its text
        goes, so one older than the events is only ignored). Returns whether caught up."""
        events: list[LoggedEvent] = []
        deltas: list[DeltaFrame] = []
        last = self.store.last_seq()
        for frame in frames:
            if isinstance(frame, EventFrame):
                seq = frame.event.seq
                if seq <= last:
                    continue  # a duplicate
                if caught_up and seq > last + 1:
                    await self._apply_live(events)
                    events = []
                    await self.pull()  # a gap: fetch the missing range, then go on
                    last = self.store.last_seq()
                    continue
                events.append(frame.event)
                last = seq
            elif isinstance(frame, DeltaFrame):
                deltas.append(frame)
            elif isinstance(frame, CaughtUpFrame):
                await self._apply_live(events, frame.seq)
                events = []
                caught_up = True
                self.kick()
        await self._apply_live(events)
        for delta in deltas:
            self._on_delta(delta)
        return caught_up

    async def _apply_live(self, events: list[LoggedEvent], current_seq: int | None = None) -> None:
        if (events or current_seq is not None) and await self.store.apply_remote(events, current_seq):
            self._on_change()

    async def _follow_live(self) -> None:
        socket = self._socket = await self.transport.live(self.store.last_seq())
        caught_up = False
        try:
            while True:
                try:
                    async with asyncio.timeout(LIVE_SILENCE_SECONDS):
                        frames = [await socket.receive()]
                except TimeoutError:
                    raise NetworkError("the live socket went silent") from None
                # With the frames that have come meanwhile (a busy page falls behind a stream):
                # their events are applied together, in one transaction and one flush.
                while not isinstance(frames[-1], CaughtUpFrame) and (more := socket.ready()) is not None:
                    frames.append(more)
                caught_up = await self._take(frames, caught_up)
        except CursorExpiredError:
            await self.resync()
        finally:
            self._socket = None
            await socket.close()
