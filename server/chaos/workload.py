"""What the devices do: seeded random operations, as a person does them in the app. Each device
draws from its own ``random.Random`` (seeded from ``--seed`` and its name), so a seed replays the
same choices (the timing, and so the outcomes, vary with the machine).

Operations: a new chat; write a message (sometimes with files attached); ask an assistant (a
message and an ``AssistantRunRequested``); edit or delete a message; delete a chat (rarely);
stop an answer being written; retry an answer (a new request for its question); continue an
ended answer; queue a follow-up while an answer is written; send a paused queue's next
follow-up now. Each message's text carries a tag, ``[q<device>-<n>]``, that stays through its
edits: the checker finds a message by it, and the fake model service knows which question a
call answers.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from server.chaos.checker import tag_of
from server.chaos.devices import EngineDevice, now
from server.chaos.world import ASSISTANTS
from shared.followups import MAX_QUEUED, Sender, queue_state, send_next
from shared.models import (
    ENDED,
    UNFINISHED,
    Attachment,
    Chat,
    ChatRef,
    Message,
    MessageRef,
    RunCancel,
    RunContinue,
    RunRequest,
)

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()
# (operation, weight)
OPERATIONS: list[tuple[str, int]] = [
    ("chat", 2), ("write", 18), ("ask", 22), ("attach", 5), ("edit", 10), ("delete", 4), ("delete-chat", 1),
    ("stop", 8), ("retry", 7), ("continue", 6), ("queue", 10), ("send-now", 4),
]  # fmt: skip
# Which of the world's assistants a question goes to (world.py: the paced model mostly).
ASKED: list[tuple[str, int]] = [("paced", 8), ("failing", 1), ("stalling", 1)]
assert {name for name, _ in ASKED} == set(ASSISTANTS)


def _pick(rng: random.Random, weighted: list[tuple[str, int]]) -> str:
    return rng.choices([name for name, _ in weighted], [weight for _, weight in weighted])[0]


class Workload:
    def __init__(self, device: EngineDevice, rng: random.Random) -> None:
        self.device = device
        self.rng = rng
        self.done: dict[str, int] = {}

    def _text(self, tag: str) -> str:
        return f"[{tag}] " + " ".join(self.rng.choices(WORDS, k=self.rng.randint(1, 8)))

    def _tag(self) -> str:
        self.device.written += 1
        return f"q{self.device.name}-{self.device.written}"

    async def step(self) -> str | None:
        """One operation (the one drawn, or nothing when it has nothing to act on); its name."""
        operation = _pick(self.rng, OPERATIONS)
        store = self.device.store
        if not store.chats() and operation != "chat":
            operation = "chat"
        act: Callable[[], Any] = getattr(self, "_" + operation.replace("-", "_"))
        if await act() is False:
            return None
        self.done[operation] = self.done.get(operation, 0) + 1
        return operation

    # --- the operations -------------------------------------------------------------------------

    async def _chat(self) -> None:
        chat = Chat(id=self.device.new_id(), title=f"{self.device.name}'s chat", created_at=now())
        await self.device.save("ChatCreated", chat, chat=chat.id)

    def _a_chat(self) -> str:
        chats = self.device.store.chats()[:4]  # (the recent ones, as a person goes back to)
        return self.rng.choice(chats).id

    async def _message(self, chat_id: str, files: tuple[Attachment, ...] = (), queued: bool = False) -> Message:
        path = self.device.store.shown_path(chat_id)
        text = self._text(self._tag())
        message = Message(
            id=self.device.new_id(), chat_id=chat_id, role="user", content=text, attachments=files,
            parent_id=None if queued else (path[-1].id if path else None), status="queued" if queued else "completed",
            assistant_id=_pick(self.rng, ASKED) if queued else None, created_at=now(),
        )  # fmt: skip
        if files:  # (queued before the message is in the outbox, as the app does)
            await self.device.store.enqueue_uploads(files)
        await self.device.save(
            "MessageAppended", message, chat=chat_id, text=text, created=message.created_at, queued=queued,
            files=[f.sha256 for f in files],
        )  # fmt: skip
        if files:
            self.device.uploads.kick()
        return message

    async def _write(self) -> None:
        await self._message(self._a_chat())

    async def _attach(self) -> None:
        files = []
        for i in range(self.rng.randint(1, 2)):
            sha, size = self.device.attach(self.rng.choice([1_000, 20_000, 300_000]))
            files.append(Attachment(sha256=sha, name=f"file{i}.bin", mime="application/octet-stream", size=size))
        message = await self._message(self._a_chat(), tuple(files))
        if self.rng.random() < 0.5:
            await self._ask(message)

    async def _ask(self, question: Message | None = None) -> None:
        if question is None:
            question = await self._message(self._a_chat())
        await self._request(question)

    async def _request(self, question: Message, assistant: str | None = None) -> None:
        request = RunRequest(
            run_id=self.device.new_id(), chat_id=question.chat_id, parent_id=question.id, message_id=self.device.new_id(),
            assistant_id=assistant or _pick(self.rng, ASKED),
        )  # fmt: skip
        await self.device.save("AssistantRunRequested", request, chat=question.chat_id, parent=question.id, run=request.run_id)

    def _messages(self, keep: Callable[[Message], bool]) -> list[Message]:
        return [m for m in self.device.store.all_messages() if keep(m)]

    async def _edit(self) -> bool:
        found = self._messages(lambda m: m.role == "user" and tag_of(m.content) is not None)
        if not found:
            return False
        message = self.rng.choice(found[-20:])
        tag = tag_of(message.content)
        text = f"[{tag}] edited {self.rng.randint(1, 10**6)}"
        await self.device.save("MessageEdited", message.model_copy(update={"content": text}), chat=message.chat_id, text=text)
        return True

    async def _delete(self) -> bool:
        found = self._messages(lambda m: m.role == "user")
        if not found:
            return False
        message = self.rng.choice(found[-20:])
        await self.device.save("MessageDeleted", MessageRef(id=message.id, chat_id=message.chat_id), chat=message.chat_id)
        return True

    async def _delete_chat(self) -> bool:
        chats = self.device.store.chats()
        if len(chats) < 3:
            return False
        chat = chats[-1]  # (the oldest)
        await self.device.save("ChatDeleted", ChatRef(id=chat.id), chat=chat.id)
        return True

    async def _stop(self) -> bool:
        found = self._messages(lambda m: m.role == "assistant" and m.status in UNFINISHED and m.run_id is not None)
        if not found:
            return False
        reply = self.rng.choice(found)
        assert reply.run_id is not None
        stop = RunCancel(run_id=reply.run_id, message_id=reply.id)
        await self.device.save("AssistantRunCancelled", stop, chat=reply.chat_id, run=reply.run_id)
        return True

    def _ended_replies(self) -> list[Message]:
        return self._messages(
            lambda m: m.role == "assistant" and m.status in ENDED and m.assistant_id in ASSISTANTS and m.parent_id is not None
        )

    async def _retry(self) -> bool:
        found = self._ended_replies()
        if not found:
            return False
        reply = self.rng.choice(found[-20:])
        question = self.device.store.message(reply.parent_id or "")
        if question is None or question.role != "user":
            return False
        await self._request(question, reply.assistant_id)
        return True

    async def _continue(self) -> bool:
        found = self._ended_replies()
        if not found:
            return False
        reply = self.rng.choice(found[-20:])
        assert reply.assistant_id is not None
        cont = RunContinue(run_id=self.device.new_id(), chat_id=reply.chat_id, message_id=reply.id, assistant_id=reply.assistant_id)
        await self.device.save(
            "AssistantRunContinued", cont, chat=reply.chat_id, run=cont.run_id, before=reply.content, parent=reply.parent_id
        )
        return True

    async def _queue(self) -> bool:
        running = sorted(self.device.store.running())
        if not running:
            return False
        chat_id = self.rng.choice(running)
        if len(self.device.store.queued(chat_id)) >= MAX_QUEUED:
            return False
        await self._message(chat_id, queued=True)
        return True

    async def _send_now(self) -> bool:
        """A paused queue's next follow-up, sent now (as Send now does)."""
        for chat in self.device.store.chats():
            if await send_paused(self.device, chat.id):
                return True
        return False


async def send_paused(device: EngineDevice, chat_id: str) -> bool:
    """Send the chat's next follow-up if its queue is paused (the answer before was stopped or
    failed); True when one was sent."""
    messages = device.store.messages(chat_id)
    if queue_state(messages) != "paused":
        return False
    sender = Sender(answers=lambda assistant_id: True, new_id=device.new_id)
    send = send_next(messages, sender, now=True, chosen=device.store.branch_choices(chat_id))
    if send is None:
        return False
    await device.save("QueuedMessageSent", send, chat=chat_id, run=send.run_id, parent=send.parent_id)
    return True


async def drive(workload: Workload, until: float, interval: float) -> None:
    """Operations at random intervals (``interval`` seconds on average) until ``until`` (monotonic)."""
    while time.monotonic() < until:
        await asyncio.sleep(workload.rng.expovariate(1 / interval))
        if time.monotonic() >= until:
            return
        if workload.device.held:
            continue
        try:
            done = await workload.step()
        except Exception as e:  # (a bug of the chaos itself must not end the run: it shows in the history)
            workload.device.history.record({"op": "error", "device": workload.device.name, "error": repr(e)})
            continue
        if done is not None:
            workload.device.history.record({"op": "did", "device": workload.device.name, "what": done})
