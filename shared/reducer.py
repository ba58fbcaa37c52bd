"""The pure reducer: a logged event becomes row mutations, and nothing else happens here.

Every store (server SQLite, server PostgreSQL, the browser's SQLite) carries the mutations out in
its own transaction; ``shared.schema.Sql`` renders them as statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, assert_never

from shared.models import (
    UNFINISHED,
    Chat,
    ChatRef,
    DomainEvent,
    EventType,
    LoggedEvent,
    Message,
    MessageRef,
    RunCancel,
    RunRequest,
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


# ``last_seq`` of a row that only a still-pending local event made: below every real seq.
PENDING_SEQ = 0


def row_of(entity: Chat | Message) -> dict[str, Any]:
    """The entity as its table's row holds it: a message's attachments are one column of JSON
    (shared/schema.py), which ``Message.model_validate`` of the row reads back."""
    row = entity.model_dump()
    if isinstance(entity, Message):
        row.pop("attachments", None)
        row["attachments_json"] = entity.attachments_json
    return row


def _row(entity: Chat | Message, seq: int, at: str) -> dict[str, Any]:
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
            )
            return [Upsert("messages", _row(message, seq, at))]
        case EventType.ASSISTANT_RUN_CANCELLED:
            assert isinstance(payload, RunCancel)
            values = {"status": "cancelled", "updated_at": at, "last_seq": seq}
            return [Patch("messages", payload.message_id, values, CANCELLABLE)]
        case _:  # (a new event type fails type-checking here until it is handled above)
            assert_never(kind)
