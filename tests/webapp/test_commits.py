"""What a sent message costs the device in durable commits (each one a strict IndexedDB
transaction in the browser: webapp/chunks.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from server.app import create_app
from server.config import Settings
from tests.conftest import QUICK_PASSWORDS
from tests.webapp.devices import Device, T, new_id, signup
from tests.webapp.page import FakePage
from tests.webapp.test_store import RecordingPersistence
from webapp.app import NO_ASSISTANT, Client, Services
from webapp.sync import Status


@asynccontextmanager
async def online_client(tmp_path: Path, assistant: str) -> AsyncIterator[tuple[Client, Device, RecordingPersistence]]:
    """A signed-in device online with a server, ``assistant`` chosen (a commit of its own)."""
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=f"sqlite:///{tmp_path / 'server.db'}"))
    async with app.test_app():
        persistence = RecordingPersistence()
        device = Device(app, await signup(app), tmp_path / "a.db", persistence)
        client = Client(Services(device.store, FakePage(), None, device.transport, new_id, lambda: T))  # type: ignore[arg-type]
        client.engine = device.engine
        client.engine.status = Status.ONLINE
        await client.dispatch("choose-assistant", {"assistant": assistant})
        yield client, device, persistence


async def test_a_sent_message_costs_four_durable_commits_its_draft_cleared_in_the_first(tmp_path: Path) -> None:
    async with online_client(tmp_path, NO_ASSISTANT) as (client, device, persistence):
        await client.dispatch("new-chat", {})
        chat = client.selected or ""
        before = len(persistence.flushes)
        await client.dispatch("send", {"text": "the first message names the chat", "assistant": NO_ASSISTANT})
        assert len(persistence.flushes) == before + 1  # (the chat named after it in the same commit)
        assert device.store.chat(chat).title == "the first message names the chat"  # type: ignore[union-attr]
        await device.sync()
        await client.dispatch("draft", {"chat": chat, "text": "half a thought"})

        before = len(persistence.flushes)
        await client.dispatch("send", {"text": "the whole thought", "assistant": NO_ASSISTANT})
        assert len(persistence.flushes) == before + 1  # the message, and its draft gone with it
        assert device.store.draft(chat) == ""
        await client.dispatch("draft", {"chat": chat, "text": ""})  # (the page's emptied composer: nothing to write)
        assert len(persistence.flushes) == before + 1
        await device.engine.push()  # the send attempted, the server's answer
        await device.engine.pull()  # the event back through the log
        assert len(persistence.flushes) == before + 4
        assert not device.store.pending_count()


async def test_a_first_message_sent_in_no_chat_makes_its_chat_named_after_it_and_its_run_in_one_commit(tmp_path: Path) -> None:
    """The page sends a message written in no chat with the id of the chat it is to make: the
    chat (already named after the message), the message and the run that answers it are one
    transaction, one durable commit, not four one after another (and never a message saved
    whose run was not, should the tab close between them)."""
    async with online_client(tmp_path, "demo") as (client, device, persistence):
        chat, message = new_id(), new_id()
        before = len(persistence.flushes)
        await client.dispatch("send", {"id": message, "chat": chat, "newChat": True, "text": "Plans for the weekend\nand more", "assistant": "demo"})  # fmt: skip
        assert len(persistence.flushes) == before + 1
        made = device.store.chat(chat)
        assert made is not None and made.title == "Plans for the weekend" and client.selected == chat
        assert [p.event.type.value for p in device.store.outbox()] == ["ChatCreated", "MessageAppended", "AssistantRunRequested"]
        await device.engine.push()
        await device.engine.pull()
        assert not device.store.pending_count() and device.store.chat(chat).title == "Plans for the weekend"  # type: ignore[union-attr]
        assert [m.role for m in device.store.messages(chat)] == ["user", "assistant"]
