"""The pure reducer: a logged event becomes row mutations, and nothing else happens here.

Every store (server SQLite, server PostgreSQL, the browser's SQLite) carries the mutations out in
its own transaction; ``shared.schema.Sql`` renders them as statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, assert_never

from shared.models import (
    ENDED,
    UNFINISHED,
    Chat,
    ChatRef,
    DomainEvent,
    EventType,
    LoggedEvent,
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


@dataclass(frozen=True)
class Upsert:
    """Insert the row, or replace every column of the row with the same id."""

    table: str
    row: dict[str, Any]


@dataclass(frozen=True)
class Delete:
    table: str
    id: str


@dataclass(frozen=True)
class DeleteChildren:
    """Delete every row of ``table`` whose ``column`` equals ``value`` (a chat's messages)."""

    table: str
    column: str
    value: str


@dataclass(frozen=True)
class Patch:
    """Set some columns of an existing row, if its status is one of ``only_if_status`` (when given)."""

    table: str
    id: str
    values: dict[str, Any]
    only_if_status: tuple[str, ...] = field(default=())


Mutation = Upsert | Delete | DeleteChildren | Patch

# A run can only be cancelled while it has not ended.
CANCELLABLE = UNFINISHED
# A reply can only be continued once it has ended (Continue is the one way to reopen it).
CONTINUABLE = ENDED
# A queued user message is sent once: the event that sends it changes it only while it is queued.
SENDABLE = ("queued",)

Entity = Chat | Message | Preset | Settings


# ``last_seq`` of a row that only a still-pending local event made: below every real seq.
PENDING_SEQ = 0


def row_of(entity: Entity) -> dict[str, Any]:
    """The entity as its table's row holds it: a message's attachments and usage are each one
    column of JSON (shared/schema.py), which ``Message.model_validate`` of the row reads back."""
    row = entity.model_dump()
    for name in type(entity).model_fields:  # (a field left out of the JSON when empty is still a column)
        row.setdefault(name, None)
    if isinstance(entity, Message):
        row.pop("attachments", None)
        row["attachments_json"] = entity.attachments_json
        row.pop("usage", None)
        row["usage_json"] = entity.usage_json
    return row


def _row(entity: Entity, seq: int, at: str) -> dict[str, Any]:
    row = row_of(entity)
    row["updated_at"] = at
    row["last_seq"] = seq
    return row


def apply(event: DomainEvent) -> list[Mutation]:
    """The mutations that bring the state from before ``event`` to after it.

    A ``LoggedEvent`` stamps its rows with its seq and the server's time. A plain ``DomainEvent``
    is a client's optimistic, still-pending change: its rows get ``PENDING_SEQ`` and the client's time.
    """
    seq = event.seq if isinstance(event, LoggedEvent) else PENDING_SEQ
    return mutations(event.type, event.payload, seq, event.created_at)


def mutations(kind: EventType, payload: Any, seq: int, at: str) -> list[Mutation]:
    """``apply`` for an event given by its parts: its rows get ``seq`` and ``at`` (the server's
    write path has them before it has, or needs, a LoggedEvent)."""
    match kind:
        case EventType.CHAT_CREATED | EventType.CHAT_UPDATED:
            assert isinstance(payload, Chat)
            return [Upsert("chats", _row(payload, seq, at))]
        case EventType.CHAT_DELETED:
            assert isinstance(payload, ChatRef)
            return [DeleteChildren("messages", "chat_id", payload.id), Delete("chats", payload.id)]
        case (
            EventType.MESSAGE_APPENDED
            | EventType.MESSAGE_EDITED
            | EventType.TOOL_CALL_REQUESTED
            | EventType.TOOL_CALL_SUCCEEDED
            | EventType.TOOL_CALL_FAILED
        ):
            assert isinstance(payload, Message)
            return [Upsert("messages", _row(payload, seq, at))]
        case EventType.MESSAGE_DELETED:
            assert isinstance(payload, MessageRef)
            return [Delete("messages", payload.id)]
        case EventType.ASSISTANT_RUN_REQUESTED:
            assert isinstance(payload, RunRequest)
            # The reply names the preset it is answered under from the start, and an explicit
            # system message (which its run then uses as it is) is on it from the start too.
            message = Message(
                id=payload.message_id,
                chat_id=payload.chat_id,
                role="assistant",
                content="",
                parent_id=payload.parent_id,
                status="queued",
                assistant_id=payload.assistant_id,
                run_id=payload.run_id,
                created_at=at,
                preset_id=payload.preset_id,
                instructions=payload.instructions,
            )
            return [Upsert("messages", _row(message, seq, at))]
        case EventType.ASSISTANT_RUN_CANCELLED:
            assert isinstance(payload, RunCancel)
            values = {"status": "cancelled", "updated_at": at, "last_seq": seq}
            return [Patch("messages", payload.message_id, values, CANCELLABLE)]
        case EventType.SETTINGS_UPDATED:
            assert isinstance(payload, Settings)
            return [Upsert("settings", _row(payload, seq, at))]
        case EventType.PRESET_CREATED | EventType.PRESET_UPDATED:
            assert isinstance(payload, Preset)
            return [Upsert("presets", _row(payload, seq, at))]
        case EventType.PRESET_DELETED:
            assert isinstance(payload, PresetRef)
            return [Delete("presets", payload.id)]  # (what names it keeps the id: a missing preset is none)
        case EventType.ASSISTANT_RUN_CONTINUED:
            assert isinstance(payload, RunContinue)
            # The text stays: the continuation appends to it.
            values = {"status": "queued", "run_id": payload.run_id, "finish_reason": None, "updated_at": at, "last_seq": seq}
            return [Patch("messages", payload.message_id, values, CONTINUABLE)]
        case EventType.QUEUED_MESSAGE_SENT:
            assert isinstance(payload, QueuedSend)
            values = {"status": "completed", "parent_id": payload.parent_id, "updated_at": at, "last_seq": seq}
            sent: list[Mutation] = [Patch("messages", payload.message_id, values, SENDABLE)]
            if payload.run_id is not None and payload.reply_id is not None:
                reply = Message(
                    id=payload.reply_id,
                    chat_id=payload.chat_id,
                    role="assistant",
                    content="",
                    parent_id=payload.message_id,
                    status="queued",
                    assistant_id=payload.assistant_id,
                    run_id=payload.run_id,
                    preset_id=payload.preset_id,
                    created_at=at,
                )
                sent.append(Upsert("messages", _row(reply, seq, at)))
            return sent
        case _:  # (a new event type fails type-checking here until it is handled above)
            assert_never(kind)
