"""The write path: appending batches of events to account logs, with group commit.

Concurrent ``append`` calls queue up; a writer task (a few per process) takes everything queued
and appends it in ONE transaction: the log head rows of all the accounts involved are locked (in
account order, so two processes cannot deadlock), one read fetches every duplicate eventId and
every row the events name, validation runs in memory against that read plus the batch's own
earlier events (``server/validation.py``), and the writes go out as a few multi-row statements
(``server/append_sql.py``). On PostgreSQL that is four round trips: BEGIN, the lock with the
read, the writes, COMMIT. A transaction costs about the same whether it carries one event or a
thousand, so under load the cost per event falls.

On PostgreSQL a group whose accounts all have a log and whose writes fit in one statement (the
common case: new and edited messages and chats) first goes the optimistic way, in two round
trips (``Appender._optimistic``): the read without a lock or a transaction, then one statement
that locks the heads and writes only if none has moved since the read. Every write to an
account's state moves its head, so an unmoved head means the read is still the state. When one
has moved, that statement wrote nothing, and the group goes the locking way above.

Each request is still atomic: it is all in one transaction. If that transaction fails and held
other requests too, each request is retried alone, so one request cannot fail another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from server.append_sql import insert_runs, lock_and_prefetch, note_follow_ups, prefetch, write, write_if_heads_are
from server.db import Database, Row, Tx
from server.postgres_db import PostgresDatabase
from server.store import Rejected
from server.validation import AccountState, footprint, validation_error
from shared.models import DomainEvent, EventResult, Message, QueuedSend, RunCancel, RunContinue, RunRequest, format_time
from shared.reducer import Mutation, mutations

# Transactions in flight at once per process: while one waits for its commit to reach the disk,
# the next group is already on its way. Appends of one account still serialize on its log row.
MAX_WRITERS = 4
# The most events one transaction carries; more wait for the next one.
MAX_EVENTS_PER_TRANSACTION = 2000


@dataclass
class _Request:
    account_id: str
    origin: str
    events: list[DomainEvent | Rejected]
    done: asyncio.Future[tuple[list[EventResult], int]] = field(repr=False)


@dataclass
class _Plan:
    outcomes: list[tuple[list[EventResult], int]] = field(default_factory=list)
    log_rows: list[Row] = field(default_factory=list)
    changes: list[tuple[str, Mutation]] = field(default_factory=list)
    runs: list[Row] = field(default_factory=list)  # rows of the runs table
    follow_ups: list[Row] = field(default_factory=list)  # (account, chat, seq): a follow-up queued
    heads: dict[str, int] = field(default_factory=dict)  # the accounts' new heads


def run_of(event: DomainEvent, serves: Callable[[str], bool]) -> tuple[str, str, str, str] | None:
    """The run an accepted event asks of this server, as (run id, chat, reply, assistant), or
    None: an ``AssistantRunRequested`` always (a run for an assistant this server lacks fails,
    saying so); an ``AssistantRunContinued``, and a ``QueuedMessageSent`` with a run, when
    ``serves`` its assistant (else the device whose assistant it is writes the answer)."""
    payload = event.payload
    if isinstance(payload, RunRequest):
        return payload.run_id, payload.chat_id, payload.message_id, payload.assistant_id
    if isinstance(payload, RunContinue) and serves(payload.assistant_id):
        return payload.run_id, payload.chat_id, payload.message_id, payload.assistant_id
    if (
        isinstance(payload, QueuedSend)
        and payload.run_id is not None
        and payload.reply_id is not None
        and payload.assistant_id is not None
        and serves(payload.assistant_id)
    ):
        return payload.run_id, payload.chat_id, payload.reply_id, payload.assistant_id
    return None


class Appender:
    def __init__(self, db: Database, clock: Callable[[], datetime], serves: Callable[[str], bool] = lambda a: True) -> None:
        self._db = db
        self._clock = clock
        self._serves = serves  # whether this server has the assistant of this id (server/assistants.py)
        self._queue: list[_Request] = []
        self._writers: set[asyncio.Task[None]] = set()  # (held: the loop keeps only weak references)
        self._draining = 0  # writers still taking from the queue

    async def append(
        self, account_id: str, origin: str, events: list[DomainEvent | Rejected]
    ) -> tuple[list[EventResult], int]:
        request = _Request(account_id, origin, events, asyncio.get_running_loop().create_future())
        self._queue.append(request)
        if self._draining < MAX_WRITERS:
            self._draining += 1
            writer = asyncio.ensure_future(self._drain())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        # A cancelled caller (its client went away) does not cancel the write: the events are
        # logged all the same, and a retry of them is answered "duplicate".
        return await asyncio.shield(request.done)

    async def _drain(self) -> None:
        """Append queued groups until the queue is empty. A writer stops counting as one the moment
        it finds the queue empty, not when its task is done (later): a request queued in between
        starts a writer of its own rather than waiting for the next request to start one."""
        try:
            while self._queue:
                taken, size = 0, 0
                while taken < len(self._queue) and (
                    taken == 0 or size + len(self._queue[taken].events) <= MAX_EVENTS_PER_TRANSACTION
                ):
                    size += len(self._queue[taken].events)
                    taken += 1
                group, self._queue = self._queue[:taken], self._queue[taken:]
                try:
                    outcomes = await self._transaction(group)
                except Exception as error:
                    if len(group) == 1:
                        group[0].done.set_exception(error)
                        continue
                    for request in group:  # alone, each request fails or succeeds on its own
                        try:
                            [outcome] = await self._transaction([request])
                        except Exception as own_error:
                            request.done.set_exception(own_error)
                        else:
                            request.done.set_result(outcome)
                    continue
                for request, outcome in zip(group, outcomes):
                    request.done.set_result(outcome)
        finally:
            self._draining -= 1

    async def _transaction(self, group: list[_Request]) -> list[tuple[list[EventResult], int]]:
        if isinstance(self._db, PostgresDatabase):
            outcomes = await self._optimistic(self._db, group)
            if outcomes is not None:
                return outcomes
        async with self._db.transaction(write=True) as tx:
            heads, states = await lock_and_prefetch(tx, self._db.dialect, group)
            plan = self._plan(group, heads, states)
            await self._write(tx, plan)
        return plan.outcomes

    async def _optimistic(
        self, db: PostgresDatabase, group: list[_Request]
    ) -> list[tuple[list[EventResult], int]] | None:
        """The group in two statements, each a transaction of its own: a read (no lock), then one
        write that locks the heads and writes only if none moved since the read. None when this
        cannot be done (a new account, writes that need more than one statement, a head that
        moved): the caller then takes the locking path, and nothing was written."""
        async with db.autocommit() as tx:
            heads, states = await prefetch(tx, group)
            if len(heads) != len({r.account_id for r in group}):
                return None  # a new account: its head row is made under the lock
            expected = dict(heads)  # (planning moves ``heads`` on)
            plan = self._plan(group, heads, states)
            if not plan.log_rows:
                return plan.outcomes  # duplicates and rejections only: nothing to write
            if plan.runs or plan.follow_ups:
                return None  # (queueing a run, or noting a follow-up, takes a statement of its own)
            written = await write_if_heads_are(tx, expected, plan.log_rows, plan.changes)
        return plan.outcomes if written else None

    def _plan(self, group: list[_Request], heads: dict[str, int], states: dict[str, AccountState]) -> _Plan:
        """Validate the group's events against the state read and assign their seqs: the results,
        and what to write."""
        start = dict(heads)
        now = format_time(self._clock())
        plan = _Plan()
        for request in group:
            account, state = request.account_id, states[request.account_id]
            results: list[EventResult] = []
            for event in request.events:
                seq = state.logged.get(event.event_id)
                if seq is not None:
                    results.append(EventResult(event_id=event.event_id, status="duplicate", seq=seq))
                    continue
                error = event.error if isinstance(event, Rejected) else validation_error(event, state)
                if error is not None:
                    results.append(EventResult(event_id=event.event_id, status="rejected", error=error))
                    continue
                assert isinstance(event, DomainEvent)
                heads[account] += 1
                seq = heads[account]
                chat_of_message = None
                if isinstance(event.payload, RunCancel):
                    chat_of_message = state.message_chat(event.payload.message_id)
                where = footprint(event, chat_of_message)
                plan.log_rows.append(
                    (account, seq, event.event_id, str(event.type), event.payload.model_dump_json(by_alias=True),
                     now, request.origin, where.entity, where.chat, where.kind)
                )
                plan.changes += [(account, m) for m in mutations(event.type, event.payload, seq, now)]
                run = run_of(event, self._serves)
                if run is not None:
                    plan.runs.append((account, *run, seq, now))
                if isinstance(event.payload, Message) and event.payload.is_queued_follow_up:
                    plan.follow_ups.append((account, event.payload.chat_id, seq))
                state.apply(event)
                state.logged[event.event_id] = seq
                results.append(EventResult(event_id=event.event_id, status="accepted", seq=seq))
            plan.outcomes.append((results, heads[account]))
        plan.heads = {a: h for a, h in heads.items() if h != start[a]}
        return plan

    async def _write(self, tx: Tx, plan: _Plan) -> None:
        """The plan's writes: the events and the state's mutations, then the runs requested."""
        if plan.log_rows:
            await write(tx, self._db.dialect, plan.log_rows, plan.changes, plan.heads)
        if plan.runs:
            await insert_runs(tx, plan.runs)
        if plan.follow_ups:
            await note_follow_ups(tx, plan.follow_ups)
