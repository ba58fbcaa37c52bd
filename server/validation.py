"""What the write path knows of each event, apart from SQL: whether it may be logged, what it
names, and what it touches.

``validation_error`` checks an event against the account's state as a ``StateReader`` shows it;
``content_error`` checks it against this server's limit, before the append. During an append
(``server/appender.py``) the state is an ``AccountState``: the rows one read fetched for the
events' named ids (``named_ids``), with the transaction's earlier accepted events laid over it.
Each logged event carries its ``footprint``, which compaction reads.

The functions that branch on event types and payloads end in ``typing.assert_never``: a new one fails
type-checking here until each one handles it (``tests/test_types.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, assert_never

from server.store import Rejected
from shared.models import (
    ENDED,
    Chat,
    ChatRef,
    DomainEvent,
    EventType,
    Message,
    MessageRef,
    RunCancel,
    RunRequest,
)
from shared.reducer import CANCELLABLE


class StateReader(Protocol):
    """What validation needs to know about the current state, inside the append transaction
    (read ahead of validation, so validation does no I/O)."""

    def chat_exists(self, chat_id: str) -> bool: ...

    def message_chat(self, message_id: str) -> str | None:
        """The chat of an existing message, or None when there is no such message."""

    def message_status(self, message_id: str) -> str | None:
        """The status of an existing message."""

    def run_exists(self, run_id: str) -> bool:
        """Whether an assistant run with this id was ever requested."""


def validation_error(event: DomainEvent, state: StateReader) -> str | None:
    """Why ``event`` cannot be applied to the current state, or None when it can."""
    payload = event.payload
    match event.type:
        case EventType.CHAT_CREATED:
            assert isinstance(payload, Chat)
            return "this chat already exists" if state.chat_exists(payload.id) else None
        case EventType.CHAT_UPDATED | EventType.CHAT_DELETED:
            assert isinstance(payload, (Chat, ChatRef))
            return None if state.chat_exists(payload.id) else "unknown chat"
        case EventType.ASSISTANT_RUN_REQUESTED:
            assert isinstance(payload, RunRequest)
            if not state.chat_exists(payload.chat_id):
                return "unknown chat"
            if state.run_exists(payload.run_id):
                return "this run already exists (a new request needs a new runId)"
            if payload.parent_id is not None and state.message_chat(payload.parent_id) != payload.chat_id:
                return "the message to answer (parentId) is not in this chat"
            return "this message already exists" if state.message_chat(payload.message_id) is not None else None
        case EventType.ASSISTANT_RUN_CANCELLED:
            assert isinstance(payload, RunCancel)
            return None if state.message_chat(payload.message_id) else "unknown message"
        case (
            EventType.MESSAGE_APPENDED
            | EventType.MESSAGE_EDITED
            | EventType.MESSAGE_DELETED
            | EventType.TOOL_CALL_REQUESTED
            | EventType.TOOL_CALL_SUCCEEDED
            | EventType.TOOL_CALL_FAILED
        ):
            assert isinstance(payload, (Message, MessageRef))
            return _message_error(event.type, payload, state)
        case _:  # (a new event type fails type-checking here until it is handled above)
            assert_never(event.type)


def _message_error(kind: EventType, payload: Message | MessageRef, state: StateReader) -> str | None:
    if not state.chat_exists(payload.chat_id):
        return "unknown chat"
    chat_of_message = state.message_chat(payload.id)
    if kind is EventType.MESSAGE_APPENDED:
        return "this message already exists" if chat_of_message is not None else None
    if kind in (EventType.MESSAGE_EDITED, EventType.MESSAGE_DELETED) and chat_of_message is None:
        return "unknown message"
    if chat_of_message is not None and chat_of_message != payload.chat_id:
        return "a message cannot move to another chat"
    if isinstance(payload, Message) and chat_of_message is not None:
        status = state.message_status(payload.id)
        if status in ENDED and payload.status != status:  # (a client may still edit the text)
            return f"the run of this message has ended ({status})"
    return None


def content_error(event: DomainEvent, max_content_chars: int) -> str | None:
    """Why ``event`` is over this server's limit on a message's length, or None when it is not
    (checked before the append, as a ``Rejected``: ``POST /sync/events`` and ``python -m server import``)."""
    if isinstance(event.payload, Message) and len(event.payload.content) > max_content_chars:
        return f"the message is longer than {max_content_chars:,} characters (this server's limit)"
    return None


class AccountState:
    """One account's state as validation sees it during the transaction: what the prefetch read
    returned, with the earlier accepted events of the transaction laid over it."""

    def __init__(self) -> None:
        self.chats: set[str] = set()
        self.messages: dict[str, str | None] = {}
        self.statuses: dict[str, str] = {}
        self.runs: set[str] = set()
        self.logged: dict[str, int] = {}  # eventId -> seq, for duplicates

    def chat_exists(self, chat_id: str) -> bool:
        return chat_id in self.chats

    def message_chat(self, message_id: str) -> str | None:
        chat = self.messages.get(message_id)
        return chat if chat in self.chats else None  # a deleted chat took its messages

    def message_status(self, message_id: str) -> str | None:
        return self.statuses.get(message_id) if self.message_chat(message_id) else None

    def run_exists(self, run_id: str) -> bool:
        return run_id in self.runs

    def apply(self, event: DomainEvent) -> None:
        payload = event.payload
        match payload:
            case Chat():
                self.chats.add(payload.id)
            case ChatRef():
                self.chats.discard(payload.id)
            case Message():
                self.messages[payload.id] = payload.chat_id
                self.statuses[payload.id] = payload.status
            case MessageRef():
                self.messages[payload.id] = None
            case RunRequest():
                self.messages[payload.message_id] = payload.chat_id
                self.statuses[payload.message_id] = "queued"
                self.runs.add(payload.run_id)
            case RunCancel():
                if self.statuses.get(payload.message_id) in CANCELLABLE:
                    self.statuses[payload.message_id] = "cancelled"
            case _:
                assert_never(payload)


def named_ids(events: Iterable[DomainEvent | Rejected]) -> tuple[set[str], set[str]]:
    """The chat ids and message ids a batch refers to."""
    chats: set[str] = set()
    messages: set[str] = set()
    for event in events:
        payload = event.payload if isinstance(event, DomainEvent) else None
        match payload:
            case Chat() | ChatRef():
                chats.add(payload.id)
            case Message() | MessageRef():
                chats.add(payload.chat_id)
                messages.add(payload.id)
            case RunRequest():
                chats.add(payload.chat_id)
                if payload.parent_id is not None:
                    messages.add(payload.parent_id)  # (it must be a message of the chat)
                messages.add(payload.message_id)
            case RunCancel():
                messages.add(payload.message_id)
            case None:
                pass
            case _:
                assert_never(payload)
    return chats, messages


@dataclass(frozen=True)
class Footprint:
    """What an event touches, for compaction: ``entity`` and ``chat`` are keys such as ``c:<id>``
    (a chat) or ``m:<id>`` (a message); ``kind`` is ``full`` (the whole entity: it supersedes the
    entity's earlier events), ``delete`` (never superseded: a client that had the row needs it), or
    ``patch`` (a partial change: it supersedes nothing)."""

    entity: str
    chat: str
    kind: str


def footprint(event: DomainEvent, chat_of_message: str | None) -> Footprint:
    payload = event.payload
    match payload:
        case Chat():
            return Footprint(f"c:{payload.id}", f"c:{payload.id}", "full")
        case ChatRef():
            return Footprint(f"c:{payload.id}", f"c:{payload.id}", "delete")
        case Message():
            return Footprint(f"m:{payload.id}", f"c:{payload.chat_id}", "full")
        case MessageRef():
            return Footprint(f"m:{payload.id}", f"c:{payload.chat_id}", "delete")
        case RunRequest():
            return Footprint(f"m:{payload.message_id}", f"c:{payload.chat_id}", "full")
        case RunCancel():
            return Footprint(f"m:{payload.message_id}", f"c:{chat_of_message}", "patch")
        case _:  # (a new payload type fails type-checking here until it is handled above)
            assert_never(payload)
