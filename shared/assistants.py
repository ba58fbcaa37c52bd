"""Assistants are event generators (README.md, "How it works"): ``Assistant.run(input)`` yields the
DomainEvents of an answer (checkpoints of the growing reply, tool calls, the final message), and
whoever runs it applies them the way it applies any event. A language model behind an assistant
is a ``Model``: the conversation in, pieces of text out, and at the end what the call cost.

Pure Python, no I/O of its own: the server and the browser give the models their transport.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shared.continuation import GO_ON, Continuation
from shared.models import Attachment, DomainEvent, EventType, Message, TokenUsage
from shared.thread import Link, path_to

TurnRole = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Turn:
    role: TurnRole
    content: str
    # The message's attachments (references), for a model that names them (the demo's).
    attachments: tuple[Attachment, ...] = ()
    # The turn as OpenAI content parts, when it holds more than text (an image: shared/prompt.py
    # builds them as it makes the request); else the request sends ``content``.
    parts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # The model's own counts are estimates, not a tokenizer's (the demo model counts words).
    estimated: bool = False


FinishReason = Literal["stop", "length"]


def finish_of(reported: object) -> FinishReason:
    """A provider's ``finish_reason`` as an answer records it: ``length`` when the answer was cut
    at its length limit, else ``stop`` (``content_filter``, ``tool_calls``, ... ended it too)."""
    return "length" if reported == "length" else "stop"


@dataclass(frozen=True)
class Piece:
    """A piece of the streamed answer, or (at the end) why it ended and what it cost."""

    text: str = ""
    usage: Usage | None = None
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class Sampling:
    """A preset's parameters for one request (None: the model's own default)."""

    temperature: float | None = None
    max_tokens: int | None = None


DEFAULT_SAMPLING = Sampling()


class Model(Protocol):
    def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        """The answer to ``turns`` as it is generated. Raises UpstreamError when it fails."""
        ...


class UpstreamError(Exception):
    """The model's service failed or stalled; the message says how, for a person."""


@dataclass(frozen=True)
class RunInput:
    """What an assistant is asked: answer ``question`` (the last of ``history``, the conversation
    along its branch, oldest first) in ``chat_id``. ``new_id`` and ``now`` make ids and times."""

    chat_id: str
    question: Message
    history: list[Message]
    new_id: Callable[[], str]
    now: Callable[[], str]
    # The reply's text so far, for whoever shows it live (between its checkpoints).
    on_text: Callable[[str, str], None] = lambda message_id, text: None
    # The preset the answer is given under, and its system message: for an assistant run where
    # the client is, exactly what it is given (shared/instructions.py made it, or an earlier
    # answer had it: Regenerate); for one of the server's, only one it must use as it is (the
    # server makes it otherwise). The preset's parameters, for a model run where the client is.
    preset_id: str | None = None
    instructions: str | None = None
    sampling: Sampling = DEFAULT_SAMPLING


class Assistant(Protocol):
    """Local and remote alike: the events of an answer. A remote assistant's client side yields
    one ``AssistantRunRequested`` (the server's run writes the rest, which arrives by sync); a
    local one yields the whole answer."""

    id: str
    name: str

    def run(self, run: RunInput) -> AsyncIterator[DomainEvent]: ...


def history_along(messages: list[Message], parent_id: str | None) -> list[Message]:
    """The messages of a chat from its start to ``parent_id``, along the tree (shared/thread.py:
    siblings of one parent are branches, and only this one's are included); oldest first. A
    follow-up still queued is no part of the conversation yet: not in the tree."""
    if parent_id is None:
        return []
    sent = [m for m in messages if not m.is_queued_follow_up]
    by_id = {m.id: m for m in sent}
    return [by_id[i] for i in path_to([Link(m.id, m.parent_id, m.created_at) for m in sent], parent_id)]


def turns_of(history: list[Message]) -> list[Turn]:
    """What a chat-completions model is sent: user and assistant messages with text; tool traffic
    goes as assistant notes, errors are left out."""
    turns: list[Turn] = []
    for message in history:
        if message.role == "user":
            turns.append(Turn("user", message.content, attachments=message.attachments))
        elif message.role == "assistant" and message.content:
            turns.append(Turn("assistant", message.content))
        elif message.role in ("tool_call", "tool_result"):
            turns.append(Turn("assistant", f"[{message.role}] {message.content}"))
    return turns


