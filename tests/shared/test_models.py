from __future__ import annotations

import json

import pytest
from hypothesis import given
from pydantic import ValidationError

from shared.models import DomainEvent, LoggedEvent, Message, Snapshot
from tests.shared.strategies import chats, domain_events, logged_events, messages
from tests.shared.vectors import CHAT, MSG, T0, VECTORS


@given(domain_events())
def test_domain_events_round_trip_through_json(event: DomainEvent) -> None:
    wire = json.loads(json.dumps(event.wire()))
    assert DomainEvent.model_validate(wire) == event
    assert type(DomainEvent.model_validate(wire).payload) is type(event.payload)


@given(logged_events())
def test_logged_events_round_trip_through_json(event: LoggedEvent) -> None:
    assert LoggedEvent.model_validate_json(json.dumps(event.wire())) == event


@given(chats, messages())
def test_entities_are_camel_case_on_the_wire(chat: object, message: Message) -> None:
    snapshot = Snapshot(chats=[chat], messages=[message])  # type: ignore[list-item]
    wire = snapshot.wire()
    # (``attachments`` only when there are some: the JSON of one without is as it always was)
    assert set(wire["messages"][0]) == {
        "id", "chatId", "role", "content", "parentId", "status", "assistantId", "runId",
        "createdAt", "updatedAt", "lastSeq",
    } | ({"attachments"} if message.attachments else set())
    for attachment in wire["messages"][0].get("attachments", []):
        assert {"sha256", "name", "mime", "size"} <= set(attachment) <= {"sha256", "name", "mime", "size", "width", "height"}
    assert Snapshot.model_validate(wire) == snapshot


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
