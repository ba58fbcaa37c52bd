"""Remote assistant runs: the worker that answers ``AssistantRunRequested``.

An accepted request writes a ``runs`` row (``queued``) in its own append transaction, so a run
exists at most once per request eventId, and a resubmitted request never calls the model again.
Any server process's worker claims the oldest queued run of a chat that has none streaming (one
answer at a time per chat: the rest wait their turn), under a lease it renews while it streams
(the runs' queries are ``RunStore``'s, server/run_store.py). It sends the model's tokens as
``delta`` frames to the account's sockets, writes the growing reply into the log as
``MessageEdited`` checkpoints and the final message, and reads to the end whether or not anyone
is listening. Checkpoints are spaced so that the answer's log bytes stay within
``CHECKPOINT_RATIO`` times its text at any length past the three events every answer logs
(about 1.5 KB: from some 160 words on) (``CheckpointPlan``): each comes once the text has grown
past everything the answer logged so far, so about each time it has doubled, and at most one
per ``checkpoint_seconds`` (the setting ``run_checkpoint_seconds``: a second). A Stop
(``AssistantRunCancelled``) makes the reply ``cancelled`` for good (server/validation.py): the worker
reads the reply's status once per ``checkpoint_seconds`` when no checkpoint is due (a refused
checkpoint says the same) and stops reading. A run whose lease ran out (its process died) is
taken over by a process that fails it, with what it had written (taking it up again would pay
the model a second time), and that process's own lease covers the ending itself. It
keeps the text another process of one PostgreSQL saw streamed, if that process ends it;
otherwise what was streamed after the last checkpoint is lost (all of it before the first
checkpoint, at about 2.3 KB; then up to about half of the text).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from server.assistants import Assistant
from server.attachments import Attachments
from server.event_store import SqlEventStore
from server.run_store import Run, RunStore
from server.store import Rejected
from shared.assistants import DEFAULT_SAMPLING, Sampling, Turn, UpstreamError, Usage, continuing, failure_message, history_along
from shared.continuation import Continuation
from shared.followups import Sender, send_next
from shared.ids import Uuid7Generator
from shared.instructions import layers_for, preset_for, system_message
from shared.models import (
    UNFINISHED,
    DeltaFrame,
    DomainEvent,
    EventType,
    FinishReason,
    Message,
    RunRequest,
    TokenUsage,
    format_time,
)
from shared.prompt import awaited_attachments, prompt_turns

log = logging.getLogger(__name__)

MAX_RUNS_PER_PROCESS = 32
INTERRUPTED = "the server stopped while writing this answer"
STOPPED = "the server was shut down while writing this answer"

# The log bytes of one answer (every event of its run, as /sync/updates returns them) stay within
# this many times the UTF-8 bytes of its final text, once that text is long enough to pay for the
# events every answer has (its request, the start and the end: about 1.5 KB).
CHECKPOINT_RATIO = 3.0
# What a stored event may have beyond the estimate of logged_size (the server's updatedAt, lastSeq).
EVENT_MARGIN = 64
DEVICE_ID = "0" * 36  # as long as a device's id: the origin of a client's request


def logged_size(event: DomainEvent, origin: str = "server") -> int:
    """The bytes of this event in the log as /sync/updates returns it, or a little more."""
    return len(json.dumps({**event.wire(), "seq": 2**53, "origin": origin})) + EVENT_MARGIN


def escaped_size(text: str) -> int:
    """The bytes ``text`` takes inside a JSON string, as the server writes it (ASCII, escaped)."""
    return len(json.dumps(text)) - 2


@dataclass
class CheckpointPlan:
    """When a streaming reply is written into the log again (pure: it is told the time and sizes).

    A checkpoint of the text so far is due once ``seconds`` have passed since the last one and
    the answer can afford it: what it has logged, plus this checkpoint, plus a final event at
    least as long, stays within ``ratio`` times the text. The final event then keeps the bound
    too, since every byte of text adds at most ``ratio`` bytes to it (JSON's escapes of
    non-ASCII text are at most 3 bytes per UTF-8 byte; only control characters are more). So a
    checkpoint comes once the text has grown past all the answer has logged so far: each text
    about twice the last, and a 2,000-token answer writes half a dozen. ``ratio`` None: one every
    ``seconds``, whatever it costs (the rule before, kept as the benchmark's baseline)."""

    seconds: float
    ratio: float | None
    logged: int  # bytes this answer has in the log so far
    envelope: int  # bytes of a checkpoint beyond its text
    last: float  # when the last one was written (or the reply started)

    def due(self, now: float, text_bytes: int, content_bytes: int) -> bool:
        """``text_bytes``: the text's UTF-8 bytes; ``content_bytes``: its bytes in the log."""
        if now - self.last < self.seconds:
            return False
        if self.ratio is None:
            return True
        return self.logged + 2 * (self.envelope + content_bytes) <= self.ratio * text_bytes

    def written(self, now: float, content_bytes: int) -> None:
        self.logged += self.envelope + content_bytes
        self.last = now


class RunWorker:
    def __init__(
        self,
        store: SqlEventStore,
        run_store: RunStore,
        assistants: dict[str, Assistant],
        publish_delta: Callable[[str, DeltaFrame], Awaitable[None]],
        clock: Callable[[], datetime],
        lease_seconds: float = 30.0,
        poll_seconds: float = 1.0,
        checkpoint_seconds: float = 1.0,
        end_stream: Callable[[str, str], Awaitable[None]] | None = None,
        streamed: Callable[[str, str], str | None] = lambda account_id, message_id: None,
        attachments: Attachments | None = None,
    ) -> None:
        self._store = store
        self.run_store = run_store
        self._assistants = assistants
        self._publish_delta = publish_delta
        self._clock = clock
        self._lease = lease_seconds
        self._poll = poll_seconds
        self.checkpoint_seconds = checkpoint_seconds
        self.checkpoint_ratio: float | None = CHECKPOINT_RATIO
        self._end_stream = end_stream
        self._streamed = streamed  # a reply's text so far, as this process's sockets were sent it
        self._attachments = attachments  # (None: a worker that reads no attachments' files)
        self._owner = uuid.uuid4().hex  # this process, as a lease holder
        self._new_id = Uuid7Generator(lambda: int(clock().timestamp() * 1000), os.urandom)
        self._wake = asyncio.Event()
        self._running: dict[asyncio.Task[None], str] = {}  # the runs this process streams: each task's run id

    @property
    def running(self) -> int:
        """How many runs this process is answering now (0: it has done all it took up)."""
        return len(self._running)

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
                with contextlib.suppress(TimeoutError):  # (not wait_for: on CPython 3.11 it can
                    async with asyncio.timeout(self._poll):  # lose the Cancel of a shutdown)
                        await self._wake.wait()
                self._wake.clear()
        finally:
            for task in self._running:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)

    async def step(self) -> None:
        """End the runs whose process died; start what may start."""
        for dead in await self.run_store.take_over(self._owner, self._clock(), self._lease_until()):
            if dead.id in self._running.values():
                # This process's own run, still streaming here: its lease ran out only because
                # the event loop was held up past it (a busy machine). Taken over by its owner,
                # the lease is renewed: the run goes on (ending it would fail a live answer).
                log.warning("the lease of run %s ran out while this process still ran it: it goes on", dead.id)
                continue
            await self._end_dead_run(dead)
        for account_id, chat_id, head in await self.run_store.follow_ups_due():
            await self._send_follow_up(account_id, chat_id, head)
        while len(self._running) < MAX_RUNS_PER_PROCESS:
            run = await self.run_store.claim(self._owner, self._lease_until())
            if run is None:
                return
            task = asyncio.ensure_future(self._execute(run))
            self._running[task] = run.id
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """(A run that failed here for another reason than its upstream keeps its lease until it
        runs out; then any process ends it as interrupted.) The chat's next follow-up, if one is
        queued, is looked at now rather than at the next poll."""
        self._running.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("assistant run failed", exc_info=task.exception())
        self.wake()

    async def _send_follow_up(self, account_id: str, chat_id: str, head: int) -> None:
        """Send the chat's next queued follow-up if the answer before it ended (shared/followups.py),
        as the server: the append queues its run. Another process, or a device's Send now, may
        send the same one at the same time: the log takes one (a message is sent while queued
        only), and this one is refused."""
        messages = await self.run_store.chat_messages(account_id, chat_id, content=False)
        sender = Sender(answers=lambda assistant_id: assistant_id in self._assistants, new_id=self._new_id)
        send = send_next(messages, sender)
        if send is None:
            queued = any(m.is_queued_follow_up for m in messages)
            await self.run_store.follow_ups_checked(account_id, chat_id, head, queued)
            return
        event = DomainEvent(event_id=self._new_id(), type=EventType.QUEUED_MESSAGE_SENT, payload=send, created_at=self._now())
        [result], _ = await self._store.append(account_id, "server", [event])
        if result.status == "accepted":
            log.info("follow-up %s sent in chat %s", send.message_id, chat_id)
            self.wake()

    # --- claiming -------------------------------------------------------------------------------

    def _now(self) -> str:
        return format_time(self._clock())

    def _lease_until(self) -> datetime:
        return self._clock() + timedelta(seconds=self._lease)

    async def _keep_lease(self, run: Run, holder: asyncio.Task[None] | None) -> bool:
        """Renew the run's lease every third of it, whether or not the model is sending anything
        (a slow model is not a dead process). Should the lease be lost, stop the run's task."""
        while True:
            await asyncio.sleep(self._lease / 3)
            if not await self.run_store.renew(run, self._owner, self._lease_until()):
                if holder is not None:
                    holder.cancel()
                return False

    async def _finish(self, run: Run, status: str, usage: Usage | None, reported: bool, error: str | None) -> None:
        await self.run_store.finish(run, self._owner, status, usage=usage, reported=reported, error=error, now=self._clock())

    # --- answering ------------------------------------------------------------------------------

    def _edited(
        self, reply: Message, status: str, content: str, finish: FinishReason | None = None, usage: TokenUsage | None = None
    ) -> DomainEvent:
        update: dict[str, Any] = {"status": status, "content": content, "updated_at": None, "last_seq": None, "finish_reason": finish}
        if usage is not None:
            update["usage"] = usage
        edited = reply.model_copy(update=update)
        return DomainEvent(event_id=self._new_id(), type=EventType.MESSAGE_EDITED, payload=edited, created_at=self._now())

    async def _edit(
        self,
        reply: Message,
        status: str,
        content: str,
        account_id: str,
        finish: FinishReason | None = None,
        usage: TokenUsage | None = None,
        error: str | None = None,
    ) -> bool:
        """Append the reply as it is now; False when it was refused (the run was stopped, the
        message or its chat deleted). An ``error`` (why it failed) follows it in the same append,
        a message of its own answering it, as a reply written on a device says it
        (shared/assistants.py, ``failure_message``): every device shows it with no request."""
        events: list[DomainEvent | Rejected] = [self._edited(reply, status, content, finish, usage)]
        if error is not None:
            why = failure_message(reply, error, self._new_id, self._now)
            events.append(DomainEvent(event_id=self._new_id(), type=EventType.MESSAGE_APPENDED, payload=why, created_at=self._now()))
        results, _ = await self._store.append(account_id, "server", events)
        return results[0].status == "accepted"  # (the live sockets hear of it from the store's on_commit)

    async def _ended_stream(self, run: Run) -> None:
        """The reply's text is in the log for good: the sockets' copies of its stream can go."""
        if self._end_stream is not None:
            try:
                await self._end_stream(run.account_id, run.message_id)
            except Exception:  # (the database went away: the copies expire on their own)
                log.exception("ending the stream of a run")

    def _plan(self, run: Run, reply: Message) -> CheckpointPlan:
        """The checkpoints of this reply; the answer has logged its request and its start."""
        request = RunRequest(
            run_id=run.id, chat_id=run.chat_id, parent_id=reply.parent_id, message_id=reply.id,
            assistant_id=run.assistant_id,
        )  # fmt: skip
        asked = DomainEvent(
            event_id=self._new_id(), type=EventType.ASSISTANT_RUN_REQUESTED, payload=request, created_at=self._now()
        )
        envelope = logged_size(self._edited(reply, "streaming", ""))
        return CheckpointPlan(
            seconds=self.checkpoint_seconds,
            ratio=self.checkpoint_ratio,
            logged=logged_size(asked, DEVICE_ID) + envelope,
            envelope=envelope,
            last=time.monotonic(),
        )

    async def _end_dead_run(self, run: Run) -> None:
        """A run whose process died, taken over to end it: the reply keeps what it has, or what
        this process saw streamed when that is more (another process of one PostgreSQL, which got
        every delta: then nothing that was streamed is lost), and ends ``failed_upstream``; the run
        ends as its reply did (a process that died after the reply's end, before the run's, had
        ended it). Should this process die first too, the lease runs out again and another ends it."""
        reply = next((m for m in await self.run_store.chat_messages(run.account_id, run.chat_id) if m.id == run.message_id), None)
        status = "failed_upstream" if reply is None else reply.status
        if reply is not None and reply.status in UNFINISHED:
            seen = self._streamed(run.account_id, reply.id) or ""
            content = seen if len(seen) > len(reply.content) and seen.startswith(reply.content) else reply.content
            ended = await self._edit(reply, "failed_upstream", content, run.account_id, "failed", error=INTERRUPTED)
            status = "failed_upstream" if ended else "cancelled"
        await self._finish(run, status, None, False, INTERRUPTED if status == "failed_upstream" else None)
        await self._ended_stream(run)

    async def _execute(self, run: Run) -> None:
        messages = await self.run_store.chat_messages(run.account_id, run.chat_id)
        reply = next((m for m in messages if m.id == run.message_id), None)
        assistant = self._assistants.get(run.assistant_id)
        if reply is None or reply.status not in UNFINISHED:
            await self._stopped_before_it_started(run, reply)
            return
        if assistant is None:
            error = f"there is no assistant {run.assistant_id!r} on this server"
            await self._edit(reply, "failed_upstream", reply.content, run.account_id, "failed", error=error)
            await self._finish(run, "failed_upstream", None, False, error)
            return
        history = history_along(messages, reply.parent_id)
        if await self._must_wait(run, history):
            return
        steering = await self.run_store.steering(run.account_id, run.chat_id)
        # What the answer is given, written on it as it starts (so what it shows is what was
        # sent): the instructions it was asked with (a Regenerate's, a Retry's, or its own when
        # it goes on), else the account's, its preset's and its chat's as they are now.
        if reply.instructions is None:
            layers = layers_for(steering.settings, steering.presets, steering.chat, reply.preset_id)
            reply = reply.model_copy(update={"instructions": system_message(*layers)})
        preset = preset_for(steering.presets, steering.chat, reply.preset_id)
        sampling = DEFAULT_SAMPLING if preset is None else Sampling(preset.temperature, preset.max_tokens)
        turns = await prompt_turns(history, assistant.config.vision, functools.partial(self._blob, run.account_id))
        if reply.instructions is not None:
            turns = [Turn("system", reply.instructions), *turns]
        if reply.content:  # Continue: the text so far is the start of the answer, and the model goes on
            turns = continuing(turns, reply.content, assistant.config.prefill)
        if not await self._edit(reply, "streaming", reply.content, run.account_id):
            await self._stopped_before_it_started(run, reply)
            return
        try:
            await self._stream(run, reply, assistant, turns, sampling)
        finally:
            await self._ended_stream(run)

    async def _blob(self, account_id: str, sha256: str, most: int | None) -> bytes | None:
        return None if self._attachments is None else await self._attachments.bytes_of(account_id, sha256, most)

    async def _must_wait(self, run: Run, history: list[Message]) -> bool:
        """Whether the run waits for its question's attachments (not all on the server yet):
        then it is queued again, not to be claimed until an upload of the account completes
        (``Attachments.hold``). The reply stays ``queued`` meanwhile."""
        if self._attachments is None:
            return False
        wanted = awaited_attachments(history)
        if not await self._attachments.missing(run.account_id, wanted):
            return False
        if not await self.run_store.wait(run, self._owner):
            return True  # (not ours any more)
        log.info("run %s waits for its attachments", run.id)
        # (An upload that completed between the look and the wait would have woken no one.)
        if not await self._attachments.missing(run.account_id, wanted):
            await self.run_store.stop_waiting(run.account_id)
            self.wake()
        return True

    async def _stopped_before_it_started(self, run: Run, reply: Message | None) -> None:
        """The reply is logged whole, as every run's end is: the Stop's event only patches its
        status, and a device whose snapshot was taken before the Stop has no row to patch."""
        if reply is not None:
            await self._edit(reply, "cancelled", reply.content, run.account_id, "cancelled")  # (refused if deleted)
        await self._finish(run, "cancelled", None, False, "stopped before it started")

    async def _stream(self, run: Run, reply: Message, assistant: Assistant, turns: list[Turn], sampling: Sampling) -> None:
        """Stream the answer into the reply. A continuation (the reply has text) starts after
        that text, byte for byte: a socket is sent the text so far as one delta at offset 0 (so
        its copy is whole), the model's repeat of it is trimmed (shared/continuation.py), and
        what this run cost is added to what the answer had cost."""
        content, pieces, usage = reply.content, 0, None
        trim = Continuation(content) if content else None
        text_bytes = len(content.encode())  # the text's UTF-8 bytes,
        content_bytes = escaped_size(content)  # and its bytes in a logged event
        status = "completed"
        finish: FinishReason = "stop"
        error_text: str | None = None
        plan = self._plan(run, reply)
        checked = time.monotonic()  # when the reply's status was last read (or written)
        if content:
            await self._publish_delta(run.account_id, DeltaFrame(message_id=reply.id, run_id=run.id, offset=0, text=content))
        stream = assistant.model.stream(turns, sampling)
        keeper = asyncio.ensure_future(self._keep_lease(run, asyncio.current_task()))
        try:
            async for piece in stream:
                if piece.usage is not None:
                    usage = piece.usage
                if piece.finish_reason is not None:
                    finish = piece.finish_reason
                text = piece.text if trim is None else trim.feed(piece.text)
                if not text:
                    continue
                frame = DeltaFrame(message_id=reply.id, run_id=run.id, offset=len(content), text=text)
                content += text
                pieces += 1
                text_bytes += len(text.encode())
                content_bytes += escaped_size(text)
                await self._publish_delta(run.account_id, frame)
                now = time.monotonic()
                if plan.due(now, text_bytes, content_bytes):
                    plan.written(now, content_bytes)
                    checked = now
                    if not await self._edit(reply, "streaming", content, run.account_id):
                        status = "cancelled"
                        break
                elif now - checked >= self.checkpoint_seconds:
                    checked = now
                    if not await self.run_store.still_running(run.account_id, run.message_id):
                        status = "cancelled"
                        break
            else:
                held = trim.end() if trim is not None else ""
                if held:  # (the end of a continuation that could have been a repeat, and was not)
                    await self._publish_delta(
                        run.account_id, DeltaFrame(message_id=reply.id, run_id=run.id, offset=len(content), text=held)
                    )
                    content += held
        except UpstreamError as e:
            status, error_text = "failed_upstream", str(e)
        except asyncio.CancelledError:
            if keeper.done() and not keeper.cancelled() and keeper.result() is False:
                return  # the lease was lost: another process ended the run, it is not ours now
            # The server is stopping: end the run now, with what it has, rather than leave it
            # streaming until its lease runs out.
            counted = usage or Usage(0, pieces)
            await self._edit(reply, "failed_upstream", content, run.account_id, "failed", self._cost(reply, counted), STOPPED)
            await self._finish(run, "failed_upstream", counted, usage is not None, STOPPED)
            raise
        finally:
            keeper.cancel()
            await stream.aclose()  # (a stopped run stops reading: the upstream stops generating)

        reported = usage is not None
        if usage is None:  # stopped or failed before the upstream said: what arrived, counted
            usage = Usage(prompt_tokens=0, completion_tokens=pieces)
        cost = self._cost(reply, usage)
        if status == "failed_upstream":
            finish = "failed"
        if status == "cancelled" or not await self._edit(reply, status, content, run.account_id, finish, cost, error_text):
            status = "cancelled"
            await self._edit(reply, "cancelled", content, run.account_id, "cancelled", cost)  # what it had, kept
        await self._finish(run, status, usage, reported, error_text)

    @staticmethod
    def _cost(reply: Message, usage: Usage) -> TokenUsage:
        """What the answer cost: this run's usage, added to what it had cost before (a run that
        goes on with it, Continue, pays for its part only)."""
        before = reply.usage
        return TokenUsage(
            prompt_tokens=usage.prompt_tokens + (before.prompt_tokens if before else 0),
            completion_tokens=usage.completion_tokens + (before.completion_tokens if before else 0),
            estimated=usage.estimated or (before is not None and before.estimated),
        )
