"""The chats (webapp/chats.py, webapp/search.py): titles, the list's order and marks, rename,
delete, search, export and import, under CPython on the in-memory page."""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from shared.models import Chat, EventType, LoggedEvent, Message, Snapshot
from shared.transfer import Export
from tests.webapp.page import FakePage
from tests.webapp.test_client import make_client
from webapp import ui
from webapp.app import Client
from webapp.chats import day_groups, title_from
from webapp.database import FilePersistence
from webapp.migrations import MIGRATIONS
from webapp.search import fts_query
from webapp.store import LocalStore


async def ticking_client(tmp_path: Path) -> tuple[Client, FakePage]:
    """A signed-in client whose clock moves a second at every reading."""
    client, page, _ = make_client(tmp_path)
    seconds = itertools.count()
    client.s.now = lambda: f"2026-11-30T12:{(s := next(seconds)) // 60:02d}:{s % 60:02d}.000Z"
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    return client, page


async def chat_with(client: Client, *texts: str) -> str:
    await client.dispatch("new-chat", {})
    assert client.selected is not None
    for text in texts:
        await client.dispatch("send", {"text": text, "assistant": ""})
    return client.selected


def titles(client: Client) -> list[str]:
    return [c.title for c in client.store.chats()]


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("How do I sort a list in Python?", "How do I sort a list in Python?"),
        ("\n\n  # Plan for **tomorrow**\nmore", "Plan for tomorrow"),
        ("Explain the difference between a process and a thread in an operating system", "Explain the difference between a process and a…"),
        ("x" * 80, "x" * 48 + "…"),
        ("```\n```", "New chat"),
        ("> quoted `code` here", "quoted code here"),
    ],
)  # fmt: skip
def test_a_title_is_the_first_line_of_the_first_message_cut_at_a_word(text: str, title: str) -> None:
    assert title_from(text) == title
    assert len(title_from(text)) <= 49


async def test_a_new_chat_is_named_after_its_first_message_until_renamed(tmp_path: Path) -> None:
    client, page = await ticking_client(tmp_path)
    chat_id = await chat_with(client, "What is the capital of Peru?", "And of Chile?")
    assert titles(client) == ["What is the capital of Peru?"]
    assert "What is the capital of Peru?" in page.regions["chat-head"] and "What is the capital of Peru?" in page.regions["chat-list"]

    await client.dispatch("rename-chat", {"id": chat_id})
    assert 'aria-label="Chat title"' in page.regions["chat-head"] and page.focused == "#rename-title"
    await client.dispatch("save-title", {"id": chat_id, "title": "  South   America "})
    assert titles(client) == ["South America"] and 'aria-label="Rename"' in page.regions["chat-head"]
    await client.dispatch("send", {"text": "And of Brazil?", "assistant": ""})
    assert titles(client) == ["South America"]  # a title the user gave stays
    await client.dispatch("rename-chat", {"id": chat_id})
    await client.dispatch("cancel-rename", {})
    await client.dispatch("save-title", {"id": chat_id, "title": "   "})  # blank: nothing changes
    assert titles(client) == ["South America"]


async def test_the_list_is_by_latest_activity_and_marks_drafts_answers_and_unsent_changes(tmp_path: Path) -> None:
    client, page = await ticking_client(tmp_path)
    first = await chat_with(client, "first chat")
    second = await chat_with(client, "second chat")
    assert titles(client) == ["second chat", "first chat"]
    await client.dispatch("select-chat", {"id": first})
    await client.dispatch("send", {"text": "more in the first", "assistant": ""})
    assert titles(client) == ["first chat", "second chat"]  # its newest message counts
    assert page.regions["chat-list"].index(f'id="c-{first}"') < page.regions["chat-list"].index(f'id="c-{second}"')

    assert "3 unsent" in page.regions["chat-list"] and "2 unsent" in page.regions["chat-list"]  # (offline)
    await client.dispatch("draft", {"chat": second, "text": "half"})
    assert ">Draft<" in page.regions["chat-list"]
    await client.dispatch("send", {"text": "answer me", "assistant": "demo"})
    assert "Answering…" in page.regions["chat-list"]  # a reply waits in the first chat
    assert client.store.running() == {first}


