from __future__ import annotations

import json

import pytest
from hypothesis import given
from pydantic import ValidationError

from shared.models import (
    MAX_INSTRUCTIONS,
    MAX_SYSTEM_MESSAGE,
    SETTINGS_ID,
    Chat,
    DomainEvent,
    LoggedEvent,
    Message,
    Preset,
    QueuedSend,
    RunRequest,
    Settings,
    Snapshot,
    StateResponse,
    TokenUsage,
)
from tests.shared.strategies import chats, domain_events, logged_events, messages, presets, settings
from tests.shared.vectors import CHAT, MSG, PARENT, RUN, T0, VECTORS


@given(domain_events())
def test_domain_events_round_trip_through_json(event: DomainEvent) -> None:
    wire = json.loads(json.dumps(event.wire()))
    assert DomainEvent.model_validate(wire) == event
    assert type(DomainEvent.model_validate(wire).payload) is type(event.payload)


@given(logged_events())
def test_logged_events_round_trip_through_json(event: LoggedEvent) -> None:
    assert LoggedEvent.model_validate_json(json.dumps(event.wire())) == event


@given(chats, messages(), settings, presets)
def test_entities_are_camel_case_on_the_wire(chat: Chat, message: Message, account: Settings, preset: Preset) -> None:
    snapshot = Snapshot(chats=[chat], messages=[message], settings=[account], presets=[preset])
    wire = snapshot.wire()
    # (each newer field only when it has a value: the JSON of a message without is as it always was)
    optional = {"attachments": message.attachments, "presetId": message.preset_id, "instructions": message.instructions,
                "finishReason": message.finish_reason, "usage": message.usage}  # fmt: skip
    assert set(wire["messages"][0]) == {
        "id", "chatId", "role", "content", "parentId", "status", "assistantId", "runId",
        "createdAt", "updatedAt", "lastSeq",
    } | {name for name, value in optional.items() if value not in (None, ())}
    if message.usage is not None:
        assert set(wire["messages"][0]["usage"]) == {"promptTokens", "completionTokens", "estimated"}
    for attachment in wire["messages"][0].get("attachments", []):
        assert {"sha256", "name", "mime", "size"} <= set(attachment) <= {"sha256", "name", "mime", "size", "width", "height"}
    assert set(wire["chats"][0]) == {"id", "title", "createdAt", "updatedAt", "lastSeq"} | (
        {"instructions"} if chat.instructions is not None else set()
    ) | ({"presetId"} if chat.preset_id is not None else set())
    assert set(wire["settings"][0]) == {"id", "instructions", "defaultPresetId", "createdAt", "updatedAt", "lastSeq"}
    assert set(wire["presets"][0]) == {
        "id", "name", "assistantId", "instructions", "temperature", "maxTokens", "createdAt", "updatedAt", "lastSeq",
    }  # fmt: skip
    assert Snapshot.model_validate(wire) == snapshot
    assert Snapshot.model_validate_json(json.dumps(wire)) == snapshot


# JSON as it was before instructions, presets, Continue and queued follow-ups: it reads as it
# did, and is written back byte for byte (an older client and an older event are unaffected).
OLD_JSON = [
    (Chat, f'{{"id":"{CHAT}","title":"Trip","createdAt":"{T0}","updatedAt":"{T0}","lastSeq":3}}'),
    (
        Message,
        f'{{"id":"{MSG}","chatId":"{CHAT}","role":"assistant","content":"Hi","parentId":"{PARENT}","status":"completed",'
        f'"assistantId":"demo","runId":"{RUN}","createdAt":"{T0}","updatedAt":"{T0}","lastSeq":4}}',
    ),
    (RunRequest, f'{{"runId":"{RUN}","chatId":"{CHAT}","parentId":"{PARENT}","messageId":"{MSG}","assistantId":"demo"}}'),
    (StateResponse, '{"snapshot":{"chats":[],"messages":[]},"upToSeq":0,"currentSeq":0,"nextPage":null,"total":0}'),
]


@pytest.mark.parametrize(("model", "raw"), OLD_JSON)
def test_json_from_before_reads_and_round_trips_byte_for_byte(model: type[Chat], raw: str) -> None:
    parsed = model.model_validate_json(raw)
    if model is StateResponse:  # (the new lists are always said, an older client ignores them)
        assert parsed.model_dump_json(by_alias=True) == raw.replace('"messages":[]', '"messages":[],"settings":[],"presets":[]')
    else:
        assert parsed.model_dump_json(by_alias=True) == raw


def test_a_row_from_before_the_new_columns_reads() -> None:
    """A row read back as it was (no new columns), and one with them all NULL, are the same message."""
    row = {"id": MSG, "chat_id": CHAT, "role": "user", "content": "x", "parent_id": None, "status": "completed",
           "assistant_id": None, "run_id": None, "created_at": T0, "updated_at": T0, "last_seq": 1, "attachments_json": None}  # fmt: skip
    nulls = {"preset_id": None, "instructions": None, "finish_reason": None, "usage_json": None}
    assert Message.model_validate(row) == Message.model_validate({**row, **nulls})
    usage = Message.model_validate({**row, "usage_json": '{"promptTokens":3,"completionTokens":5,"estimated":true}'})
    assert usage.usage == TokenUsage(prompt_tokens=3, completion_tokens=5, estimated=True)
    assert usage.usage_json == '{"promptTokens":3,"completionTokens":5,"estimated":true}'
    chat = {"id": CHAT, "title": "t", "created_at": T0, "updated_at": T0, "last_seq": 1}
    assert Chat.model_validate(chat) == Chat.model_validate({**chat, "instructions": None, "preset_id": None})


