"""Hypothesis strategies for the wire models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from hypothesis import strategies as st

from shared.models import (
    MAX_INSTRUCTIONS,
    SETTINGS_ID,
    Attachment,
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
    TokenUsage,
    format_time,
)

T = TypeVar("T")

ids = st.uuids().map(str)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(format_time)
# Any text the wire can carry: no NUL (PostgreSQL cannot store it; the models refuse it) and no
# lone surrogates (not encodable as UTF-8).
characters = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
text = st.text(characters, max_size=200)
seqs = st.integers(min_value=1, max_value=2**53)

def model(cls: type[T], **fields: st.SearchStrategy[object]) -> st.SearchStrategy[T]:
    """Like st.builds, but never guesses the fields it was not given (pydantic's signature
    uses the camelCase aliases, which st.builds would fill in with arbitrary values)."""
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


# Instructions as people write them: none, blank, whitespace, one line or several.
instructions = st.sampled_from(["", " ", "\n\t \n", "Answer in French.", "Be brief.\n\nUse lists.", "x" * MAX_INSTRUCTIONS]) | st.text(
    characters, max_size=60
)
chats = model(
    Chat,
    id=ids,
    title=st.text(characters, max_size=100),
    created_at=times,
    instructions=st.none() | instructions,
    preset_id=st.none() | ids,
)
usages = model(
    TokenUsage,
    prompt_tokens=st.integers(0, 2**53 - 1),
    completion_tokens=st.integers(0, 2**53 - 1),
    estimated=st.booleans(),
)
presets = model(
    Preset,
    id=ids,
    name=st.text(characters, min_size=1, max_size=100),
    assistant_id=st.none() | st.text(characters, min_size=1, max_size=20),
    instructions=instructions,
    temperature=st.none() | st.floats(0, 2, allow_nan=False) | st.sampled_from([0.0, 0.7, 1.0, 2.0]),
    max_tokens=st.none() | st.integers(1, 1_000_000),
    created_at=times,
)
settings = model(Settings, id=st.just(SETTINGS_ID), instructions=instructions, default_preset_id=st.none() | ids, created_at=times)


# (Cheap to draw: the strategies of messages are drawn by the thousand.)
attachments = model(
    Attachment,
    sha256=st.sampled_from([f"{i:02x}" * 32 for i in (0, 1, 0xAB, 0xFF)]),
    name=st.sampled_from(["cat.png", "notes.txt", "Bericht über “X”.pdf", "a"]),
    mime=st.sampled_from(["image/png", "image/jpeg", "text/plain", "application/pdf", ""]),
    size=st.sampled_from([0, 1, 20 * 1024 * 1024, 2**53 - 1]),
    width=st.none() | st.just(640),
    height=st.none() | st.just(480),
)


def messages(role: str | None = None) -> st.SearchStrategy[Message]:
    return model(
        Message,
        id=ids,
        chat_id=ids,
        role=st.just(role) if role else st.sampled_from(["user", "assistant", "tool_call", "tool_result", "error"]),
        content=text,
        attachments=st.just(()) | st.lists(attachments, min_size=1, max_size=2).map(tuple),
        parent_id=st.none() | ids,
        status=st.sampled_from(["completed", "queued", "streaming", "failed_upstream", "cancelled"]),
        assistant_id=st.none() | st.text(characters, min_size=1, max_size=20),
        run_id=st.none() | ids,
        created_at=times,
        preset_id=st.none() | ids,
        instructions=st.none() | instructions,
        finish_reason=st.none() | st.sampled_from(["stop", "length", "cancelled", "failed"]),
        usage=st.none() | usages,
    )


@st.composite
def queued_sends(draw: st.DrawFn) -> QueuedSend:
    run = draw(st.none() | ids)
    return QueuedSend(
        message_id=draw(ids),
        chat_id=draw(ids),
        parent_id=draw(st.none() | ids),
        run_id=run,
        reply_id=None if run is None else draw(ids),
        assistant_id=draw(st.text(characters, min_size=1, max_size=20) if run else st.none() | st.text(characters, min_size=1, max_size=20)),
        preset_id=draw(st.none() | ids),
    )


PAYLOADS: dict[EventType, st.SearchStrategy[object]] = {
    EventType.CHAT_CREATED: chats,
    EventType.CHAT_UPDATED: chats,
    EventType.CHAT_DELETED: model(ChatRef, id=ids),
    EventType.MESSAGE_APPENDED: messages(),
    EventType.MESSAGE_EDITED: messages(),
    EventType.MESSAGE_DELETED: model(MessageRef, id=ids, chat_id=ids),
    EventType.TOOL_CALL_REQUESTED: messages("tool_call"),
    EventType.TOOL_CALL_SUCCEEDED: messages("tool_result"),
    EventType.TOOL_CALL_FAILED: messages("error"),
    EventType.ASSISTANT_RUN_REQUESTED: model(
        RunRequest,
        run_id=ids,
        chat_id=ids,
        parent_id=st.none() | ids,
        message_id=ids,
        assistant_id=st.text(characters, min_size=1, max_size=20),
        preset_id=st.none() | ids,
        instructions=st.none() | instructions,
    ),
    EventType.ASSISTANT_RUN_CANCELLED: model(RunCancel, run_id=ids, message_id=ids),
    EventType.SETTINGS_UPDATED: settings,
    EventType.PRESET_CREATED: presets,
    EventType.PRESET_UPDATED: presets,
    EventType.PRESET_DELETED: model(PresetRef, id=ids),
    EventType.ASSISTANT_RUN_CONTINUED: model(
        RunContinue, run_id=ids, chat_id=ids, message_id=ids, assistant_id=st.text(characters, min_size=1, max_size=20)
    ),
    EventType.QUEUED_MESSAGE_SENT: queued_sends(),
}


@st.composite
def domain_events(draw: st.DrawFn) -> DomainEvent:
    kind = draw(st.sampled_from(list(EventType)))
    return DomainEvent(event_id=draw(ids), type=kind, payload=draw(PAYLOADS[kind]), created_at=draw(times))


@st.composite
def logged_events(draw: st.DrawFn) -> LoggedEvent:
    event = draw(domain_events())
    return LoggedEvent(
        **dict(event), seq=draw(seqs), origin=draw(ids)
    )
