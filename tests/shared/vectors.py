"""Test vectors: one logged event of every type (and pending, unlogged ones), as wire JSON.

Used by the reducer's unit tests and by the Pyodide parity test, which runs ``DESCRIBE`` on these
vectors under CPython and under Pyodide and compares the results.
"""

from __future__ import annotations

from typing import Any

CHAT = "01937a4e-0000-7000-8000-00000000c001"
MSG = "01937a4e-0000-7000-8000-00000000a001"
PARENT = "01937a4e-0000-7000-8000-00000000a000"
RUN = "01937a4e-0000-7000-8000-00000000b001"
RUN2 = "01937a4e-0000-7000-8000-00000000b002"
REPLY = "01937a4e-0000-7000-8000-00000000a002"
PRESET = "01937a4e-0000-7000-8000-00000000d001"
SETTINGS = "00000000-0000-7000-8000-000000000000"
T0 = "2026-11-30T12:00:00.123Z"
T1 = "2026-11-30T12:00:05.000Z"


def _event(n: int, kind: str, payload: dict[str, Any], seq: int | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "eventId": f"01937a4e-0000-7000-8000-{n:012d}",
        "type": kind,
        "payload": payload,
        "createdAt": T1,
    }
    if seq is not None:
        event |= {"seq": seq, "origin": "device-1"}
    return event


def _message(role: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": MSG,
        "chatId": CHAT,
        "role": role,
        "content": "Hello, «world» ✓",
        "parentId": PARENT,
        "status": "completed",
        "assistantId": None,
        "runId": None,
        "createdAt": T0,
        **extra,
    }


CHAT_PAYLOAD = {"id": CHAT, "title": "Trip planning", "createdAt": T0}
PRESET_PAYLOAD = {
    "id": PRESET,
    "name": "Terse",
    "assistantId": "demo",
    "instructions": "Answer in one sentence.",
    "temperature": 0.2,
    "maxTokens": 300,
    "createdAt": T0,
}

VECTORS: list[dict[str, Any]] = [
    _event(1, "ChatCreated", CHAT_PAYLOAD, 1),
    _event(2, "ChatUpdated", {**CHAT_PAYLOAD, "title": "Renamed", "lastSeq": 99, "updatedAt": T0}, 2),
    _event(3, "ChatDeleted", {"id": CHAT}, 3),
    _event(4, "MessageAppended", _message("user"), 4),
    _event(5, "MessageEdited", _message("user", content="Edited"), 5),
    _event(6, "MessageDeleted", {"id": MSG, "chatId": CHAT}, 6),
    _event(7, "ToolCallRequested", _message("tool_call", content='{"tool": "calc"}'), 7),
    _event(8, "ToolCallSucceeded", _message("tool_result", content="42"), 8),
    _event(9, "ToolCallFailed", _message("error", content="division by zero"), 9),
    _event(
        10,
        "AssistantRunRequested",
        {"runId": RUN, "chatId": CHAT, "parentId": PARENT, "messageId": MSG, "assistantId": "demo"},
        10,
    ),
    _event(11, "AssistantRunCancelled", {"runId": RUN, "messageId": MSG}, 11),
    _event(
        14,
        "SettingsUpdated",
        {"id": SETTINGS, "instructions": "I am a nurse.\nUse metric units.", "defaultPresetId": PRESET, "createdAt": T0},
        14,
    ),
    _event(15, "PresetCreated", PRESET_PAYLOAD, 15),
    _event(16, "PresetUpdated", {**PRESET_PAYLOAD, "name": "Very terse", "temperature": None, "maxTokens": None}, 16),
    _event(17, "PresetDeleted", {"id": PRESET}, 17),
    _event(18, "AssistantRunContinued", {"runId": RUN2, "chatId": CHAT, "messageId": MSG, "assistantId": "demo"}, 18),
    _event(
        19,
        "QueuedMessageSent",
        {"messageId": MSG, "chatId": CHAT, "parentId": PARENT, "runId": RUN2, "replyId": REPLY, "assistantId": "demo",
         "presetId": PRESET},
        19,
    ),  # fmt: skip
    # A chat and a reply with everything the newer fields hold.
    _event(20, "ChatUpdated", {**CHAT_PAYLOAD, "instructions": "Plan for two.", "presetId": PRESET}, 20),
    _event(
        21,
        "MessageEdited",
        _message(
            "assistant", status="completed", runId=RUN, assistantId="demo", presetId=PRESET,
            instructions="I am a nurse.\n\nPlan for two.", finishReason="length",
            usage={"promptTokens": 12, "completionTokens": 300, "estimated": True},
        ),
        21,
    ),  # fmt: skip
    _event(
        22,
        "AssistantRunRequested",
        {"runId": RUN, "chatId": CHAT, "parentId": PARENT, "messageId": MSG, "assistantId": "demo", "presetId": PRESET,
         "instructions": "Exactly this."},
        22,
    ),  # fmt: skip
    # Not yet logged: a client's optimistic application.
    _event(12, "MessageAppended", _message("user"), None),
    _event(13, "AssistantRunCancelled", {"runId": RUN, "messageId": MSG}, None),
    _event(23, "MessageAppended", _message("user", status="queued", presetId=PRESET), None),
    _event(24, "QueuedMessageSent", {"messageId": MSG, "chatId": CHAT, "parentId": PARENT}, None),
]

# Runs as-is under CPython and under Pyodide: what an event turns into, end to end.
DESCRIBE = '''
import dataclasses, json
from shared.models import Chat, DomainEvent, LoggedEvent, Message, Preset, Settings
from shared.reducer import Upsert, apply
from shared.schema import Sql

ENTITIES = {"chats": Chat, "messages": Message, "presets": Preset, "settings": Settings}

def describe(raw):
    event = LoggedEvent.model_validate(raw) if "seq" in raw else DomainEvent.model_validate(raw)
    mutations = apply(event)
    sql = [
        Sql(dialect, scoped).mutation(m, "account-1" if scoped else None)
        for m in mutations for dialect in ("sqlite", "postgres") for scoped in (True, False)
    ]
    return {
        "wire": event.wire(),
        "mutations": [[type(m).__name__, dataclasses.asdict(m)] for m in mutations],
        "sql": [[s, list(p)] for s, p in sql],
        # each row written, read back as its entity (a message's JSON columns parsed again)
        "rows": [ENTITIES[m.table].model_validate(m.row).wire() for m in mutations if isinstance(m, Upsert)],
    }
'''