LOCAL = timezone(timedelta(hours=-5))  # a device five hours behind UTC
DAYS_AGO = [  # (latest activity, in UTC; the group it goes in on the device's calendar)
    ("2026-12-02T04:00:00.000Z", "Today"),  # (ahead of the device's clock)
    ("2026-12-01T15:00:00.000Z", "Today"),
    ("2026-12-01T04:59:00.000Z", "Yesterday"),  # (23:59 the day before, there)
    ("2026-11-30T06:00:00.000Z", "Yesterday"),
    ("2026-11-29T12:00:00.000Z", "Previous 7 days"),
    ("2026-11-25T12:00:00.000Z", "Previous 7 days"),
    ("2026-11-24T12:00:00.000Z", "Previous 30 days"),
    ("2026-11-02T12:00:00.000Z", "Previous 30 days"),
    ("2026-10-31T12:00:00.000Z", "October"),
    ("2026-01-05T12:00:00.000Z", "January"),
    ("2025-12-30T12:00:00.000Z", "December 2025"),
]


def test_the_list_is_grouped_by_the_day_of_each_chats_latest_activity_on_the_devices_calendar() -> None:
    now = datetime(2026, 12, 1, 18, 0, tzinfo=LOCAL)  # 23:00 UTC
    chats = [Chat(id=f"{i:08d}-0000-7000-8000-000000000000", title=f"c{i}", created_at=at) for i, (at, _) in enumerate(DAYS_AGO)]
    groups = day_groups([(chat, at) for chat, (at, _) in zip(chats, DAYS_AGO)], now)
    expected: list[tuple[str, list[str]]] = []
    for chat, (_, label) in zip(chats, DAYS_AGO):
        if expected and expected[-1][0] == label:
            expected[-1][1].append(chat.title)
        else:
            expected.append((label, [chat.title]))
    assert [(label, [c.title for c in members]) for label, members in groups] == expected
    html = ui.chat_list(groups, None)
    assert [h for h in re.findall(r'<h3 class="group">([^<]+)</h3>', html)] == [label for label, _ in expected]
    assert ui.chat_list([], None) == '<p class="empty">No chats yet.</p>'


async def test_the_list_shows_its_groups(tmp_path: Path) -> None:
    client, page = await ticking_client(tmp_path)  # (its clock: 2026-11-30, at noon UTC)
    client.chats.host.local_now = lambda: datetime(2026, 11, 30, 13, tzinfo=UTC)
    await chat_with(client, "first chat")
    assert '<h3 class="group">Today</h3>' in page.regions["chat-list"]
    client.chats.host.local_now = lambda: datetime(2026, 12, 2, 13, tzinfo=UTC)  # two days later
    await chat_with(client, "second chat")
    assert re.findall(r'<h3 class="group">([^<]+)</h3>', page.regions["chat-list"]) == ["Previous 7 days"]


async def test_deleting_a_chat_asks_first_and_takes_what_the_device_kept_of_it(tmp_path: Path) -> None:
    client, page = await ticking_client(tmp_path)
    keep = await chat_with(client, "keep me")
    gone = await chat_with(client, "delete me", "and me")
    await client.dispatch("draft", {"chat": gone, "text": "unsent words"})
    await client.dispatch("delete-chat", {"id": gone})
    assert 'role="alertdialog"' in page.regions["chat-head"] and "its 2 messages on every device?" in page.regions["chat-head"]
    await client.dispatch("cancel-delete-chat", {})
    assert "alertdialog" not in page.regions["chat-head"] and client.store.chat(gone) is not None

    await client.dispatch("delete-chat", {"id": gone})
    await client.dispatch("confirm-delete-chat", {"id": gone})
    assert client.store.chat(gone) is None and client.store.messages(gone) == []
    assert client.store.drafted() == set() and client.selected == keep
    assert "delete me" not in page.regions["chat-list"] and "keep me" in page.regions["chat-head"]
    # never sent (offline): the chat was withdrawn from the outbox, nothing about it goes out
    assert all(p.event.payload.model_dump().get("chat_id", p.event.entity_id()) != gone for p in client.store.outbox())


