"""Remote assistant runs: the worker that answers ``AssistantRunRequested``.

An accepted request writes a ``runs`` row (``queued``) in its own append transaction, so a run
exists at most once per request eventId, and a resubmitted request never calls the model again.
Any server process's worker claims the oldest queued run of a chat that has none streaming (one
answer at a time per chat: the rest wait their turn), under a lease it renews while it streams.
It sends the model's tokens as ``delta`` frames to the account's sockets, writes the growing reply
into the log as ``MessageEdited`` checkpoints (about one a second) and the final message, and
reads to the end whether or not anyone is listening. A Stop (``AssistantRunCancelled``) makes the
next checkpoint be rejected (an ended run's message keeps its status, server/store.py), and the
worker stops reading. A run whose lease ran out (its process died) is failed, with what it had
written: taking it up again would pay the model a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from server.assistants import Assistant
from server.db import Database
from server.event_store import SqlEventStore
from shared.assistants import UpstreamError, Usage, history_along, turns_of
from shared.ids import Uuid7Generator
from shared.models import DeltaFrame, DomainEvent, EventType, Message, format_time
from shared.schema import MESSAGES

log = logging.getLogger(__name__)

MAX_RUNS_PER_PROCESS = 32
INTERRUPTED = "the server stopped while writing this answer"
STOPPED = "the server was shut down while writing this answer"


@dataclass(frozen=True)
class Run:
    account_id: str
    id: str
    chat_id: str
    message_id: str
    assistant_id: str


async def read_runs(db: Database, account_id: str, chat_id: str) -> list[dict[str, Any]]:
    """GET /runs: a chat's runs, oldest first, as the API shows them."""
    async with db.transaction() as tx:
        rows = await tx.fetchall(
            """SELECT id, message_id, assistant_id, status, error, prompt_tokens, completion_tokens, usage_reported
            FROM runs WHERE account_id = ? AND chat_id = ? ORDER BY requested_seq""",
            account_id,
            chat_id,
        )
    keys = ("runId", "messageId", "assistantId", "status", "error", "promptTokens", "completionTokens")
    return [{**dict(zip(keys, row[:7])), "usageReported": bool(row[7])} for row in rows]