@pytest.mark.parametrize(
    ("model", "fields", "complaint"),
    [
        (Chat, {"instructions": "x" * (MAX_INSTRUCTIONS + 1)}, "instructions"),
        (Preset, {"name": ""}, "name"),
        (Preset, {"name": "x" * 101}, "name"),
        (Preset, {"temperature": 2.5}, "temperature"),
        (Preset, {"temperature": float("nan")}, "temperature"),
        (Preset, {"maxTokens": 0}, "maxTokens"),
        (Preset, {"maxTokens": 1_000_001}, "maxTokens"),
        (Preset, {"instructions": "x" * (MAX_INSTRUCTIONS + 1)}, "instructions"),
        (Settings, {"instructions": "a\x00b"}, "NUL"),
        (Message, {"finishReason": "tired"}, "finishReason"),
        (Message, {"instructions": "x" * (MAX_SYSTEM_MESSAGE + 1)}, "instructions"),
        (Message, {"usage": {"promptTokens": -1, "completionTokens": 0}}, "promptTokens"),
        (QueuedSend, {"runId": RUN}, "replyId"),
        (QueuedSend, {"replyId": RUN}, "replyId"),
        (QueuedSend, {"runId": RUN, "replyId": MSG}, "assistantId"),
    ],
)
def test_the_new_shapes_are_checked(model: type[Chat], fields: dict[str, object], complaint: str) -> None:
    base: dict[str, dict[str, object]] = {
        "Chat": {"id": CHAT, "title": "t", "createdAt": T0},
        "Preset": {"id": CHAT, "name": "Terse", "createdAt": T0},
        "Settings": {"id": SETTINGS_ID, "createdAt": T0},
        "Message": {"id": MSG, "chatId": CHAT, "role": "assistant", "content": "", "createdAt": T0},
        "QueuedSend": {"messageId": MSG, "chatId": CHAT, "parentId": PARENT},
    }
    model.model_validate(base[model.__name__])  # (the base is good)
    with pytest.raises(ValidationError, match=complaint):
        model.model_validate({**base[model.__name__], **fields})


def test_a_queued_follow_up_is_a_user_message_with_status_queued() -> None:
    message = Message(id=MSG, chat_id=CHAT, role="user", content="and then?", status="queued", created_at=T0)
    assert message.is_queued_follow_up
    assert not message.model_copy(update={"status": "completed"}).is_queued_follow_up
    assert not message.model_copy(update={"role": "assistant"}).is_queued_follow_up


def test_times_are_normalized_to_utc_milliseconds() -> None:
    message = Message(id=MSG, chat_id=CHAT, role="user", content="", created_at="2026-11-30T13:00:00.5+01:00")
    assert message.created_at == "2026-11-30T12:00:00.500Z"


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"eventId": "not-a-uuid"}, "eventId"),
        ({"type": "ChatExploded"}, "type"),
        ({"createdAt": "yesterday"}, "createdAt"),
        ({"createdAt": "2026-11-30T12:00:00"}, "timezone"),
        ({"payload": {"id": CHAT}}, "title"),  # a ChatCreated needs the whole chat
    ],
)
def test_malformed_events_are_refused_with_a_reason(change: dict[str, object], complaint: str) -> None:
    raw = {**VECTORS[0], **change}
    with pytest.raises(ValidationError, match=complaint):
        DomainEvent.model_validate(raw)


def test_a_tool_event_must_carry_its_role() -> None:
    raw = next(v for v in VECTORS if v["type"] == "ToolCallSucceeded")
    bad = {**raw, "payload": {**raw["payload"], "role": "user"}}
    with pytest.raises(ValidationError, match="role 'tool_result'"):
        DomainEvent.model_validate(bad)


def test_times_must_be_times() -> None:
    with pytest.raises(ValidationError):
        Message(id=MSG, chat_id=CHAT, role="user", content="", created_at=T0 + "x")


def test_a_payload_model_of_the_wrong_kind_is_refused() -> None:
    from shared.models import Chat, EventType

    chat = Chat(id=CHAT, title="t", created_at=T0)
    with pytest.raises(ValidationError):
        DomainEvent(event_id=CHAT, type=EventType.MESSAGE_APPENDED, payload=chat, created_at=T0)


def test_text_with_nul_characters_is_refused() -> None:
    # PostgreSQL cannot store NUL in text; found by the store's property test.
    with pytest.raises(ValidationError, match="NUL"):
        Message(id=MSG, chat_id=CHAT, role="user", content="a\x00b", created_at=T0)
