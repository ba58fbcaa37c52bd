from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from pydantic import ValidationError

from shared.models import MAX_ATTACHMENTS, Attachment, DomainEvent, LoggedEvent, Message
from shared.reducer import PENDING_SEQ, Delete, DeleteChildren, Patch, Upsert, apply, mutations
from shared.schema import MESSAGES, TABLES, Sql
from tests.shared.vectors import CHAT, MSG, PARENT, PRESET, REPLY, RUN, RUN2, SETTINGS, T0, T1, VECTORS


def parse(raw: dict[str, Any]) -> DomainEvent:
    return LoggedEvent.model_validate(raw) if "seq" in raw else DomainEvent.model_validate(raw)


def by_type(kind: str, logged: bool = True) -> DomainEvent:
    return parse(next(v for v in VECTORS if v["type"] == kind and ("seq" in v) == logged))


MESSAGE_ROW = {
    "id": MSG,
    "chat_id": CHAT,
    "parent_id": PARENT,
    "status": "completed",
    "assistant_id": None,
    "run_id": None,
    "created_at": T0,
    "updated_at": T1,
    "attachments_json": None,
    "preset_id": None,
    "instructions": None,
    "finish_reason": None,
    "usage_json": None,
}
CHAT_ROW = {"id": CHAT, "title": "Trip planning", "created_at": T0, "updated_at": T1, "instructions": None, "preset_id": None}
PRESET_ROW = {
    "id": PRESET, "name": "Terse", "assistant_id": "demo", "instructions": "Answer in one sentence.", "temperature": 0.2,
    "max_tokens": 300, "created_at": T0, "updated_at": T1,
}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("ChatCreated", [Upsert("chats", {**CHAT_ROW, "last_seq": 1})]),
        # The client's lastSeq and updatedAt are ignored: the server's take their place.
        ("ChatUpdated", [Upsert("chats", {**CHAT_ROW, "title": "Renamed", "last_seq": 2})]),
        ("ChatDeleted", [DeleteChildren("messages", "chat_id", CHAT), Delete("chats", CHAT)]),
        (
            "MessageAppended",
            [Upsert("messages", {**MESSAGE_ROW, "role": "user", "content": "Hello, «world» ✓", "last_seq": 4})],
        ),
        (
            "MessageEdited",
            [Upsert("messages", {**MESSAGE_ROW, "role": "user", "content": "Edited", "last_seq": 5})],
        ),
        ("MessageDeleted", [Delete("messages", MSG)]),
        (
            "ToolCallRequested",
            [Upsert("messages", {**MESSAGE_ROW, "role": "tool_call", "content": '{"tool": "calc"}', "last_seq": 7})],
        ),
        (
            "ToolCallSucceeded",
            [Upsert("messages", {**MESSAGE_ROW, "role": "tool_result", "content": "42", "last_seq": 8})],
        ),
        (
            "ToolCallFailed",
            [Upsert("messages", {**MESSAGE_ROW, "role": "error", "content": "division by zero", "last_seq": 9})],
        ),
        (
            "AssistantRunRequested",
            [
                Upsert(
                    "messages",
                    {
                        **MESSAGE_ROW,
                        "role": "assistant",
                        "content": "",
                        "status": "queued",
                        "assistant_id": "demo",
                        "run_id": RUN,
                        "created_at": T1,
                        "last_seq": 10,
                    },
                )
            ],
        ),
        (
            "AssistantRunCancelled",
            [
                Patch(
                    "messages",
                    MSG,
                    {"status": "cancelled", "updated_at": T1, "last_seq": 11},
                    ("queued", "streaming"),
                )
            ],
        ),
        (
            "SettingsUpdated",
            [
                Upsert(
                    "settings",
                    {"id": SETTINGS, "instructions": "I am a nurse.\nUse metric units.", "default_preset_id": PRESET,
                     "created_at": T0, "updated_at": T1, "last_seq": 14},
                )
            ],
        ),  # fmt: skip
        ("PresetCreated", [Upsert("presets", {**PRESET_ROW, "last_seq": 15})]),
        (
            "PresetUpdated",
            [Upsert("presets", {**PRESET_ROW, "name": "Very terse", "temperature": None, "max_tokens": None, "last_seq": 16})],
        ),
        ("PresetDeleted", [Delete("presets", PRESET)]),
        (
            # The text is kept (the continuation appends to it), only an ended reply is reopened.
            "AssistantRunContinued",
            [
                Patch(
                    "messages",
                    MSG,
                    {"status": "queued", "run_id": RUN2, "finish_reason": None, "updated_at": T1, "last_seq": 18},
                    ("completed", "failed_upstream", "cancelled"),
                )
            ],
        ),
        (
            "QueuedMessageSent",
            [
                Patch("messages", MSG, {"status": "completed", "parent_id": PARENT, "updated_at": T1, "last_seq": 19}, ("queued",)),
                Upsert(
                    "messages",
                    {**MESSAGE_ROW, "id": REPLY, "role": "assistant", "content": "", "parent_id": MSG, "status": "queued",
                     "assistant_id": "demo", "run_id": RUN2, "preset_id": PRESET, "created_at": T1, "last_seq": 19},
                ),
            ],
        ),  # fmt: skip
    ],
)
def test_every_event_type_has_its_mutations(kind: str, expected: list[object]) -> None:
    assert apply(by_type(kind)) == expected


