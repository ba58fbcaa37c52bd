"""Export and import (shared/transfer.py): the file's shape, the events an import submits, and that
they rebuild the exported state with the shared reducer, the same eventIds every time."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from server.validation import validation_error
from shared.models import SETTINGS_ID, Chat, DomainEvent, EventType, Message, Preset, Settings
from shared.reducer import Upsert, apply, row_of
from shared.transfer import Export, batches, export_of, import_events
from tests.shared.strategies import chats, ids, messages, presets, seqs, settings, times

NOW = "2026-12-01T09:00:00.000Z"
LATER = "2027-01-01T00:00:00.000Z"
SERVER_FILLS = ("updated_at", "last_seq")
Rows = dict[str, dict[str, dict[str, Any]]]  # table -> id -> row


def chat(id: str, at: int = 0, title: str = "A chat") -> Chat:
    return Chat(id=id, title=title, created_at=f"2026-11-30T12:00:{at:02d}.000Z", updated_at=NOW, last_seq=7)


def message(id: str, chat_id: str, at: int, parent: str | None = None, **fields: Any) -> Message:
    return Message(
        id=id, chat_id=chat_id, role=fields.pop("role", "user"), content=fields.pop("content", f"text of {id}"),
        parent_id=parent, created_at=f"2026-11-30T12:00:{at:02d}.000Z", updated_at=NOW, last_seq=9, **fields,
    )  # fmt: skip


C1, C2, GONE = (f"00000000-0000-4000-8000-00000000000{n}" for n in (1, 2, 9))
M = [f"00000000-0000-4000-8000-0000000001{n:02d}" for n in range(10)]


def reduced(events: list[DomainEvent]) -> Rows:
    """The state the shared reducer makes of ``events``, from nothing; also checks that the
    server's validation accepts each one against the state before it."""
    rows: Rows = {"chats": {}, "messages": {}, "presets": {}, "settings": {}}

    class Reader:
        def chat_exists(self, chat_id: str) -> bool:
            return chat_id in rows["chats"]

        def message_chat(self, message_id: str) -> str | None:
            row = rows["messages"].get(message_id)
            return None if row is None else str(row["chat_id"])

        def message_status(self, message_id: str) -> str | None:
            row = rows["messages"].get(message_id)
            return None if row is None else str(row["status"])

        def message_role(self, message_id: str) -> str | None:
            row = rows["messages"].get(message_id)
            return None if row is None else str(row["role"])

        def message_run(self, message_id: str) -> str | None:
            row = rows["messages"].get(message_id)
            return None if row is None or row["run_id"] is None else str(row["run_id"])

        def run_exists(self, run_id: str) -> bool:
            return False

        def preset_exists(self, preset_id: str) -> bool:
            return preset_id in rows["presets"]

    for event in events:
        assert validation_error(event, Reader()) is None, event
        for mutation in apply(event):
            assert isinstance(mutation, Upsert)  # an import only creates
            rows[mutation.table][mutation.row["id"]] = mutation.row
    return rows


