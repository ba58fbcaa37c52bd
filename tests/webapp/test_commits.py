"""What a sent message costs the device in durable commits (each one a strict IndexedDB
transaction in the browser: webapp/chunks.py)."""

from __future__ import annotations

from pathlib import Path

from server.app import create_app
from server.config import Settings
from tests.webapp.devices import Device, T, new_id, signup
from tests.webapp.page import FakePage
from tests.webapp.test_store import RecordingPersistence
from webapp.app import NO_ASSISTANT, Client, Services
from webapp.sync import Status


async def test_a_sent_message_costs_four_durable_commits_its_draft_cleared_in_the_first(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'server.db'}"))
    async with app.test_app():
        persistence = RecordingPersistence()
        device = Device(app, await signup(app), tmp_path / "a.db", persistence)
        client = Client(Services(device.store, FakePage(), None, device.transport, new_id, lambda: T))  # type: ignore[arg-type]
        client.engine = device.engine
        client.engine.status = Status.ONLINE
        await client.dispatch("new-chat", {})
        chat = client.selected or ""
        await client.dispatch("send", {"text": "the first message names the chat", "assistant": NO_ASSISTANT})
        await device.sync()
        await client.dispatch("draft", {"chat": chat, "text": "half a thought"})

        before = len(persistence.flushes)
        await client.dispatch("send", {"text": "the whole thought", "assistant": NO_ASSISTANT})
        assert len(persistence.flushes) == before + 1  # the message, and its draft gone with it
        assert device.store.draft(chat) == ""
        await device.engine.push()  # the send attempted, the server's answer
        await device.engine.pull()  # the event back through the log
        assert len(persistence.flushes) == before + 4
        assert not device.store.pending_count()