def test_what_is_typed_becomes_a_query_of_words_the_last_one_a_prefix() -> None:
    assert fts_query('say "hi" OR NOT x*') == '"say" "hi" "OR" "NOT" "x"'  # (one letter: not a prefix)
    assert fts_query("NEAR(a b) hel") == '"NEAR" "a" "b" "hel"*'
    assert fts_query("  ---  ") is None
    assert fts_query("привет мир") == '"привет" "мир"*'


async def test_search_finds_titles_and_messages_newest_first_and_opens_the_chat_at_the_message(tmp_path: Path) -> None:
    client, page = await ticking_client(tmp_path)
    old = await chat_with(client, "Recipes", *[f"filler {i}" for i in range(60)])
    await client.store.add_local(  # a message on a branch that is not shown: the first one
        _event(client, Message(id=client.s.new_id(), chat_id=old, role="user", content="the secret pancake recipe",
                               parent_id=None, created_at="2026-11-30T11:00:00.000Z")))  # fmt: skip
    await chat_with(client, "Pancakes for breakfast?")
    await client.dispatch("search", {"text": "pancak"})
    results = page.regions["chat-list"]
    assert "2 results" in results  # (the title made from a message found is not found again)
    assert "<mark>Pancakes</mark> for breakfast?" in results and "the secret <mark>pancake</mark> recipe" in results
    assert results.index("breakfast") < results.index("secret")  # newest first
    await client.dispatch("save-title", {"id": old, "title": "Cooking ideas"})
    await client.dispatch("search", {"text": "cooking"})
    assert "1 result<" in page.regions["chat-list"] and ">Title<" in page.regions["chat-list"]
    assert "<mark>Cooking</mark> ideas" in page.regions["chat-list"]

    hidden = next(m for m in client.store.messages(old) if "secret" in m.content)
    await client.dispatch("open-hit", {"chat": old, "message": hidden.id})
    assert client.selected == old and page.revealed == f"m-{hidden.id}"
    assert client.pane.path()[0].id == hidden.id  # its branch is the one shown now

    await client.dispatch("search", {"text": "nothing-like-this"})
    assert "Nothing found" in page.regions["chat-list"]
    await client.dispatch("search", {"text": ""})
    assert "Pancakes for breakfast?" in page.regions["chat-list"] and "<mark>" not in page.regions["chat-list"]


def _event(client: Client, message: Message) -> object:
    from shared.models import DomainEvent

    return DomainEvent(event_id=client.s.new_id(), type=EventType.MESSAGE_APPENDED, payload=message, created_at=message.created_at)