def without_server_fills(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {id: {k: v for k, v in row.items() if k not in SERVER_FILLS} for id, row in rows.items()}


def as_imported(message: Message) -> dict[str, Any]:
    row = {k: v for k, v in row_of(message).items() if k not in SERVER_FILLS}  # (as a row holds it)
    if message.is_queued_follow_up:
        row["status"] = "completed"  # (sent, unanswered: nothing is run by an import)
    elif row["status"] in ("queued", "streaming"):
        row["status"], row["finish_reason"] = "cancelled", "cancelled"
    return row


def as_rows(entities: list[Chat] | list[Preset] | list[Settings]) -> dict[str, dict[str, Any]]:
    return without_server_fills({e.id: row_of(e) for e in entities})


State = tuple[list[Chat], list[Message], list[Settings], list[Preset]]


@st.composite
def states(draw: st.DrawFn) -> State:
    """Chats and messages as a server holds them: lastSeq and updatedAt filled, parents among the
    messages or gone (deleted), now and then a message of a chat that is not there, any clocks;
    and the settings (or none) and presets."""
    chat_list = [
        c.model_copy(update={"updated_at": draw(times), "last_seq": draw(seqs)})
        for c in draw(st.lists(chats, unique_by=lambda c: c.id, max_size=4))
    ]
    message_ids = draw(st.lists(ids, unique=True, max_size=12))
    chat_ids = st.sampled_from([c.id for c in chat_list]) if chat_list else ids
    parent_ids = st.none() | ids | (st.sampled_from(message_ids) if message_ids else st.none())
    message_list = [
        draw(messages()).model_copy(
            update={
                "id": id,
                "chat_id": draw(chat_ids | ids),
                "parent_id": draw(parent_ids),
                "updated_at": draw(times),
                "last_seq": draw(seqs),
            }
        )
        for id in message_ids
    ]
    filled = {"updated_at": draw(times), "last_seq": draw(seqs)}
    account = [s.model_copy(update=filled) for s in draw(st.lists(settings, max_size=1))]
    preset_list = [p.model_copy(update=filled) for p in draw(st.lists(presets, unique_by=lambda p: p.id, max_size=3))]
    return chat_list, message_list, account, preset_list


def on_a_cycle(id: str, parent_of: dict[str, str | None]) -> bool:
    seen: set[str] = set()
    node = parent_of.get(id)
    while node is not None and node in parent_of and node not in seen:
        if node == id:
            return True
        seen.add(node)
        node = parent_of[node]
    return False


@given(states())
def test_importing_an_export_rebuilds_its_chats_and_messages(state: State) -> None:
    chat_list, message_list, account, preset_list = state
    export = export_of(chat_list, message_list, NOW, account, preset_list)
    events = import_events(export, NOW)
    rows = reduced(events)

    chat_ids = {c.id for c in chat_list}
    assert without_server_fills(rows["chats"]) == as_rows(chat_list)
    kept = [m for m in message_list if m.chat_id in chat_ids]  # the others' chat is not in the file
    assert without_server_fills(rows["messages"]) == {m.id: as_imported(m) for m in kept}
    assert without_server_fills(rows["settings"]) == as_rows(account)
    assert without_server_fills(rows["presets"]) == as_rows(preset_list)

    # The settings, the presets, the chats, then every message after its parent (but where the
    # parents go round in a circle).
    kinds = [e.type for e in events]
    assert kinds == (
        [EventType.SETTINGS_UPDATED] * len(account) + [EventType.PRESET_CREATED] * len(preset_list)
        + [EventType.CHAT_CREATED] * len(chat_list) + [EventType.MESSAGE_APPENDED] * len(kept)
    )  # fmt: skip
    position = {e.payload.id: i for i, e in enumerate(events)}
    parent_of = {m.id: m.parent_id for m in kept}
    for m in kept:
        if m.parent_id in position and not on_a_cycle(m.id, parent_of):
            assert position[m.parent_id] < position[m.id]

    # The same eventIds every time: whatever the time, the file's order, lastSeq and updatedAt.
    shuffled = list(message_list)
    random.Random(0).shuffle(shuffled)
    refreshed = [m.model_copy(update={"last_seq": 1, "updated_at": LATER}) for m in shuffled]
    again = import_events(Export(**{**dict(export), "messages": refreshed}), LATER)
    assert sorted(e.event_id for e in again) == sorted(e.event_id for e in events)
    assert len({e.event_id for e in events}) == len(events)


    # Into an account that has its own settings, the file's are left out (never overwritten).
    assert [e for e in import_events(export, NOW, has_settings=True) if e.type is EventType.SETTINGS_UPDATED] == []


@given(states())
def test_an_export_round_trips_through_its_json(state: State) -> None:
    chat_list, message_list, account, preset_list = state
    export = export_of(chat_list, message_list, NOW, account, preset_list)
    assert Export.model_validate_json(export.model_dump_json(by_alias=True)) == export
    assert Export.model_validate(json.loads(json.dumps(export.wire()))) == export


def test_the_file_holds_the_entities_as_on_the_wire_in_creation_order() -> None:
    export = export_of([chat(C2, 5), chat(C1, 5)], [message(M[1], C1, 2), message(M[0], C1, 3)], NOW)
    wire = export.wire()
    assert list(wire) == ["format", "version", "exportedAt", "chats", "messages"]
    assert (wire["format"], wire["version"], wire["exportedAt"]) == ("chat-export", 1, NOW)
    assert [c["id"] for c in wire["chats"]] == [C1, C2]  # same time: by id
    assert [m["id"] for m in wire["messages"]] == [M[1], M[0]]
    assert wire["chats"][0] == chat(C1, 5).wire()  # lastSeq and updatedAt kept, camelCase
    assert wire["messages"][0]["lastSeq"] == 9 and "chatId" in wire["messages"][0]


def test_settings_and_presets_are_in_the_file_only_when_there_are_some() -> None:
    """An account without them exports the file older versions wrote; a file without them (an
    older one) imports; one with them carries them as the state has them."""
    account = Settings(id=SETTINGS_ID, instructions="Be brief.", created_at=NOW, updated_at=NOW, last_seq=3)
    preset = Preset(id=M[9], name="Terse", assistant_id="demo", temperature=0.5, created_at=NOW, updated_at=NOW, last_seq=4)
    both = export_of([chat(C1)], [], NOW, [account], [preset]).wire()
    assert list(both) == ["format", "version", "exportedAt", "chats", "messages", "settings", "presets"]
    assert both["settings"] == [account.wire()] and both["presets"] == [preset.wire()]
    old = {"format": "chat-export", "version": 1, "exportedAt": NOW, "chats": [chat(C1).wire()], "messages": []}
    assert export_of([chat(C1)], [], NOW).wire() == old
    assert [e.type for e in import_events(Export.model_validate(old), NOW)] == [EventType.CHAT_CREATED]
    with pytest.raises(ValidationError, match="settings"):  # (one account, one settings row)
        Export.model_validate({**old, "settings": [account.wire(), account.wire()]})


def test_a_follow_up_still_queued_arrives_sent_and_unanswered() -> None:
    queued = message(M[1], C1, 1, parent=M[0], status="queued", preset_id=M[9])
    [_, _, sent] = import_events(export_of([chat(C1)], [message(M[0], C1, 0), queued], NOW), NOW)
    assert isinstance(sent.payload, Message)
    assert (sent.payload.status, sent.payload.parent_id, sent.payload.preset_id) == ("completed", M[0], M[9])


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"format": "something-else"}, "format"),
        ({"version": 2}, "version"),
        ({"chats": [{"id": "not-a-uuid", "title": "x", "createdAt": NOW}]}, "chats.0.id"),
        ({"messages": "none"}, "messages"),
    ],
)
def test_a_file_that_is_not_an_export_is_refused(change: dict[str, Any], complaint: str) -> None:
    wire = {**export_of([chat(C1)], [message(M[0], C1, 1)], NOW).wire(), **change}
    with pytest.raises(ValidationError, match=complaint):
        Export.model_validate(wire)
    with pytest.raises(ValidationError):
        Export.model_validate({"chats": [], "messages": []})  # no format, version or time