@dataclass
class DemoModel:
    """The built-in demo model: no network, no key (the server runs it). It answers readably, a
    word at a time at about a person's reading pace, and reports a token count as a real service
    does, but counted in words: its usage says it is an estimate."""

    seconds_per_word: float = 0.05
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        # Asked to go on (shared/continuation.py), it writes its answer to the question again:
        # the repeat of what was there is trimmed by whoever runs it, so the rest follows.
        questions = [t for t in turns if t.role == "user" and t.content != GO_ON]
        last = questions[-1] if questions else Turn("user", "")
        words = demo_answer(last.content, len(questions), last.attachments).split(" ")
        cut = sampling.max_tokens is not None and sampling.max_tokens < len(words)
        if cut:
            words = words[: sampling.max_tokens]
        for i, word in enumerate(words):
            await self.sleep(self.seconds_per_word)
            yield Piece(text=word if i == 0 else " " + word)
        yield Piece(finish_reason="length" if cut else "stop")
        prompt = sum(len(t.content.split()) for t in turns)
        yield Piece(usage=Usage(prompt_tokens=prompt, completion_tokens=len(words), estimated=True))


def describe_size(size: int) -> str:
    """``size`` bytes for a person: 512 bytes, 12.3 KB, 4.5 MB."""
    if size < 1000:
        return "1 byte" if size == 1 else f"{size} bytes"
    value, unit = size / 1000, "KB"
    for bigger in ("MB", "GB", "TB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:.1f} {unit}"


def demo_answer(question: str, turn: int, attachments: tuple[Attachment, ...] = ()) -> str:
    topic = " ".join(question.split()[:12]) or "nothing yet"
    attached = ""
    if attachments:
        named = ", ".join(f"{a.name} ({a.mime or 'unknown type'}, {describe_size(a.size)})" for a in attachments)
        attached = f" You attached {len(attachments)} file{'s' if len(attachments) != 1 else ''}: {named}."
    return (
        f"This is the built-in demo model, answering message {turn} of this chat. You wrote: "
        f"\u201c{topic}\u201d.{attached} I run on the server with no network and no language model behind me, so I "
        "cannot really think about it, but the way this answer reaches you is real: it streams word "
        "by word, it is saved as it grows, and if you close the tab or lose the connection now, the "
        "server keeps writing it and you will find it complete when you come back. Configure an "
        "OpenAI-compatible assistant (README: Assistants) for real answers."
    )


# --- OpenAI-compatible chat completions, streamed (server-sent events) ----------------------------


def completion_request(model: str, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": t.role, "content": list(t.parts) if t.parts else t.content} for t in turns],
        "stream": True,
        "stream_options": {"include_usage": True},  # the usage comes as a last chunk
    }
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.max_tokens is not None:
        body["max_tokens"] = sampling.max_tokens
    return body


def continuing(turns: list[Turn], partial: str, prefill: bool) -> list[Turn]:
    """What a model is sent to go on with ``partial``, its cut answer to ``turns``: the partial
    answer as the last, unfinished assistant turn where the service continues it (``prefill``:
    llama.cpp, Ollama, vLLM), else followed by a short user turn asking to go on without
    repeating (what it repeats anyway is trimmed: shared/continuation.py)."""
    extended = [*turns, Turn("assistant", partial)]
    return extended if prefill else [*extended, Turn("user", GO_ON)]


DONE = "[DONE]"


def completion_pieces(data: str) -> list[Piece] | None:
    """The pieces one event of a chat-completions stream carries (its data: ``shared/sse.py``
    decodes the stream); None for the end (``[DONE]``). Raises ValueError when the event is not
    what a chat-completions stream sends."""
    if data.strip() == DONE:
        return None
    try:
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError("a chunk is not an object")
        pieces = []
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                pieces.append(Piece(text=str(text)))
            if choice.get("finish_reason"):
                pieces.append(Piece(finish_reason=finish_of(choice["finish_reason"])))
        usage = chunk.get("usage")
        if usage:
            pieces.append(Piece(usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))))
    except (TypeError, AttributeError) as e:  # a field of the wrong shape
        raise ValueError(f"not a chat-completions chunk: {e}") from None
    return pieces


