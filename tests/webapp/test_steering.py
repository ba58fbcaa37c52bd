"""The local store's settings, presets and queued follow-ups (webapp/store.py, outbox, overlay),
under CPython; and their sync between devices and through a full resync, against the real server
app in-process on both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from quart import Quart

from server.app import create_app
from server.config import Settings
from shared.models import (
    SETTINGS_ID,
    Chat,
    DomainEvent,
    EventResult,
    EventType,
    LoggedEvent,
    Message,
    Payload,
    Preset,
    PresetRef,
    QueuedSend,
    RunContinue,
)
from shared.models import Settings as AccountSettings
from tests.conftest import QUICK_PASSWORDS
from tests.webapp.devices import Device, T, new_id, signup
from webapp.assistants import LOCAL_TOOLS_ID
from webapp.database import FilePersistence
from webapp.overlay import is_pending
from webapp.store import LocalStore

LATER = "2026-11-30T12:00:01.000Z"


def _event(kind: EventType, payload: Payload) -> DomainEvent:
    return DomainEvent(event_id=new_id(), type=kind, payload=payload, created_at=T)


async def chat_with_an_answer(store: LocalStore) -> tuple[Chat, Message, Message]:
    chat = Chat(id=new_id(), title="t", created_at=T)
    question = Message(id=new_id(), chat_id=chat.id, role="user", content="q", created_at=T)
    answer = Message(id=new_id(), chat_id=chat.id, role="assistant", content="a", parent_id=question.id, created_at=T,
                     status="streaming", assistant_id="demo", run_id=new_id())  # fmt: skip
    for kind, payload in ((EventType.CHAT_CREATED, chat), (EventType.MESSAGE_APPENDED, question), (EventType.MESSAGE_APPENDED, answer)):
        await store.add_local(_event(kind, payload))
    return chat, question, answer


def queued_message(chat: Chat, text: str, at: str = T) -> Message:
    return Message(id=new_id(), chat_id=chat.id, role="user", content=text, status="queued", created_at=at, preset_id=new_id())


async def test_settings_and_presets_are_read_and_coalesced_while_unsent(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "local.db"), FilePersistence())
    assert store.settings() is None and store.presets() == []
    await store.add_local(_event(EventType.SETTINGS_UPDATED, AccountSettings(id=SETTINGS_ID, instructions="One.", created_at=T)))
    await store.add_local(_event(EventType.SETTINGS_UPDATED, AccountSettings(id=SETTINGS_ID, instructions="Two.", created_at=T)))
    terse = Preset(id=new_id(), name="Terse", instructions="Be terse.", created_at=T)
    wordy = Preset(id=new_id(), name="Expansive", temperature=1.2, max_tokens=4000, created_at=T)
    await store.add_local(_event(EventType.PRESET_CREATED, terse))
    await store.add_local(_event(EventType.PRESET_UPDATED, terse.model_copy(update={"name": "Very terse"})))
    await store.add_local(_event(EventType.PRESET_CREATED, wordy))
    settings = store.settings()
    assert settings is not None and settings.instructions == "Two." and is_pending(settings)
    assert [(p.name, p.temperature, p.max_tokens) for p in store.presets()] == [("Expansive", 1.2, 4000), ("Very terse", None, None)]
    assert store.preset(terse.id) == store.presets()[1] and store.preset(new_id()) is None
    # Only what matters goes out: the latest settings, each preset created as it is now.
    outbox = [p.event for p in store.outbox()]
    assert [(e.type, e.payload.name if isinstance(e.payload, Preset) else None) for e in outbox] == [
        ("SettingsUpdated", None), ("PresetCreated", "Very terse"), ("PresetCreated", "Expansive"),
    ]  # fmt: skip
    # A preset made here and deleted unsent: nothing about it goes out.
    await store.add_local(_event(EventType.PRESET_DELETED, PresetRef(id=wordy.id)))
    assert [e.type for e in (p.event for p in store.outbox())] == ["SettingsUpdated", "PresetCreated"]
    assert [p.name for p in store.presets()] == ["Very terse"]
    # An account's changes are no chat's.
    assert store.unsent() == {}
    store.close()


async def test_a_chat_s_queued_messages_are_listed_in_order_and_out_of_its_tree(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "local.db"), FilePersistence())
    chat, question, answer = await chat_with_an_answer(store)
    second, first = queued_message(chat, "second", LATER), queued_message(chat, "first")
    for message in (second, first):
        await store.add_local(_event(EventType.MESSAGE_APPENDED, message))
    assert [m.content for m in store.queued(chat.id)] == ["first", "second"]  # by createdAt, not as written
    assert [step.id for step in store.shown_path(chat.id)] == [question.id, answer.id]  # not in the tree
    assert {link.id for link in store.links(chat.id)} == {question.id, answer.id}
    assert store.running() == {chat.id}  # (the answer: a queued message is not a reply being written)
    await store.add_local(_event(EventType.MESSAGE_EDITED, answer.model_copy(update={"status": "completed"})))
    assert store.running() == set() and store.unfinished_local_replies() == []
    # Sent: it joins the tree where it follows, its reply under it, and leaves the queue.
    reply = new_id()
    sent = QueuedSend(message_id=first.id, chat_id=chat.id, parent_id=answer.id, run_id=new_id(), reply_id=reply, assistant_id="demo")
    await store.add_local(_event(EventType.QUEUED_MESSAGE_SENT, sent))
    assert [m.content for m in store.queued(chat.id)] == ["second"]
    assert [step.id for step in store.shown_path(chat.id)] == [question.id, answer.id, first.id, reply]
    made = store.message(reply)
    assert made is not None and (made.status, made.parent_id, made.assistant_id, is_pending(made)) == ("queued", first.id, "demo", True)
    assert store.running() == {chat.id}
    store.close()


async def test_a_queued_message_sent_here_is_never_coalesced_away(tmp_path: Path) -> None:
    """Queued, sent and then edited, all before any of it left the device: the edit may not
    rewrite the message's creation over its sending (the sending, and the reply it makes, would
    be lost)."""
    store = LocalStore(str(tmp_path / "local.db"), FilePersistence())
    chat, _, answer = await chat_with_an_answer(store)
    follow_up = queued_message(chat, "v1")
    await store.add_local(_event(EventType.MESSAGE_APPENDED, follow_up))
    await store.add_local(_event(EventType.MESSAGE_EDITED, follow_up.model_copy(update={"content": "v2"})))  # (coalesced)
    reply = new_id()
    sent = QueuedSend(message_id=follow_up.id, chat_id=chat.id, parent_id=answer.id, run_id=new_id(), reply_id=reply, assistant_id="demo")
    await store.add_local(_event(EventType.QUEUED_MESSAGE_SENT, sent))
    shown = store.message(follow_up.id)
    assert shown is not None
    await store.add_local(_event(EventType.MESSAGE_EDITED, shown.model_copy(update={"content": "v3"})))
    mine = [p.event for p in store.outbox() if p.event.entity_id() == follow_up.id]
    assert [e.type for e in mine] == ["MessageAppended", "QueuedMessageSent", "MessageEdited"]
    assert isinstance(mine[0].payload, Message) and mine[0].payload.content == "v2"
    row = store.message(follow_up.id)
    assert row is not None and (row.status, row.content, row.parent_id) == ("completed", "v3", answer.id)
    assert store.message(reply) is not None
    store.close()


async def test_a_refused_sending_or_continue_is_undone(tmp_path: Path) -> None:
    """The server refused them (another device sent the message first; the reply was still
    being written): the message is queued again as the server has it, the reply it made gone,
    the reply to continue as it was."""
    store = LocalStore(str(tmp_path / "local.db"), FilePersistence())
    chat, _, answer = await chat_with_an_answer(store)
    follow_up = queued_message(chat, "later")
    await store.add_local(_event(EventType.MESSAGE_APPENDED, follow_up))
    await store.add_local(_event(EventType.MESSAGE_EDITED, answer.model_copy(update={"status": "cancelled", "finish_reason": "cancelled"})))
    await store.mark_attempted([p.event.event_id for p in store.outbox()])
    await store.record_results([EventResult(event_id=p.event.event_id, status="accepted", seq=n) for n, p in enumerate(store.outbox(), 1)])
    logged = [LoggedEvent(**dict(p), seq=n, origin="dev") for n, p in enumerate((p.event for p in store.outbox()), 1)]
    await store.apply_remote(logged, len(logged))
    assert store.pending_count() == 0
    reply, run = new_id(), new_id()
    sent = _event(EventType.QUEUED_MESSAGE_SENT, QueuedSend(message_id=follow_up.id, chat_id=chat.id, parent_id=answer.id,
                                                            run_id=new_id(), reply_id=reply, assistant_id="demo"))  # fmt: skip
    again = _event(EventType.ASSISTANT_RUN_CONTINUED, RunContinue(run_id=run, chat_id=chat.id, message_id=answer.id, assistant_id="demo"))
    for event in (sent, again):
        await store.add_local(event)
    continued = store.message(answer.id)
    assert continued is not None and (continued.status, continued.run_id, continued.finish_reason) == ("queued", run, None)
    assert store.queued(chat.id) == [] and store.message(reply) is not None
    await store.record_results([EventResult(event_id=e.event_id, status="rejected", error="no") for e in (sent, again)])
    assert [m.id for m in store.queued(chat.id)] == [follow_up.id] and store.message(reply) is None
    restored = store.message(answer.id)
    assert restored is not None and (restored.status, restored.run_id, restored.content) == ("cancelled", answer.run_id, "a")
    store.close()


# --- between devices, through the real server ----------------------------------------------------


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[Quart]:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url))
    async with app.test_app():
        yield app


async def test_settings_presets_and_queued_messages_reach_every_device(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a, b = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    terse = Preset(id=new_id(), name="Terse", assistant_id="demo", instructions="Be terse.", created_at=T)
    await a.add(EventType.SETTINGS_UPDATED, AccountSettings(id=SETTINGS_ID, instructions="Metric.", default_preset_id=terse.id, created_at=T))
    await a.add(EventType.PRESET_CREATED, terse)
    chat = Chat(id=new_id(), title="t", created_at=T, instructions="Two of us.", preset_id=terse.id)
    await a.add(EventType.CHAT_CREATED, chat)
    first = await a.say(chat.id, "hello")
    # For an assistant of the devices (the local helper), which the server leaves to them: one for
    # no assistant, ready, is sent by the server's run worker as soon as it looks, which on a
    # loaded machine came between the two devices' syncs (and the queue then differed).
    follow_up = queued_message(chat, "and then?").model_copy(update={"assistant_id": LOCAL_TOOLS_ID})
    await a.add(EventType.MESSAGE_APPENDED, follow_up)
    await a.sync()
    await b.sync()
    assert a.store.confirmed() == b.store.confirmed()
    settings = b.store.settings()
    assert settings is not None and (settings.instructions, settings.default_preset_id) == ("Metric.", terse.id)
    assert [p.name for p in b.store.presets()] == ["Terse"]
    shown_chat = b.store.chat(chat.id)
    assert shown_chat is not None and (shown_chat.instructions, shown_chat.preset_id) == ("Two of us.", terse.id)
    assert [m.id for m in b.store.queued(chat.id)] == [follow_up.id]
    # Sent from b ("Send now", no run): a sees it leave its queue and join the chat.
    await b.add(EventType.QUEUED_MESSAGE_SENT, QueuedSend(message_id=follow_up.id, chat_id=chat.id, parent_id=first))
    await b.sync()
    await a.sync()
    assert a.store.queued(chat.id) == [] and [s.id for s in a.store.shown_path(chat.id)] == [first, follow_up.id]
    # A preset deleted on a: gone from b, its chat keeps the id.
    await a.add(EventType.PRESET_DELETED, PresetRef(id=terse.id))
    await a.sync()
    await b.sync()
    assert b.store.presets() == [] and b.store.preset(terse.id) is None
    assert a.store.confirmed() == b.store.confirmed()
    for device in (a, b):
        device.store.close()


async def test_a_full_resync_brings_the_settings_and_presets_and_drops_what_the_server_lacks(app: Quart, tmp_path: Path) -> None:
    token = await signup(app)
    a = Device(app, token, tmp_path / "a.db")
    await a.add(EventType.SETTINGS_UPDATED, AccountSettings(id=SETTINGS_ID, instructions="Kept.", created_at=T))
    await a.add(EventType.PRESET_CREATED, Preset(id=new_id(), name="Kept", created_at=T))
    await a.sync()
    # A preset the server does not have sneaks into the confirmed state, and one is being made here.
    ghost = (new_id(), "Ghost", "", T, T, 1)
    a.store.conn.execute("INSERT INTO presets (id, name, instructions, created_at, updated_at, last_seq) VALUES (?, ?, ?, ?, ?, ?)", ghost)
    pending = Preset(id=new_id(), name="Pending", created_at=T)
    await a.add(EventType.PRESET_CREATED, pending)
    await a.engine.resync()
    assert [(p.name, is_pending(p)) for p in a.store.presets()] == [("Kept", False), ("Pending", True)]
    settings = a.store.settings()
    assert settings is not None and settings.instructions == "Kept."
    # And a new device, by the state path, gets them too.
    b = Device(app, token, tmp_path / "b.db")
    await b.sync()
    assert b.store.settings() == settings
    await a.sync()
    assert [p.name for p in b.store.presets()] == ["Kept"]  # (b synced before a sent its pending one)
    await b.sync()
    assert a.store.confirmed() == b.store.confirmed()
    for device in (a, b):
        device.store.close()
