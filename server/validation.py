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
from dataclasses import dataclass, field
from typing import Protocol, assert_never

from server.store import Rejected
from shared.models import (
    ENDED,
    SETTINGS_ID,
    UNFINISHED,
    Chat,
    ChatRef,
    DomainEvent,
    EventType,
    Message,
    MessageRef,
    Preset,
    PresetRef,
    QueuedSend,
    RunCancel,
    RunContinue,
    RunRequest,
    Settings,
)
from shared.reducer import CANCELLABLE, CONTINUABLE, SENDABLE


class StateReader(Protocol):
    """What validation needs to know about the current state, inside the append transaction
    (read ahead of validation, so validation does no I/O)."""

    def chat_exists(self, chat_id: str) -> bool: ...

    def message_chat(self, message_id: str) -> str | None:
        """The chat of an existing message, or None when there is no such message."""

    def message_status(self, message_id: str) -> str | None:
        """The status of an existing message."""

    def message_role(self, message_id: str) -> str | None:
        """The role of an existing message."""

    def message_run(self, message_id: str) -> str | None:
        """The runId of an existing message (None: none, or no such message)."""

    def run_exists(self, run_id: str) -> bool:
        """Whether an assistant run with this id was ever requested."""

    def preset_exists(self, preset_id: str) -> bool: ...


NEW_RUN = "this run already exists (a new request needs a new runId)"


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
                return NEW_RUN
            if payload.parent_id is not None and state.message_chat(payload.parent_id) != payload.chat_id:
                return "the message to answer (parentId) is not in this chat"
            return "this message already exists" if state.message_chat(payload.message_id) is not None else None
        case EventType.ASSISTANT_RUN_CANCELLED:
            assert isinstance(payload, RunCancel)
            if not state.message_chat(payload.message_id):
                return "unknown message"
            if state.message_role(payload.message_id) == "user":
                return "only an answer can be stopped (a queued message is removed instead)"
            if state.message_status(payload.message_id) in UNFINISHED and payload.run_id != state.message_run(payload.message_id):
                # (a late Stop of the run before a Continue must not stop the continuation)
                return "this reply is being written by another run"
            return None
        case EventType.ASSISTANT_RUN_CONTINUED:
            assert isinstance(payload, RunContinue)
            return _continue_error(payload, state)
        case EventType.QUEUED_MESSAGE_SENT:
            assert isinstance(payload, QueuedSend)
            return _send_error(payload, state)
        case EventType.SETTINGS_UPDATED:
            assert isinstance(payload, Settings)
            return None if payload.id == SETTINGS_ID else f"an account's settings have the id {SETTINGS_ID}"
        case EventType.PRESET_CREATED:
            assert isinstance(payload, Preset)
            return "this preset already exists" if state.preset_exists(payload.id) else None
        case EventType.PRESET_UPDATED | EventType.PRESET_DELETED:
            assert isinstance(payload, (Preset, PresetRef))
            return None if state.preset_exists(payload.id) else "unknown preset"
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
        if status in SENDABLE and state.message_role(payload.id) == "user" and not payload.is_queued_follow_up:
            return "a queued message stays queued until it is sent (QueuedMessageSent) or removed"
        if status in UNFINISHED and payload.run_id != state.message_run(payload.id):
            # (a late checkpoint of the run before a Continue must not overwrite the continuation)
            return "this reply is being written by another run"
    return None


def _continue_error(payload: RunContinue, state: StateReader) -> str | None:
    if not state.chat_exists(payload.chat_id):
        return "unknown chat"
    chat = state.message_chat(payload.message_id)
    if chat is None:
        return "unknown message"
    if state.message_role(payload.message_id) != "assistant":
        return "only an assistant's reply can be continued"
    if state.message_status(payload.message_id) not in CONTINUABLE:
        return "this reply is still being written"
    if state.run_exists(payload.run_id):
        return NEW_RUN
    return None if chat == payload.chat_id else "this reply is not in this chat"


