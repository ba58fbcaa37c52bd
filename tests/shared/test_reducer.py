from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from pydantic import ValidationError

from shared.models import MAX_ATTACHMENTS, Attachment, DomainEvent, LoggedEvent, Message
from shared.reducer import PENDING_SEQ, Delete, DeleteChildren, Patch, Upsert, apply, mutations
from shared.schema import CHATS, MESSAGES, Sql
from tests.shared.vectors import CHAT, MSG, PARENT, RUN, T0, T1, VECTORS


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
}


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (
            "ChatCreated",
            [Upsert("chats", {"id": CHAT, "title": "Trip planning", "created_at": T0, "updated_at": T1, "last_seq": 1})],
        ),
        (
            # The client's lastSeq and updatedAt are ignored: the server's take their place.
            "ChatUpdated",
            [Upsert("chats", {"id": CHAT, "title": "Renamed", "created_at": T0, "updated_at": T1, "last_seq": 2})],
        ),
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
    ],
)
def test_every_event_type_has_its_mutations(kind: str, expected: list[object]) -> None:
    assert apply(by_type(kind)) == expected


def test_a_pending_event_marks_its_rows_pending() -> None:
    [upsert] = apply(by_type("MessageAppended", logged=False))
    assert isinstance(upsert, Upsert)
    assert upsert.row["last_seq"] == PENDING_SEQ
    assert upsert.row["updated_at"] == T1  # the client's own time until the server's arrives


def test_vectors_cover_every_event_type() -> None:
    from shared.models import EventType

    assert {v["type"] for v in VECTORS if "seq" in v} == {t.value for t in EventType}


def _table(conn: sqlite3.Connection, name: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT * FROM {name} ORDER BY id").fetchall()


@pytest.mark.parametrize("scoped", [True, False])
def test_mutations_run_on_sqlite_and_do_what_they_say(scoped: bool) -> None:
    sql = Sql("sqlite", scoped=scoped)
    conn = sqlite3.connect(":memory:")
    for table in (CHATS, MESSAGES):
        for statement in sql.create(table):
            conn.execute(statement)
    account = "account-1" if scoped else None

    def run(kind: str) -> None:
        for mutation in apply(by_type(kind)):
            conn.execute(*sql.mutation(mutation, account))

    run("ChatCreated")
    run("ChatUpdated")
    assert [r[-4:] for r in _table(conn, "chats")] == [("Renamed", T0, T1, 2)]
    run("MessageAppended")
    run("MessageEdited")
    assert [r[-9:-8] for r in _table(conn, "messages")] == [("Edited",)]
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
