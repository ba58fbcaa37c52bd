"""A page of ``GET /sync/state`` read into rows (webapp/state_page.py): the rows are exactly those
the models made of the same page (Hypothesis over every kind of row, and over the other forms of
ids and times the models normalize); a page the models refuse is refused, and so is a row
without the ``updatedAt`` and ``lastSeq`` every row of the state carries; a refused page stores
nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.models import Message, Snapshot, StateResponse, Wire
from shared.schema import TABLES
from tests.shared import strategies as s
from webapp.database import FilePersistence
from webapp.state_page import page_of, read_state_page, snapshot_rows, state_page_of
from webapp.store import LocalStore


def as_row(model: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A row of the state: with the server's ``updatedAt`` and ``lastSeq``."""
    return st.tuples(model, s.times, s.seqs).map(lambda m: m[0].model_copy(update={"updated_at": m[1], "last_seq": m[2]}))


pages = s.model(
    StateResponse,
    snapshot=s.model(
        Snapshot,
        chats=st.lists(as_row(s.chats), max_size=3),
        messages=st.lists(as_row(s.messages()), max_size=6),
        settings=st.lists(as_row(s.settings), max_size=1),
        presets=st.lists(as_row(s.presets), max_size=3),
    ),
    up_to_seq=s.seqs,
    current_seq=s.seqs,
    next_page=st.none() | st.text(s.characters, max_size=20),
    total=st.none() | st.integers(0, 10**6),
)


def other_forms(data: dict[str, Any], draw: st.DrawFn) -> dict[str, Any]:
    """The same page with ids and times in forms the models take and make canonical (uppercase
    or braced ids, times with an offset or without milliseconds), field names in snake_case, and
    null for a field left out."""
    data = copy.deepcopy(data)
    for name in ("chats", "messages", "settings", "presets"):
        for row in data["snapshot"][name]:
            for key, value in list(row.items()):
                if key in ("id", "chatId", "parentId", "runId", "presetId", "defaultPresetId") and value and draw(st.booleans()):
                    row[key] = draw(st.sampled_from([value.upper(), "{" + value + "}", value.replace("-", "")]))
                elif key in ("createdAt", "updatedAt") and draw(st.booleans()):
                    row[key] = draw(st.sampled_from([value.replace("Z", "+00:00"), value[:-5] + "Z", value[:-1] + "+02:00"]))
            if name == "messages" and row and draw(st.booleans()):
                key = draw(st.sampled_from(["chatId", "createdAt", "lastSeq"]))
                row[{"chatId": "chat_id", "createdAt": "created_at", "lastSeq": "last_seq"}[key]] = row.pop(key)
            if name == "messages" and "usage" not in row and draw(st.booleans()):
                row["usage"] = None
            if name == "messages" and "attachments" not in row and draw(st.booleans()):
                row["attachments"] = draw(st.sampled_from([None, []]))
    return data


@settings(max_examples=200, deadline=None)
@given(page=pages, data=st.data())
def test_the_rows_read_are_the_rows_the_models_made(page: StateResponse, data: st.DataObject) -> None:
    body = page.model_dump_json(by_alias=True)  # (as the server writes it: server/routes/sync.py)
    expected = page_of(StateResponse.model_validate_json(body))
    assert read_state_page(body.encode()) == expected == state_page_of(json.loads(body))
    assert expected.count() == sum(len(getattr(page.snapshot, name)) for name in TABLES)
    other = other_forms(json.loads(body), data.draw)
    models = page_of(StateResponse.model_validate(other))
    assert read_state_page(json.dumps(other)) == models == state_page_of(other)


ROW = {
    "id": "0193a3b4-0000-7000-8000-000000000001",
    "chatId": "0193a3b4-0000-7000-8000-0000000000c1",
    "role": "assistant",
    "content": "Hello",
    "parentId": None,
    "status": "completed",
    "assistantId": "demo",
    "runId": None,
    "createdAt": "2026-11-30T12:00:00.123Z",
    "updatedAt": "2026-11-30T12:00:01.000Z",
    "lastSeq": 7,
    "attachments": [{"sha256": "ab" * 32, "name": "cat.png", "mime": "image/png", "size": 3, "width": 640}],
    "usage": {"promptTokens": 3, "completionTokens": 5, "estimated": True},
    "finishReason": "stop",
}
CHAT = {"id": "0193a3b4-0000-7000-8000-0000000000c1", "title": "A chat", "createdAt": "2026-11-30T12:00:00.000Z",
        "updatedAt": "2026-11-30T12:00:00.000Z", "lastSeq": 1}  # fmt: skip