class ModelAssistant:
    """An assistant that is a model, run where the client is (say, Ollama on this computer): the
    reply is written as it streams, a checkpoint about once a second, the end status last. When
    the model fails, why (the ``UpstreamError``'s sentence) follows as a message of its own, an
    ``error`` answering the reply: a Message has no field for it, and a run of the server, whose
    reason GET /runs gives, does not exist here. So it is in the log, and every device shows it
    with the reply (webapp/pane.py)."""

    def __init__(
        self,
        assistant_id: str,
        name: str,
        model: Model,
        checkpoint_seconds: float = 1.0,
        prompt: Callable[[list[Message]], Awaitable[list[Turn]]] | None = None,
    ) -> None:
        """``prompt``: the turns the model is sent for a history (its attachments in them:
        shared/prompt.py); ``turns_of`` by default."""
        self.id = assistant_id
        self.name = name
        self.model = model
        self.checkpoint_seconds = checkpoint_seconds
        self.prompt = prompt

    async def run(self, run: RunInput) -> AsyncIterator[DomainEvent]:
        reply = Message(
            id=run.new_id(),
            chat_id=run.chat_id,
            role="assistant",
            content="",
            parent_id=run.question.id,
            status="streaming",
            assistant_id=self.id,
            created_at=run.now(),
            preset_id=run.preset_id,
            instructions=run.instructions,
        )
        yield DomainEvent(event_id=run.new_id(), type=EventType.MESSAGE_APPENDED, payload=reply, created_at=run.now())
        async for event in self._write(run, reply, await self._turns(run)):
            yield event

    async def go_on(self, run: RunInput, reply: Message) -> AsyncIterator[DomainEvent]:
        """Continue: ``reply`` (ended, cut) is written on from where its text ends, byte for byte
        (shared/continuation.py trims a repeat); the model is given the same system message and
        the text so far as its unfinished turn, followed by a short request to go on."""
        reply = reply.model_copy(update={"status": "streaming", "finish_reason": None})
        yield self._edit(run, reply, "streaming", reply.content)
        async for event in self._write(run, reply, continuing(await self._turns(run), reply.content, prefill=False)):
            yield event

    async def _turns(self, run: RunInput) -> list[Turn]:
        return await self.prompt(run.history) if self.prompt is not None else turns_of(run.history)

    async def _write(self, run: RunInput, reply: Message, turns: list[Turn]) -> AsyncIterator[DomainEvent]:
        if reply.instructions:
            turns = [Turn("system", reply.instructions), *turns]
        content, status, last = reply.content, "completed", time.monotonic()
        trim = Continuation(content) if content else None
        finish: str = "stop"
        usage: Usage | None = None
        reason: str | None = None
        stream = self.model.stream(turns, run.sampling)
        try:
            async for piece in stream:
                usage = piece.usage or usage
                finish = piece.finish_reason or finish
                text = piece.text if trim is None else trim.feed(piece.text)
                if not text:
                    continue
                content += text
                run.on_text(reply.id, content)
                if time.monotonic() - last >= self.checkpoint_seconds:
                    last = time.monotonic()
                    yield self._edit(run, reply, "streaming", content)
            content += trim.end() if trim is not None else ""
        except UpstreamError as e:
            status, finish, reason = "failed_upstream", "failed", str(e) or "the model failed without saying why"
        finally:
            await stream.aclose()
        cost = _added(reply.usage, usage)
        yield self._edit(run, reply, status, content, finish, cost)
        if reason is not None:
            why = failure_message(reply, reason, run.new_id, run.now)
            yield DomainEvent(event_id=run.new_id(), type=EventType.MESSAGE_APPENDED, payload=why, created_at=run.now())

    @staticmethod
    def _edit(
        run: RunInput, reply: Message, status: str, content: str, finish: str | None = None, usage: TokenUsage | None = None
    ) -> DomainEvent:
        update: dict[str, Any] = {"status": status, "content": content, "finish_reason": finish}
        if usage is not None:
            update["usage"] = usage
        edited = reply.model_copy(update=update)
        return DomainEvent(event_id=run.new_id(), type=EventType.MESSAGE_EDITED, payload=edited, created_at=run.now())


def _added(before: TokenUsage | None, usage: Usage | None) -> TokenUsage | None:
    """What an answer cost: this run's usage added to what it had cost before (a continuation)."""
    if usage is None:
        return before
    return TokenUsage(
        prompt_tokens=usage.prompt_tokens + (before.prompt_tokens if before else 0),
        completion_tokens=usage.completion_tokens + (before.completion_tokens if before else 0),
        estimated=usage.estimated or (before is not None and before.estimated),
    )


def failure_message(reply: Message, reason: str, new_id: Callable[[], str], now: Callable[[], str]) -> Message:
    """Why a reply written where the client is ended ``failed_upstream``: an ``error`` message
    answering it, in its chat, by its assistant."""
    return Message(
        id=new_id(), chat_id=reply.chat_id, role="error", content=reason, parent_id=reply.id,
        assistant_id=reply.assistant_id, created_at=now(),
    )  # fmt: skip