class RunWorker:
    def __init__(
        self,
        store: SqlEventStore,
        assistants: dict[str, Assistant],
        publish_delta: Callable[[str, DeltaFrame], Awaitable[None]],
        notify: Callable[[str, int], None],
        clock: Callable[[], datetime],
        lease_seconds: float = 30.0,
        poll_seconds: float = 1.0,
        checkpoint_seconds: float = 1.0,
    ) -> None:
        self._store = store
        self._db = store.db
        self._assistants = assistants
        self._publish_delta = publish_delta
        self._notify = notify
        self._clock = clock
        self._lease = lease_seconds
        self._poll = poll_seconds
        self._checkpoint_every = checkpoint_seconds
        self._owner = uuid.uuid4().hex  # this process, as a lease holder
        self._new_id = Uuid7Generator(lambda: int(clock().timestamp() * 1000), os.urandom)
        self._wake = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """A run was requested here: look now rather than at the next poll."""
        self._wake.set()

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    await self.step()
                except Exception:  # the database went away, say: try again at the next poll
                    log.exception("assistant run worker")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll)
                self._wake.clear()
        finally:
            for task in self._running:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)

    async def step(self) -> None:
        """Fail the runs whose process died; start what may start."""
        for expired in await self._expired():
            await self._end_message(expired, "failed_upstream")
        while len(self._running) < MAX_RUNS_PER_PROCESS and (run := await self._claim()) is not None:
            task = asyncio.ensure_future(self._execute(run))
            self._running.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """(A run that failed here for another reason than its upstream keeps its lease until it
        runs out; then any process ends it as interrupted.)"""
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("assistant run failed", exc_info=task.exception())

    # --- claiming -------------------------------------------------------------------------------

    def _now(self) -> str:
        return format_time(self._clock())

    def _lease_until(self) -> str:
        return format_time(self._clock() + timedelta(seconds=self._lease))

    async def _claim(self) -> Run | None:
        lock = " FOR UPDATE SKIP LOCKED" if self._db.dialect == "postgres" else ""
        async with self._db.transaction(write=True) as tx:
            row = await tx.fetchone(
                f"""UPDATE runs SET status = 'streaming', lease_owner = ?, lease_until = ?,
                    upstream_calls = upstream_calls + 1
                WHERE (account_id, id) IN (
                    SELECT account_id, id FROM runs AS r WHERE r.status = 'queued' AND NOT EXISTS (
                        SELECT 1 FROM runs AS s WHERE s.account_id = r.account_id AND s.chat_id = r.chat_id
                        AND (s.status = 'streaming' OR (s.status = 'queued' AND s.requested_seq < r.requested_seq)))
                    ORDER BY r.requested_at LIMIT 1{lock})
                RETURNING account_id, id, chat_id, message_id, assistant_id""",
                self._owner,
                self._lease_until(),
            )
        return None if row is None else Run(*(str(v) for v in row))

    async def _expired(self) -> list[Run]:
        async with self._db.transaction(write=True) as tx:
            rows = await tx.fetchall(
                """UPDATE runs SET status = 'failed_upstream', error = ?, finished_at = ?, lease_owner = NULL
                WHERE status = 'streaming' AND lease_until < ?
                RETURNING account_id, id, chat_id, message_id, assistant_id""",
                INTERRUPTED,
                self._now(),
                self._now(),
            )
        return [Run(*(str(v) for v in row)) for row in rows]

    async def _keep_lease(self, run: Run, holder: asyncio.Task[None] | None) -> bool:
        """Renew the run's lease every third of it, whether or not the model is sending anything
        (a slow model is not a dead process). Should the lease be lost, stop the run's task."""
        while True:
            await asyncio.sleep(self._lease / 3)
            if not await self._renew(run):
                if holder is not None:
                    holder.cancel()
                return False

    async def _renew(self, run: Run) -> bool:
        async with self._db.transaction(write=True) as tx:
            row = await tx.fetchone(
                "UPDATE runs SET lease_until = ? WHERE account_id = ? AND id = ? AND lease_owner = ? RETURNING id",
                self._lease_until(),
                run.account_id,
                run.id,
                self._owner,
            )
        return row is not None

    async def _finish(self, run: Run, status: str, usage: Usage | None, reported: bool, error: str | None) -> None:
        async with self._db.transaction(write=True) as tx:
            await tx.execute(
                """UPDATE runs SET status = ?, error = ?, prompt_tokens = ?, completion_tokens = ?,
                    usage_reported = ?, finished_at = ?, lease_owner = NULL
                WHERE account_id = ? AND id = ? AND lease_owner = ?""",
                status,
                error,
                None if usage is None else usage.prompt_tokens,
                None if usage is None else usage.completion_tokens,
                int(reported),
                self._now(),
                run.account_id,
                run.id,
                self._owner,
            )

    # --- answering ------------------------------------------------------------------------------

    async def _messages(self, run: Run) -> list[Message]:
        columns = ", ".join(MESSAGES.column_names)
        async with self._db.transaction() as tx:
            rows = await tx.fetchall(
                f"SELECT {columns} FROM messages WHERE account_id = ? AND chat_id = ?", run.account_id, run.chat_id
            )
        return [Message.model_validate(dict(zip(MESSAGES.column_names, row))) for row in rows]

    async def _edit(self, reply: Message, status: str, content: str, account_id: str) -> bool:
        """Append the reply as it is now; False when it was refused (the run was stopped, the
        message or its chat deleted)."""
        edited = reply.model_copy(update={"status": status, "content": content, "updated_at": None, "last_seq": None})
        event = DomainEvent(event_id=self._new_id(), type=EventType.MESSAGE_EDITED, payload=edited, created_at=self._now())
        [result], current = await self._store.append(account_id, "server", [event])
        if result.status == "accepted":
            self._notify(account_id, current)
        return result.status == "accepted"

    async def _end_message(self, run: Run, status: str) -> None:
        """A run that ended without its worker (its process died): the reply keeps what it has."""
        reply = next((m for m in await self._messages(run) if m.id == run.message_id), None)
        if reply is not None and reply.status in ("queued", "streaming"):
            await self._edit(reply, status, reply.content, run.account_id)

    async def _execute(self, run: Run) -> None:
        messages = await self._messages(run)
        reply = next((m for m in messages if m.id == run.message_id), None)
        assistant = self._assistants.get(run.assistant_id)
        if reply is None or reply.status not in ("queued", "streaming"):
            await self._finish(run, "cancelled", None, False, "stopped before it started")
            return
        if assistant is None:
            error = f"there is no assistant {run.assistant_id!r} on this server"
            await self._edit(reply, "failed_upstream", "", run.account_id)
            await self._finish(run, "failed_upstream", None, False, error)
            return
        if not await self._edit(reply, "streaming", "", run.account_id):
            await self._finish(run, "cancelled", None, False, "stopped before it started")
            return

        content, pieces, usage = "", 0, None
        status = "completed"
        error_text: str | None = None
        last_checkpoint = time.monotonic()
        stream = assistant.model.stream(turns_of(history_along(messages, reply.parent_id)))
        keeper = asyncio.ensure_future(self._keep_lease(run, asyncio.current_task()))
        try:
            async for piece in stream:
                if piece.usage is not None:
                    usage = piece.usage
                    continue
                if not piece.text:
                    continue
                frame = DeltaFrame(message_id=reply.id, run_id=run.id, offset=len(content), text=piece.text)
                content += piece.text
                pieces += 1
                await self._publish_delta(run.account_id, frame)
                if time.monotonic() - last_checkpoint >= self._checkpoint_every:
                    last_checkpoint = time.monotonic()
                    if not await self._edit(reply, "streaming", content, run.account_id):
                        status = "cancelled"
                        break
        except UpstreamError as e:
            status, error_text = "failed_upstream", str(e)
        except asyncio.CancelledError:
            if keeper.done() and not keeper.cancelled() and keeper.result() is False:
                return  # the lease was lost: another process ended the run, it is not ours now
            # The server is stopping: end the run now, with what it has, rather than leave it
            # streaming until its lease runs out.
            await self._edit(reply, "failed_upstream", content, run.account_id)
            await self._finish(run, "failed_upstream", usage or Usage(0, pieces), usage is not None, STOPPED)
            raise
        finally:
            keeper.cancel()
            await stream.aclose()  # (a stopped run stops reading: the upstream stops generating)

        reported = usage is not None
        if usage is None:  # stopped or failed before the upstream said: what arrived, counted
            usage = Usage(prompt_tokens=0, completion_tokens=pieces)
        if status == "cancelled" or not await self._edit(reply, status, content, run.account_id):
            status = "cancelled"
            await self._edit(reply, "cancelled", content, run.account_id)  # what it had, kept
        await self._finish(run, status, usage, reported, error_text)