def page(messages: list[Any] | None = None, chats: list[Any] | None = None, **top: Any) -> dict[str, Any]:
    snapshot = {"chats": [CHAT] if chats is None else chats, "messages": [ROW] if messages is None else messages}
    return {"snapshot": snapshot, "upToSeq": 7, "currentSeq": 9, "nextPage": None, "total": 2, **top}


def test_a_row_as_its_columns_hold_it() -> None:
    read = read_state_page(json.dumps(page()))
    message = dict(zip(TABLES["messages"].column_names, read.rows["messages"][0], strict=True))
    assert message == {
        "id": ROW["id"], "chat_id": ROW["chatId"], "role": "assistant", "content": "Hello", "parent_id": None,
        "status": "completed", "assistant_id": "demo", "run_id": None, "created_at": ROW["createdAt"],
        "updated_at": ROW["updatedAt"], "last_seq": 7,
        "attachments_json": '[{"sha256":"' + "ab" * 32 + '","name":"cat.png","mime":"image/png","size":3,"width":640}]',
        "preset_id": None, "instructions": None, "finish_reason": "stop",
        "usage_json": '{"promptTokens":3,"completionTokens":5,"estimated":true}',
    }  # fmt: skip
    assert Message.model_validate(message) == Message.model_validate(ROW)  # (the row reads back as the message)
    assert read.rows["chats"] == [tuple(CHAT[k] for k in ("id", "title", "createdAt", "updatedAt", "lastSeq")) + (None, None)]
    assert read.rows["settings"] == read.rows["presets"] == []  # (an older server's page: none)
    assert (read.up_to_seq, read.current_seq, read.next_page, read.total, read.count()) == (7, 9, None, 2, 2)


def without(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: {k: v for k, v in row.items() if k != key}


def changed(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda row: {**row, key: value}


# Pages the models refuse (each a change of ROW, or of the page), and why.
REFUSED: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("no id", without("id")),
    ("an id not a UUID", changed("id", "not-a-uuid")),
    ("a chatId not a UUID", changed("chatId", "0193a3b4-0000-7000-8000-00000000zzzz")),
    ("no content", without("content")),
    ("content not text", changed("content", 5)),
    ("a NUL in the content", changed("content", "a\x00b")),
    ("a NUL in the assistantId", changed("assistantId", "\x00")),
    ("a NUL in an attachment's name", changed("attachments", [{**ROW["attachments"][0], "name": "cat\x00.png"}])),
    ("an unknown role", changed("role", "admin")),
    ("an unknown status", changed("status", "done")),
    ("an unknown finishReason", changed("finishReason", "tired")),
    ("a time without a timezone", changed("createdAt", "2026-11-30T12:00:00")),
    ("a time that is no time", changed("updatedAt", "yesterday")),
    ("lastSeq not a number", changed("lastSeq", "seven")),
    ("lastSeq a fraction", changed("lastSeq", 7.5)),
    ("an attachment's sha256 wrong", changed("attachments", [{**ROW["attachments"][0], "sha256": "AB" * 32}])),
    ("an attachment without a name", changed("attachments", [{**ROW["attachments"][0], "name": ""}])),
    ("33 attachments", changed("attachments", ROW["attachments"] * 33)),
    ("usage without its counts", changed("usage", {"estimated": True})),
    ("usage negative", changed("usage", {"promptTokens": -1, "completionTokens": 0})),
    ("instructions too long", changed("instructions", "x" * 12_005)),
    ("a row that is no object", lambda row: "a message"),
    ("a row that is null", lambda row: None),
]


@pytest.mark.parametrize("why, change", REFUSED, ids=[why for why, _ in REFUSED])
def test_a_row_the_models_refuse_is_refused(why: str, change: Callable[[dict[str, Any]], Any]) -> None:
    bad = page(messages=[ROW, change(ROW)])
    with pytest.raises(ValidationError):
        StateResponse.model_validate(bad)
    with pytest.raises(ValidationError) as refused:
        read_state_page(json.dumps(bad))
    with pytest.raises(ValidationError):
        state_page_of(bad)
    assert refused.value.title == "StateResponse"
    assert all(e["loc"][:3] == ("snapshot", "messages", 1) for e in refused.value.errors()), refused.value.errors()


@pytest.mark.parametrize(
    "bad",
    [
        page(chats=[{**CHAT, "title": "x" * 501}]),
        page(chats=[{**CHAT, "title": None}]),
        page(chats=[{**CHAT, "title": "a\x00"}]),
        page(upToSeq="x"),
        {k: v for k, v in page().items() if k != "currentSeq"},
        {"upToSeq": 1, "currentSeq": 1},
        page(messages={"0": ROW}),  # type: ignore[arg-type]
        {**page(), "snapshot": {"chats": [], "messages": [], "presets": [{"id": CHAT["id"], "name": "", "createdAt": CHAT["createdAt"]}]}},
        {**page(), "snapshot": {"chats": [], "messages": [], "presets": None}},
        {**page(), "nextPage": 5},
    ],
)
def test_a_page_the_models_refuse_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        StateResponse.model_validate(bad)
    with pytest.raises(ValidationError):
        read_state_page(json.dumps(bad))


def test_the_text_of_a_nul_escape_is_no_nul() -> None:
    """A body without a NUL escape is not checked text by text (no text can hold one); one with
    the escape's six characters as text (a backslash escaped before them) is, and is taken."""
    texts = ["\\u0000", "\\\\u0000", "u0000 \\"]
    body = json.dumps(page(messages=[{**ROW, "content": text, "id": ROW["id"][:-1] + str(i)} for i, text in enumerate(texts)]))
    assert "\\u0000" in body
    read = read_state_page(body.encode())
    assert [row[3] for row in read.rows["messages"]] == texts
    assert read == page_of(StateResponse.model_validate_json(body))


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b"null", b'{"snapshot": 1}', "\ud800".encode("utf-8", "surrogatepass")])
def test_what_is_no_page_is_refused(body: bytes) -> None:
    with pytest.raises(ValidationError):
        read_state_page(body)