async def test_the_index_follows_edits_deletes_remote_events_and_a_full_resync(tmp_path: Path) -> None:
    client, _ = await ticking_client(tmp_path)
    chat_id = await chat_with(client, "alpha one")
    message = client.store.messages(chat_id)[0]
    found = lambda text: [h.message_id for h in client.store.search(text) if h.message_id]  # noqa: E731
    assert found("alpha") == [message.id]
    await client.dispatch("edit-message", {"id": message.id})
    await client.dispatch("send", {"text": "beta two"})
    assert found("alpha") == [] and found("beta") == [message.id]

    remote = Message(id="01900000-0000-7000-8000-000000000001", chat_id=chat_id, role="assistant",
                     content="gamma from elsewhere", created_at="2026-11-30T13:00:00.000Z")  # fmt: skip
    await client.store.apply_remote(
        [LoggedEvent(seq=1, event_id="01900000-0000-7000-8000-0000000000e1", type=EventType.MESSAGE_APPENDED,
                     payload=remote, created_at=remote.created_at, origin="d2")]  # fmt: skip
    )
    assert found("gamma") == [remote.id]
    chat = Chat(id="01900000-0000-7000-8000-0000000000c1", title="delta chat", created_at="2026-11-30T13:00:00.000Z", updated_at="2026-11-30T13:00:00.000Z", last_seq=5)
    other = remote.model_copy(update={"id": "01900000-0000-7000-8000-000000000002", "chat_id": chat.id, "content": "epsilon", "last_seq": 5, "updated_at": remote.created_at})
    await client.store.replace(Snapshot(chats=[chat], messages=[other]), 5)  # replace, never merge
    assert found("gamma") == [] and found("epsilon") == [other.id]
    assert [h.chat_id for h in client.store.search("delta")] == [chat.id]
    assert found("beta") == [message.id]  # still pending on this device: still shown, still found


def test_a_database_made_before_search_is_indexed_by_its_migration(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY)")
    for name, migrate in MIGRATIONS:
        if name.startswith("0006"):
            break
        migrate(conn)
        conn.execute("INSERT INTO schema_migrations VALUES (?)", (name,))
    conn.execute("INSERT INTO chats VALUES ('c1', 'old title', '2026-11-30T12:00:00.000Z', '2026-11-30T12:00:00.000Z', 3)")
    conn.execute(
        "INSERT INTO messages VALUES ('m1', 'c1', 'user', 'written long ago', NULL, 'completed', NULL, NULL, "
        "'2026-11-30T12:00:00.000Z', '2026-11-30T12:00:00.000Z', 3)"
    )
    conn.close()
    store = LocalStore(path, FilePersistence())
    assert [(h.chat_id, h.message_id) for h in store.search("long ago")] == [("c1", "m1")]
    assert [h.chat_id for h in store.search("old")] == ["c1"]


async def test_a_chat_exports_as_markdown_and_everything_as_json_that_imports_once(tmp_path: Path) -> None:
    client, page = await ticking_client(tmp_path)
    chat_id = await chat_with(client, "Question *one*", "Question two")
    await client.dispatch("export-chat", {"id": chat_id})
    name, mime, text = page.downloads[-1]
    assert (name, mime) == ("Question-one.md", "text/markdown")
    assert text.startswith("# Question one\n") and "## You · 2026-11-30T12:00:" in text
    assert text.index("Question *one*") < text.index("Question two")

    await client.dispatch("export-all", {})
    name, mime, body = page.downloads[-1]
    assert name.startswith("chats-") and mime == "application/json"
    document = Export.model_validate_json(body)
    assert [c.id for c in document.chats] == [chat_id] and len(document.messages) == 2

    (tmp_path / "other").mkdir()
    other, page2, _ = make_client(tmp_path / "other")
    await other.dispatch("signin", {"username": "bo", "password": "right one"})
    await other.dispatch("import", {"name": "x.json", "text": body})
    assert "Imported 1 chat and 2 messages (0 already on this device)" in page2.regions["data-note"]
    assert [c.title for c in other.store.chats()] == ["Question one"] and len(other.store.messages(chat_id)) == 2
    outbox = [p.event.event_id for p in other.store.outbox()]
    await other.dispatch("import", {"name": "x.json", "text": body})
    assert "(3 already on this device)" in page2.regions["data-note"]
    assert [p.event.event_id for p in other.store.outbox()] == outbox  # nothing more to send
    await other.dispatch("import", {"name": "notes.txt", "text": json.dumps({"hello": 1})})
    assert "notes.txt is not an export of this app: nothing was imported." in page2.regions["data-note"]