def test_a_parent_comes_first_whatever_the_clocks_say() -> None:
    # The answer's device was behind: it looks older than its question, and its follow-up too.
    export = export_of(
        [chat(C1)],
        [message(M[0], C1, 10), message(M[1], C1, 5, parent=M[0], role="assistant"), message(M[2], C1, 1, parent=M[1])],
        NOW,
    )
    assert [e.payload.id for e in import_events(export, NOW)[1:]] == [M[0], M[1], M[2]]


def test_a_circle_of_parents_is_imported_all_the_same() -> None:
    export = export_of([chat(C1)], [message(M[0], C1, 1, parent=M[1]), message(M[1], C1, 2, parent=M[0])], NOW)
    assert sorted(e.payload.id for e in import_events(export, NOW)[1:]) == [M[0], M[1]]


def test_a_message_whose_chat_is_not_in_the_file_is_skipped() -> None:
    export = export_of([chat(C1)], [message(M[0], C1, 1), message(M[1], C2, 2)], NOW)
    assert [e.payload.id for e in import_events(export, NOW)] == [C1, M[0]]


def test_a_message_whose_parent_was_deleted_keeps_its_parent_id() -> None:
    # The server accepts it, and shared.thread places it after the message before it, as it did.
    export = export_of([chat(C1)], [message(M[0], C1, 1), message(M[1], C1, 2, parent=GONE)], NOW)
    [_, first, second] = import_events(export, NOW)
    assert isinstance(second.payload, Message) and second.payload.parent_id == GONE


