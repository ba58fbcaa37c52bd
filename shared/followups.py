"""Follow-ups queued while an answer is being written: which is sent next, when, and after what.

A message sent while an answer is being written in its chat is queued: a user message with status
``queued`` (in the log like any other, so it survives reloads and shows on every device). When
the answer before it ends, the oldest one is sent (``QueuedMessageSent``: it joins the
conversation after that answer, and its own answer is asked for). The server does this for its
assistants even with no browser open (server/runs.py); a device does it for its own assistants,
and for **Send now**. An answer that was stopped or failed pauses the queue: nothing more is sent
until someone asks (**Send now**) or the queue is cleared. The server refuses to send one message
twice (it must still be queued), so two devices and the server may all try. Pure: rows in, a
decision out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from shared.models import UNFINISHED, Message, QueuedSend
from shared.thread import Link, shown_path

# The most follow-ups one chat may have waiting.
MAX_QUEUED = 10

QueueState = Literal["empty", "answering", "paused", "ready"]


def _order(message: Message) -> tuple[str, str]:
    return message.created_at, message.id


def queued_follow_ups(messages: Iterable[Message]) -> list[Message]:
    """A chat's queued follow-ups, in the order they are sent (oldest first)."""
    return sorted((m for m in messages if m.is_queued_follow_up), key=_order)


def _latest_reply(messages: list[Message]) -> Message | None:
    replies = [m for m in messages if m.role == "assistant"]
    return max(replies, key=_order) if replies else None


def queue_state(messages: Iterable[Message]) -> QueueState:
    """``empty``: nothing queued; ``answering``: an answer is being written (the queue waits for
    it); ``paused``: the last answer was stopped or failed (the queue waits for Send now);
    ``ready``: the next may be sent now."""
    rows = list(messages)
    if not any(m.is_queued_follow_up for m in rows):
        return "empty"
    if any(m.role == "assistant" and m.status in UNFINISHED for m in rows):
        return "answering"
    latest = _latest_reply(rows)
    if latest is not None and latest.status in ("cancelled", "failed_upstream"):
        return "paused"
    return "ready"


def follows(messages: Iterable[Message], chosen: Mapping[str, str] | None = None) -> str | None:
    """The message a follow-up sent now comes after: the end of the conversation as it is shown
    (shared/thread.py: at each fork the branch in ``chosen``, a device's, else the newest), so
    that it neither starts a branch nor skips a follow-up sent before it without an answer."""
    links = [Link(m.id, m.parent_id, m.created_at) for m in messages if not m.is_queued_follow_up]
    path = shown_path(links, dict(chosen or {}))
    return path[-1].id if path else None


@dataclass(frozen=True)
class Sender:
    """Who sends: ``answers(assistant_id)`` says whether this sender runs that assistant (the
    server: its own; a device: those on the device); ``new_id`` makes the run's and reply's ids."""

    answers: Callable[[str], bool]
    new_id: Callable[[], str]


def send_next(
    messages: Iterable[Message], sender: Sender, now: bool = False, chosen: Mapping[str, str] | None = None
) -> QueuedSend | None:
    """The next follow-up this sender sends, when the queue is ready (or, ``now``, whatever it
    waits for but an answer being written: Send now), or None. A follow-up with no assistant
    ("No answer") is sent by anyone, without a run; one whose assistant another sender runs is
    left to it."""
    rows = list(messages)
    state = queue_state(rows)
    if state == "empty" or state == "answering" or (state == "paused" and not now):
        return None
    first = queued_follow_ups(rows)[0]
    if first.assistant_id is not None and not sender.answers(first.assistant_id):
        return None
    parent = follows(rows, chosen)
    if first.assistant_id is None:
        return QueuedSend(message_id=first.id, chat_id=first.chat_id, parent_id=parent)
    return QueuedSend(
        message_id=first.id, chat_id=first.chat_id, parent_id=parent, run_id=sender.new_id(), reply_id=sender.new_id(),
        assistant_id=first.assistant_id, preset_id=first.preset_id,
    )  # fmt: skip