def _send_error(payload: QueuedSend, state: StateReader) -> str | None:
    if not state.chat_exists(payload.chat_id):
        return "unknown chat"
    chat = state.message_chat(payload.message_id)
    if chat is None:
        return "unknown message"
    if chat != payload.chat_id:
        return "this message is not in this chat"
    if state.message_role(payload.message_id) != "user":
        return "only a queued user message can be sent"
    if state.message_status(payload.message_id) not in SENDABLE:
        return "this message was already sent"
    parent = payload.parent_id
    if parent is not None:
        if parent == payload.message_id or state.message_chat(parent) != payload.chat_id:
            return "the message to follow (parentId) is not in this chat"
        if state.message_role(parent) == "user" and state.message_status(parent) in SENDABLE:
            return "the message to follow (parentId) is still queued"
    if payload.run_id is not None and state.run_exists(payload.run_id):
        return NEW_RUN
    if payload.reply_id is not None and state.message_chat(payload.reply_id) is not None:
        return "the reply (replyId) already exists"
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
        self.roles: dict[str, str] = {}
        self.message_runs: dict[str, str | None] = {}  # a message's runId
        self.runs: set[str] = set()
        self.presets: set[str] = set()
        self.logged: dict[str, int] = {}  # eventId -> seq, for duplicates

    def chat_exists(self, chat_id: str) -> bool:
        return chat_id in self.chats

    def message_chat(self, message_id: str) -> str | None:
        chat = self.messages.get(message_id)
        return chat if chat in self.chats else None  # a deleted chat took its messages

    def message_status(self, message_id: str) -> str | None:
        return self.statuses.get(message_id) if self.message_chat(message_id) else None

    def message_role(self, message_id: str) -> str | None:
        return self.roles.get(message_id) if self.message_chat(message_id) else None

    def message_run(self, message_id: str) -> str | None:
        return self.message_runs.get(message_id) if self.message_chat(message_id) else None

    def run_exists(self, run_id: str) -> bool:
        return run_id in self.runs

    def preset_exists(self, preset_id: str) -> bool:
        return preset_id in self.presets

    def _message(self, message_id: str, chat_id: str, role: str, status: str, run_id: str | None) -> None:
        self.messages[message_id] = chat_id
        self.roles[message_id] = role
        self.statuses[message_id] = status
        self.message_runs[message_id] = run_id

    def apply(self, event: DomainEvent) -> None:
        """An accepted event, laid over the state (as the reducer changes the rows)."""
        payload = event.payload
        match payload:
            case Chat():
                self.chats.add(payload.id)
            case ChatRef():
                self.chats.discard(payload.id)
            case Message():
                self._message(payload.id, payload.chat_id, payload.role, payload.status, payload.run_id)
            case MessageRef():
                self.messages[payload.id] = None
            case RunRequest():
                self._message(payload.message_id, payload.chat_id, "assistant", "queued", payload.run_id)
                self.runs.add(payload.run_id)
            case RunCancel():
                if self.statuses.get(payload.message_id) in CANCELLABLE:
                    self.statuses[payload.message_id] = "cancelled"
            case RunContinue():
                if self.statuses.get(payload.message_id) in CONTINUABLE:
                    self.statuses[payload.message_id] = "queued"
                    self.message_runs[payload.message_id] = payload.run_id
                self.runs.add(payload.run_id)
            case QueuedSend():
                if self.statuses.get(payload.message_id) in SENDABLE:
                    self.statuses[payload.message_id] = "completed"
                if payload.run_id is not None and payload.reply_id is not None:
                    self._message(payload.reply_id, payload.chat_id, "assistant", "queued", payload.run_id)
                    self.runs.add(payload.run_id)
            case Settings():
                pass  # (nothing validation asks depends on it)
            case Preset():
                self.presets.add(payload.id)
            case PresetRef():
                self.presets.discard(payload.id)
            case _:
                assert_never(payload)


@dataclass
class Named:
    """The ids a batch refers to, for the prefetch read: chats, messages, presets, and the runIds
    it asks for."""

    chats: set[str] = field(default_factory=set)
    messages: set[str] = field(default_factory=set)
    presets: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)


def named_ids(events: Iterable[DomainEvent | Rejected]) -> Named:
    """What a batch refers to."""
    named = Named()
    for event in events:
        payload = event.payload if isinstance(event, DomainEvent) else None
        match payload:
            case Chat() | ChatRef():
                named.chats.add(payload.id)
            case Message() | MessageRef():
                named.chats.add(payload.chat_id)
                named.messages.add(payload.id)
            case RunRequest():
                named.chats.add(payload.chat_id)
                if payload.parent_id is not None:
                    named.messages.add(payload.parent_id)  # (it must be a message of the chat)
                named.messages.add(payload.message_id)
                named.runs.add(payload.run_id)
            case RunCancel():
                named.messages.add(payload.message_id)
            case RunContinue():
                named.chats.add(payload.chat_id)
                named.messages.add(payload.message_id)
                named.runs.add(payload.run_id)
            case QueuedSend():
                named.chats.add(payload.chat_id)
                named.messages.add(payload.message_id)
                named.messages |= {m for m in (payload.parent_id, payload.reply_id) if m is not None}
                if payload.run_id is not None:
                    named.runs.add(payload.run_id)
            case Settings():
                pass
            case Preset() | PresetRef():
                named.presets.add(payload.id)
            case None:
                pass
            case _:
                assert_never(payload)
    return named


@dataclass(frozen=True)
class Footprint:
    """What an event touches, for compaction: ``entity`` and ``chat`` are keys such as ``c:<id>``
    (a chat), ``m:<id>`` (a message), ``p:<id>`` (a preset) or ``s:<id>`` (the settings; a preset
    and the settings are their own "chat"); ``kind`` is ``full`` (the whole entity: it supersedes
    the entity's earlier events), ``delete`` (never superseded: a client that had the row needs
    it), ``patch`` (a partial change: it supersedes nothing), or ``keep`` (a change of more than
    one row, a ``QueuedMessageSent`` that also creates its reply: it supersedes nothing, and no
    later event of one of its rows replaces it, only its chat's delete does)."""

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
        case RunContinue():
            return Footprint(f"m:{payload.message_id}", f"c:{payload.chat_id}", "patch")
        case QueuedSend():
            kind = "patch" if payload.reply_id is None else "keep"
            return Footprint(f"m:{payload.message_id}", f"c:{payload.chat_id}", kind)
        case Settings():
            return Footprint(f"s:{payload.id}", f"s:{payload.id}", "full")
        case Preset():
            return Footprint(f"p:{payload.id}", f"p:{payload.id}", "full")
        case PresetRef():
            return Footprint(f"p:{payload.id}", f"p:{payload.id}", "delete")
        case _:  # (a new payload type fails type-checking here until it is handled above)
            assert_never(payload)