def test_the_newer_fields_of_chats_and_messages_are_columns() -> None:
    [chat] = apply(next(parse(v) for v in VECTORS if v["eventId"].endswith("20")))
    assert chat == Upsert("chats", {**CHAT_ROW, "instructions": "Plan for two.", "preset_id": PRESET, "last_seq": 20})
    [reply] = apply(next(parse(v) for v in VECTORS if v["eventId"].endswith("21")))
    assert isinstance(reply, Upsert) and "usage" not in reply.row
    assert reply.row == {
        **MESSAGE_ROW, "role": "assistant", "content": "Hello, «world» ✓", "assistant_id": "demo", "run_id": RUN,
        "preset_id": PRESET, "instructions": "I am a nurse.\n\nPlan for two.", "finish_reason": "length",
        "usage_json": '{"promptTokens":12,"completionTokens":300,"estimated":true}', "last_seq": 21,
    }  # fmt: skip
    # A request's preset and explicit system message are on its reply from the start.
    [queued] = apply(next(parse(v) for v in VECTORS if v["eventId"].endswith("22")))
    assert isinstance(queued, Upsert)
    assert (queued.row["preset_id"], queued.row["instructions"], queued.row["status"]) == (PRESET, "Exactly this.", "queued")


def test_a_queued_message_sent_without_a_run_creates_no_reply() -> None:
    pending = next(parse(v) for v in VECTORS if v["type"] == "QueuedMessageSent" and "seq" not in v)
    assert apply(pending) == [
        Patch("messages", MSG, {"status": "completed", "parent_id": PARENT, "updated_at": T1, "last_seq": PENDING_SEQ}, ("queued",))
    ]


def test_a_pending_event_marks_its_rows_pending() -> None:
    [upsert] = apply(by_type("MessageAppended", logged=False))
    assert isinstance(upsert, Upsert)
    assert upsert.row["last_seq"] == PENDING_SEQ
    assert upsert.row["updated_at"] == T1  # the client's own time until the server's arrives


def test_vectors_cover_every_event_type() -> None:
    from shared.models import EventType

    assert {v["type"] for v in VECTORS if "seq" in v} == {t.value for t in EventType}
    assert len({v["eventId"] for v in VECTORS}) == len(VECTORS)