@pytest.mark.parametrize("table, key", [("messages", "lastSeq"), ("messages", "updatedAt"), ("chats", "lastSeq"), ("chats", "updatedAt")])
@pytest.mark.parametrize("value", ["absent", None])
def test_a_row_of_the_state_without_its_seq_or_time_is_refused(table: str, key: str, value: Any) -> None:
    """The models take these as optional (an event's payload has neither); a row of the state
    has both (docs/protocol.md, "Entities"), and its table holds them NOT NULL."""
    row = {"messages": ROW, "chats": CHAT}[table]
    bad_row = without(key)(row) if value == "absent" else changed(key, value)(row)
    bad = page(**{table: [row, bad_row]})
    StateResponse.model_validate(bad)  # (the models took it: a new device's insert then dropped the row)
    with pytest.raises(ValidationError) as refused:
        read_state_page(json.dumps(bad))
    assert [e["loc"] for e in refused.value.errors()] == [("snapshot", table, 1, key)]


async def test_a_refused_page_stores_nothing(tmp_path: Path) -> None:
    """The page is refused before the store sees it: the store keeps what it had, and the
    snapshot where it was (the sync engine logs the error and tries again later)."""
    store = LocalStore(str(tmp_path / "device.db"), FilePersistence())
    first = read_state_page(json.dumps(page(messages=[], nextPage="next")))
    assert await store.apply_snapshot_page(first, first=True) is not None
    before = store.snapshot_progress()
    other = {**ROW, "id": "0193a3b4-0000-7000-8000-000000000002"}
    with pytest.raises(ValidationError):
        await store.apply_snapshot_page(read_state_page(json.dumps(page(messages=[other, without("lastSeq")(ROW)], total=None))), first=False)
    assert store.snapshot_progress() == before and store.confirmed().messages == []
    good = read_state_page(json.dumps(page(messages=[other, ROW], chats=[], total=None)))
    assert await store.apply_snapshot_page(good, first=False) is None
    assert sorted(m.id for m in store.confirmed().messages) == sorted([ROW["id"], other["id"]])
    store.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(page=pages)
async def test_a_page_stored_from_its_rows_is_the_page(tmp_path_factory: pytest.TempPathFactory, page: StateResponse) -> None:
    """Stored on a new device and read back, every row is the model the page held."""
    path = tmp_path_factory.mktemp("store") / "device.db"
    store = LocalStore(str(path), FilePersistence())
    unique = {name: list({r.id: r for r in getattr(page.snapshot, name)}.values()) for name in TABLES}
    whole = page.model_copy(update={"snapshot": Snapshot(**unique), "next_page": None})
    assert await store.apply_snapshot_page(read_state_page(whole.model_dump_json(by_alias=True)), first=True) is None
    confirmed = store.confirmed()
    for name in TABLES:
        stored: list[Wire] = sorted(getattr(confirmed, name), key=lambda r: r.id)
        assert stored == sorted(unique[name], key=lambda r: r.id), name
        assert sorted(snapshot_rows(confirmed)[name]) == sorted(snapshot_rows(whole.snapshot)[name])
    store.close()
