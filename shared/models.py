"""The wire contract of docs/protocol.md as pydantic models: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    Json,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import CoreSchema, core_schema


def format_time(moment: datetime) -> str:
    """RFC 3339, UTC, milliseconds: ``2026-11-30T12:00:00.123Z``."""
    if moment.tzinfo is None:
        raise ValueError("a time must carry a timezone")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


_CANONICAL_TIME = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"
_CANONICAL_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _normalize_time(value: str) -> str:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("not a time") from None
    if moment.tzinfo is None:
        raise ValueError("no timezone")
    return format_time(moment)


def _normalize_id(value: str) -> str:
    return str(uuid.UUID(value))


class _Canonical:
    """A string already in its canonical form (the common case: every row of a state page) is
    checked by pydantic-core's own regex, with no call into Python; any other is normalized by
    ``normalize``, and one that cannot be is refused with ``message``. (Measured under CPython: a
    5,000-row state page parses in a third of the time it took with a Python validator per field.)"""

    def __init__(self, canonical: str, normalize: Any, message: str) -> None:
        self.canonical, self.normalize, self.message = canonical, normalize, message

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.union_schema(
            [
                core_schema.str_schema(pattern=self.canonical),
                core_schema.no_info_after_validator_function(self.normalize, core_schema.str_schema()),
            ],
            mode="left_to_right",
            custom_error_type="invalid_format",
            custom_error_message=self.message,
        )


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


Id = Annotated[str, _Canonical(_CANONICAL_ID, _normalize_id, "must be a UUID string")]
# Every free text: PostgreSQL cannot store NUL, so no store gets one.
Text = Annotated[str, AfterValidator(no_nul)]
Timestamp = Annotated[
    str, _Canonical(_CANONICAL_TIME, _normalize_time, "must be an RFC 3339 time with a timezone, such as 2026-11-30T12:00:00.123Z")
]


class Wire(BaseModel):
    """Base of every wire shape: camelCase aliases, snake_case attributes, unknown fields ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict, camelCase."""
        return self.model_dump(mode="json", by_alias=True)


# --- Entities (materialized state) -------------------------------------------------------------

Role = Literal["user", "assistant", "tool_call", "tool_result", "error"]
Status = Literal["completed", "queued", "streaming", "failed_upstream", "cancelled"]
# A reply still being written (by a server's run or a local assistant): it can be stopped, and
# it has not ended. Every place that asks "still running?" asks this.
UNFINISHED: tuple[Status, ...] = ("queued", "streaming")
# A reply whose run is over: it keeps this status for good (a late checkpoint cannot undo a Stop).
ENDED: tuple[Status, ...] = tuple(s for s in get_args(Status) if s not in UNFINISHED)


# The longest instructions of one layer (the account's, a preset's, a chat's), and the longest
# system message: the three layers joined by blank lines (shared/instructions.py).
MAX_INSTRUCTIONS = 4000
MAX_SYSTEM_MESSAGE = 3 * MAX_INSTRUCTIONS + 2 * len("\n\n")
_MAX_WIRE_INT = 2**53 - 1


def _absent(value: object) -> bool:
    return value is None or value == ()


class Chat(Wire):
    id: Id
    title: Text = Field(max_length=500)
    created_at: Timestamp
    updated_at: Timestamp | None = None  # filled by the server
    last_seq: int | None = None  # filled by the server
    # The chat's layer of instructions, and the preset it uses (null: none; a preset that is
    # gone counts as none). Left out of the JSON when null, so a chat without them is the JSON
    # it always was (an older client reads it, an older event still parses).
    instructions: Text | None = Field(default=None, max_length=MAX_INSTRUCTIONS, exclude_if=_absent)
    preset_id: Id | None = Field(default=None, exclude_if=_absent)


# An attachment's id is the SHA-256 of its bytes, in lowercase hex.
SHA256_PATTERN = r"^[0-9a-f]{64}$"
MAX_ATTACHMENTS = 32  # per message


class Attachment(Wire):
    """A file a message carries, by reference only: the bytes are the server's blob
    ``/blobs/{sha256}`` (docs/protocol.md, "Attachments"), never in the log. ``mime`` is what the
    sending device says the file is; the server serves and reads the bytes by its own sniffing.
    ``width`` and ``height`` (an image's, in pixels) are left out of the JSON when unknown."""

    sha256: str = Field(pattern=SHA256_PATTERN)
    name: Text = Field(min_length=1, max_length=255)
    mime: Text = Field(max_length=255)
    size: int = Field(ge=0, le=_MAX_WIRE_INT)
    width: int | None = Field(default=None, ge=0, le=1_000_000, exclude_if=_absent)
    height: int | None = Field(default=None, ge=0, le=1_000_000, exclude_if=_absent)


# Why an answer ended: the provider's ``finish_reason`` (``stop``: it was done; ``length``: cut at
# the length limit), a Stop (``cancelled``) or a failure (``failed``).
FinishReason = Literal["stop", "length", "cancelled", "failed"]


class TokenUsage(Wire):
    """What an answer cost, as the provider reported it; ``estimated``: the provider's own
    estimate, not a tokenizer's count (the demo model counts words)."""

    prompt_tokens: int = Field(ge=0, le=_MAX_WIRE_INT)
    completion_tokens: int = Field(ge=0, le=_MAX_WIRE_INT)
    estimated: bool = False


class Message(Wire):
    id: Id
    chat_id: Id
    role: Role
    content: Text
    # Left out of the JSON when there are none: a message without attachments is the same JSON
    # as before they existed, so an older client reads it (and an older event still parses).
    attachments: tuple[Attachment, ...] = Field(
        default=(), max_length=MAX_ATTACHMENTS, exclude_if=_absent, validation_alias=AliasChoices("attachments", "attachments_json")
    )
    parent_id: Id | None = None
    status: Status = "completed"
    assistant_id: Text | None = None
    run_id: Id | None = None
    created_at: Timestamp
    updated_at: Timestamp | None = None  # filled by the server
    last_seq: int | None = None  # filled by the server
    # Each left out of the JSON when null (as ``attachments`` when empty): a message without them
    # is the JSON it always was. ``preset_id``: on a reply, the preset it was answered under; on
    # a queued user message, the one chosen when it was written. ``instructions``: on a reply,
    # exactly the system message it was given. ``finish_reason`` and ``usage``: why the answer
    # ended and what it cost (null while it runs); a row holds the usage as one column of JSON
    # text, ``usage_json``, which pydantic-core parses itself (``Json``: a Python validator here
    # made every message of a state page a third slower to parse, measured; not part of the wire
    # shape, so not in /openapi.json).
    preset_id: Id | None = Field(default=None, exclude_if=_absent)
    instructions: Text | None = Field(default=None, max_length=MAX_SYSTEM_MESSAGE, exclude_if=_absent)
    finish_reason: FinishReason | None = Field(default=None, exclude_if=_absent)
    usage: TokenUsage | SkipJsonSchema[Json[TokenUsage]] | None = Field(
        default=None, exclude_if=_absent, validation_alias=AliasChoices("usage", "usage_json")
    )

    # A row of the ``messages`` table (shared/schema.py) holds the attachments as one column of
    # JSON text, ``attachments_json`` (NULL: none): a row read back validates as a Message. (A
    # validator of this field alone, not of the model: the model's would make pydantic-core turn
    # every message of a state page into a dict before validating it, at twice the parse's time.)
    @field_validator("attachments", mode="before")
    @classmethod
    def _from_row(cls, value: Any) -> Any:
        if value is None:
            return ()
        return json.loads(value) if isinstance(value, str) else value

    @property
    def attachments_json(self) -> str | None:
        """The ``attachments_json`` column of this message's row: the attachments' JSON, or None."""
        return attachments_json(self.attachments)

    @property
    def usage_json(self) -> str | None:
        """The ``usage_json`` column of this message's row: the usage's JSON, or None."""
        return usage_json(self.usage)

    @property
    def is_queued_follow_up(self) -> bool:
        """A user message queued while an answer is being written: not part of the chat's
        conversation until a ``QueuedMessageSent`` sends it."""
        return self.role == "user" and self.status == "queued"


def attachments_json(attachments: tuple[Attachment, ...]) -> str | None:
    """A message's attachments as its row holds them (``attachments_json``): JSON text, or None
    when there are none."""
    if not attachments:
        return None
    return json.dumps([a.wire() for a in attachments], separators=(",", ":"))


def usage_json(usage: TokenUsage | None) -> str | None:
    """A message's usage as its row holds it (``usage_json``): JSON text, or None."""
    return None if usage is None else json.dumps(usage.wire(), separators=(",", ":"))


class Preset(Wire):
    """A named bundle of an assistant, instructions and parameters, chosen for a chat."""

    id: Id
    name: Text = Field(min_length=1, max_length=100)
    assistant_id: Text | None = Field(default=None, min_length=1, max_length=200)
    instructions: Text = Field(default="", max_length=MAX_INSTRUCTIONS)
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    created_at: Timestamp
    updated_at: Timestamp | None = None  # filled by the server
    last_seq: int | None = None  # filled by the server


# The id of an account's one ``Settings`` row (any other is refused).
SETTINGS_ID = "00000000-0000-7000-8000-000000000000"


class Settings(Wire):
    """What an account sets for all its chats: its layer of instructions, and the preset a new
    chat takes."""

    id: Id
    instructions: Text = Field(default="", max_length=MAX_INSTRUCTIONS)
    default_preset_id: Id | None = None
    created_at: Timestamp
    updated_at: Timestamp | None = None  # filled by the server
    last_seq: int | None = None  # filled by the server


# --- Event payloads that are not whole entities ------------------------------------------------


class ChatRef(Wire):
    id: Id


class MessageRef(Wire):
    id: Id
    chat_id: Id


class RunRequest(Wire):
    run_id: Id
    chat_id: Id
    parent_id: Id | None = None
    message_id: Id
    assistant_id: Text = Field(min_length=1, max_length=200)
    # The preset the answer is given under, and an explicit system message used as it is
    # (Regenerate and Retry pass the earlier answer's). Left out of the JSON when null.
    preset_id: Id | None = Field(default=None, exclude_if=_absent)
    instructions: Text | None = Field(default=None, max_length=MAX_SYSTEM_MESSAGE, exclude_if=_absent)


class RunCancel(Wire):
    run_id: Id
    message_id: Id


class RunContinue(Wire):
    """Continue an ended reply: a new run that appends to its text."""

    run_id: Id
    chat_id: Id
    message_id: Id
    assistant_id: Text = Field(min_length=1, max_length=200)


class PresetRef(Wire):
    id: Id


class QueuedSend(Wire):
    """The queued user message ``message_id`` is sent now, following ``parent_id``, and (with a
    ``run_id``) answered by a run whose reply is ``reply_id``. The optional fields are left out of
    the JSON when null."""

    message_id: Id
    chat_id: Id
    parent_id: Id | None = None
    run_id: Id | None = Field(default=None, exclude_if=_absent)
    reply_id: Id | None = Field(default=None, exclude_if=_absent)
    assistant_id: Text | None = Field(default=None, min_length=1, max_length=200, exclude_if=_absent)
    preset_id: Id | None = Field(default=None, exclude_if=_absent)

    @model_validator(mode="after")
    def _a_run_has_a_reply_and_an_assistant(self) -> QueuedSend:
        if (self.run_id is None) != (self.reply_id is None):
            raise ValueError("runId and replyId come together (a run writes a reply)")
        if self.run_id is not None and self.assistant_id is None:
            raise ValueError("a run needs an assistantId")
        return self


class EventType(StrEnum):
    CHAT_CREATED = "ChatCreated"
    CHAT_UPDATED = "ChatUpdated"
    CHAT_DELETED = "ChatDeleted"
    MESSAGE_APPENDED = "MessageAppended"
    MESSAGE_EDITED = "MessageEdited"
    MESSAGE_DELETED = "MessageDeleted"
    TOOL_CALL_REQUESTED = "ToolCallRequested"
    TOOL_CALL_SUCCEEDED = "ToolCallSucceeded"
    TOOL_CALL_FAILED = "ToolCallFailed"
    ASSISTANT_RUN_REQUESTED = "AssistantRunRequested"
    ASSISTANT_RUN_CANCELLED = "AssistantRunCancelled"
    SETTINGS_UPDATED = "SettingsUpdated"
    PRESET_CREATED = "PresetCreated"
    PRESET_UPDATED = "PresetUpdated"
    PRESET_DELETED = "PresetDeleted"
    ASSISTANT_RUN_CONTINUED = "AssistantRunContinued"
    QUEUED_MESSAGE_SENT = "QueuedMessageSent"


PAYLOAD_MODELS: dict[EventType, type[Wire]] = {
    EventType.CHAT_CREATED: Chat,
    EventType.CHAT_UPDATED: Chat,
    EventType.CHAT_DELETED: ChatRef,
    EventType.MESSAGE_APPENDED: Message,
    EventType.MESSAGE_EDITED: Message,
    EventType.MESSAGE_DELETED: MessageRef,
    EventType.TOOL_CALL_REQUESTED: Message,
    EventType.TOOL_CALL_SUCCEEDED: Message,
    EventType.TOOL_CALL_FAILED: Message,
    EventType.ASSISTANT_RUN_REQUESTED: RunRequest,
    EventType.ASSISTANT_RUN_CANCELLED: RunCancel,
    EventType.SETTINGS_UPDATED: Settings,
    EventType.PRESET_CREATED: Preset,
    EventType.PRESET_UPDATED: Preset,
    EventType.PRESET_DELETED: PresetRef,
    EventType.ASSISTANT_RUN_CONTINUED: RunContinue,
    EventType.QUEUED_MESSAGE_SENT: QueuedSend,
}

# The role a tool event's message must have; other message events may carry any role.
REQUIRED_ROLE: dict[EventType, Role] = {
    EventType.TOOL_CALL_REQUESTED: "tool_call",
    EventType.TOOL_CALL_SUCCEEDED: "tool_result",
    EventType.TOOL_CALL_FAILED: "error",
}

Payload = Chat | Message | ChatRef | MessageRef | RunRequest | RunCancel | Settings | Preset | PresetRef | RunContinue | QueuedSend


class DomainEvent(Wire):
    """What a client submits. ``payload`` is parsed into the model its ``type`` names."""

    event_id: Id
    type: EventType
    payload: Payload
    created_at: Timestamp

    @model_validator(mode="before")
    @classmethod
    def _parse_payload(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = data.get("type")
        payload = data.get("payload")
        model = PAYLOAD_MODELS.get(kind) if isinstance(kind, str) else None  # type: ignore[call-overload]
        if model is not None and type(payload) is model:
            return data  # already the type's model
        if isinstance(payload, Wire):  # a model of another kind: validate its fields as this kind's
            payload = payload.model_dump(by_alias=True)
        if kind in PAYLOAD_MODELS.keys() and isinstance(payload, dict):
            model = PAYLOAD_MODELS[EventType(kind)]
            data = {**data, "payload": model.model_validate(payload)}
        return data

    @model_validator(mode="after")
    def _check_role(self) -> DomainEvent:
        role = REQUIRED_ROLE.get(self.type)
        if role is not None and isinstance(self.payload, Message) and self.payload.role != role:
            raise ValueError(f"a {self.type} event carries a message with role {role!r}")
        return self

    def entity_id(self) -> str:
        """The id of the row this event changes (the message for run events; the queued message
        for ``QueuedMessageSent``)."""
        payload = self.payload
        if isinstance(payload, (RunRequest, RunCancel, RunContinue, QueuedSend)):
            return payload.message_id
        return payload.id


class LoggedEvent(DomainEvent):
    """What the log holds: a DomainEvent with its seq, the server's time and the submitting device."""

    seq: int = Field(ge=1)
    origin: str


# --- Requests and responses ---------------------------------------------------------------------


class SubmitRequest(Wire):
    events: list[dict[str, Any]]  # each one is validated on its own, so a bad one is rejected alone


class EventResult(Wire):
    event_id: str
    status: Literal["accepted", "duplicate", "rejected"]
    seq: int | None = None
    error: str | None = None

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SubmitResponse(Wire):
    results: list[EventResult]
    current_seq: int

    def wire(self) -> dict[str, Any]:
        return {"results": [r.wire() for r in self.results], "currentSeq": self.current_seq}


class RunSummary(Wire):
    """GET /runs: how a server-side run ended, why, and what it cost."""

    run_id: str
    message_id: str
    assistant_id: str
    status: Status
    error: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    usage_reported: bool
    # The counts the model reported are its estimates (the demo model counts words), not a
    # tokenizer's. An addition to docs/protocol.md ("GET /runs"); absent (from an older server): false.
    usage_estimated: bool = False


class UpdatesResponse(Wire):
    events: list[LoggedEvent]
    has_more: bool
    current_seq: int


class Snapshot(Wire):
    chats: list[Chat]
    messages: list[Message]
    # The account's settings (none or one) and presets; absent from an older server: none.
    settings: list[Settings] = []
    presets: list[Preset] = []


class StateResponse(Wire):
    snapshot: Snapshot
    up_to_seq: int
    current_seq: int
    next_page: str | None = None
    # On the first page (no ``page``), how many rows (of every kind) the whole snapshot
    # holds, for a client's progress; null on later pages (docs/protocol.md, "GET /sync/state").
    total: int | None = None


class Credentials(Wire):
    username: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    password: Text = Field(min_length=8, max_length=1024)
    device_name: Text | None = Field(default=None, max_length=200)


class Session(Wire):
    user_id: str
    device_id: str
    token: str


# --- Live socket frames ----------------------------------------------------------------------


class EventFrame(Wire):
    type: Literal["event"] = "event"
    event: LoggedEvent


class CaughtUpFrame(Wire):
    type: Literal["caughtUp"] = "caughtUp"
    seq: int


class DeltaFrame(Wire):
    type: Literal["delta"] = "delta"
    message_id: str
    run_id: str
    offset: int
    text: str


class PingFrame(Wire):
    type: Literal["ping"] = "ping"


Frame = Annotated[EventFrame | CaughtUpFrame | DeltaFrame | PingFrame, Field(discriminator="type")]