def _table(conn: sqlite3.Connection, name: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT * FROM {name} ORDER BY id").fetchall()


@pytest.mark.parametrize("scoped", [True, False])
def test_mutations_run_on_sqlite_and_do_what_they_say(scoped: bool) -> None:
    sql = Sql("sqlite", scoped=scoped)
    conn = sqlite3.connect(":memory:")
    for table in TABLES.values():
        for statement in sql.create(table):
            conn.execute(statement)
    account = "account-1" if scoped else None

    def run(kind: str, logged: bool = True) -> None:
        for mutation in apply(by_type(kind, logged)):
            conn.execute(*sql.mutation(mutation, account))

    run("ChatCreated")
    run("ChatUpdated")
    assert conn.execute("SELECT title, created_at, updated_at, last_seq FROM chats").fetchall() == [("Renamed", T0, T1, 2)]
    run("MessageAppended")
    run("MessageEdited")
    assert conn.execute("SELECT content FROM messages").fetchall() == [("Edited",)]
    run("AssistantRunRequested")  # replaces the row: queued assistant reply
    run("AssistantRunCancelled")
    status = conn.execute("SELECT status, last_seq FROM messages").fetchall()
    assert status == [("cancelled", 11)]
    run("MessageAppended")  # a completed message...
    run("AssistantRunCancelled")  # ...is not cancelled afterwards
    assert conn.execute("SELECT status, last_seq FROM messages").fetchall() == [("completed", 4)]
    run("MessageDeleted")
    assert _table(conn, "messages") == []
    run("MessageAppended")
    run("ChatDeleted")
    assert _table(conn, "messages") == [] and _table(conn, "chats") == []

    run("SettingsUpdated")
    run("PresetCreated")
    run("PresetUpdated")
    assert conn.execute("SELECT default_preset_id, last_seq FROM settings").fetchall() == [(PRESET, 14)]
    assert conn.execute("SELECT name, temperature, max_tokens, last_seq FROM presets").fetchall() == [("Very terse", None, None, 16)]
    run("PresetDeleted")
    assert _table(conn, "presets") == []

    messages = "SELECT id, status, run_id, finish_reason, parent_id, content, last_seq FROM messages ORDER BY id"
    run("MessageEdited")  # an ended reply (status completed)...
    run("AssistantRunContinued")  # ...reopened by a new run, its text kept
    assert conn.execute(messages).fetchall() == [(MSG, "queued", RUN2, None, PARENT, "Edited", 18)]
    run("AssistantRunContinued")  # (not while it is being written)
    assert conn.execute(messages).fetchall() == [(MSG, "queued", RUN2, None, PARENT, "Edited", 18)]
    run("MessageAppended", logged=False)
    run("AssistantRunCancelled", logged=False)
    run("MessageAppended", logged=False)  # a completed user message...
    run("QueuedMessageSent")  # ...is not sent again, but its reply is made all the same
    assert conn.execute(messages).fetchall() == [
        (MSG, "completed", None, None, PARENT, "Hello, «world» ✓", 0), (REPLY, "queued", RUN2, None, MSG, "", 19)
    ]
    run("MessageAppended", logged=False)  # queued this time
    conn.execute("UPDATE messages SET status = 'queued', parent_id = NULL WHERE id = ?", (MSG,))
    run("QueuedMessageSent")
    assert conn.execute(messages).fetchall()[0] == (MSG, "completed", None, None, PARENT, "Hello, «world» ✓", 19)


def test_a_message_s_attachments_are_one_column_of_json_and_read_back() -> None:
    """The references go into ``attachments_json`` (NULL for none); the row validates back as
    the same message; the JSON of a message without any is as it was before attachments."""
    event = by_type("MessageAppended")
    assert isinstance(event.payload, Message)
    assert "attachments" not in event.payload.wire()
    picture = Attachment(sha256="ab" * 32, name="cat.png", mime="image/png", size=1234, width=64, height=48)
    text = Attachment(sha256="cd" * 32, name="notes.txt", mime="text/plain", size=9)
    message = event.payload.model_copy(update={"attachments": (picture, text)})
    wire = message.wire()
    assert wire["attachments"] == [
        {"sha256": "ab" * 32, "name": "cat.png", "mime": "image/png", "size": 1234, "width": 64, "height": 48},
        {"sha256": "cd" * 32, "name": "notes.txt", "mime": "text/plain", "size": 9},
    ]
    [upsert] = mutations(event.type, message, 4, T1)
    assert isinstance(upsert, Upsert) and "attachments" not in upsert.row
    assert json.loads(upsert.row["attachments_json"]) == wire["attachments"]
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    sql = Sql("sqlite", scoped=False)
    for statement in sql.create(MESSAGES):
        conn.execute(statement)
    conn.execute(*sql.mutation(upsert))
    row = dict(conn.execute("SELECT * FROM messages").fetchone())
    assert Message.model_validate(row) == message.model_copy(update={"updated_at": T1, "last_seq": 4})


def test_attachments_are_checked() -> None:
    good = {"sha256": "ab" * 32, "name": "a.png", "mime": "image/png", "size": 1}
    Attachment.model_validate(good)
    for bad in ({"sha256": "AB" * 32}, {"sha256": "ab" * 31}, {"name": ""}, {"size": -1}, {"name": "a\x00"}):
        with pytest.raises(ValidationError):
            Attachment.model_validate({**good, **bad})
    event = by_type("MessageAppended")
    raw = {**event.payload.wire(), "attachments": [good] * (MAX_ATTACHMENTS + 1)}
    with pytest.raises(ValidationError):
        Message.model_validate(raw)