def test_replies_still_running_are_imported_as_cancelled_and_no_run_is_asked_for() -> None:
    replies = [
        message(M[n], C1, n, parent=M[0], role="assistant", status=status, run_id=M[9], assistant_id="demo")
        for n, status in enumerate(["completed", "queued", "streaming", "failed_upstream", "cancelled"], start=1)
    ]
    events = import_events(export_of([chat(C1)], [message(M[0], C1, 0), *replies], NOW), NOW)
    assert {e.type for e in events} == {EventType.CHAT_CREATED, EventType.MESSAGE_APPENDED}
    statuses = [e.payload.status for e in events[2:] if isinstance(e.payload, Message)]
    assert statuses == ["completed", "cancelled", "cancelled", "failed_upstream", "cancelled"]
    reasons = [e.payload.finish_reason for e in events[2:] if isinstance(e.payload, Message)]
    assert reasons == [None, "cancelled", "cancelled", None, None]  # (a reply that was cut says so)
    assert all(isinstance(e.payload, Message) and e.payload.run_id == M[9] for e in events[2:])


def test_tool_messages_are_appended_like_the_others() -> None:
    tools = [message(M[n], C1, n, role=role) for n, role in enumerate(["tool_call", "tool_result", "error"])]
    events = import_events(export_of([chat(C1)], tools, NOW), NOW)
    assert [e.type for e in events[1:]] == [EventType.MESSAGE_APPENDED] * 3  # never an overwrite
    assert reduced(events)["messages"][M[2]]["role"] == "error"


def test_the_server_fills_last_seq_and_updated_at() -> None:
    events = import_events(export_of([chat(C1)], [message(M[0], C1, 1)], NOW), LATER)
    assert all(e.payload.last_seq is None and e.payload.updated_at is None for e in events)  # type: ignore[union-attr]
    assert all(e.created_at == LATER for e in events)


def test_an_id_given_twice_counts_once() -> None:
    export = export_of([chat(C1, 1, "first"), chat(C1, 2, "second")], [message(M[0], C1, 1), message(M[0], C1, 2)], NOW)
    events = import_events(export, NOW)
    assert [e.payload.id for e in events] == [C1, M[0]]
    assert isinstance(events[0].payload, Chat) and events[0].payload.title == "first"


def test_an_event_id_changes_with_what_it_creates() -> None:
    [_, before] = import_events(export_of([chat(C1)], [message(M[0], C1, 1)], NOW), NOW)
    [_, edited] = import_events(export_of([chat(C1)], [message(M[0], C1, 1, content="edited")], NOW), NOW)
    [_, again] = import_events(export_of([chat(C1)], [message(M[0], C1, 1)], NOW), LATER)
    assert before.event_id == again.event_id != edited.event_id
    renamed = import_events(export_of([chat(C1, title="Renamed")], [], NOW), NOW)
    assert renamed[0].event_id != import_events(export_of([chat(C1)], [], NOW), NOW)[0].event_id


def test_batches_keep_the_order_and_the_size() -> None:
    assert list(batches(list(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batches([], 500)) == []
    with pytest.raises(ValueError):
        list(batches([1], 0))
