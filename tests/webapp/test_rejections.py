"""A message the server refuses stays on screen with the reason (seed 003: a failed message is not
removed from the UI): Edit and resend delivers the corrected one, Discard removes it."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from quart import Quart

from server.app import create_app
from server.config import Settings
from shared.ids import Uuid7Generator
from tests.conftest import QUICK_PASSWORDS
from tests.webapp.devices import Device, T, signup
from tests.webapp.page import FakePage
from webapp.app import Client, Services

new_id = Uuid7Generator(itertools.count(1_700_000_000_000).__next__, os.urandom)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Quart]:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=f"sqlite:///{tmp_path / 'server.db'}", max_content_chars=20,
                              run_poll_seconds=3600))  # fmt: skip
    async with app.test_app():
        yield app


async def test_a_refused_message_stays_until_it_is_resent_corrected_or_discarded(app: Quart, tmp_path: Path) -> None:
    device = Device(app, await signup(app), tmp_path / "a.db")
    page = FakePage()
    client = Client(Services(device.store, page, None, device.transport, new_id, lambda: T))  # type: ignore[arg-type]
    client.engine = device.engine
    await client.dispatch("new-chat", {})
    chat = client.selected or ""
    await client.dispatch("send", {"text": "a question far too long for this server", "assistant": "demo"})
    await device.sync()
    client.redraw()

    # Refused, with the reason; the request for its answer was refused with it and is part of it.
    [question, request] = device.store.rejected(chat)
    assert device.store.messages(chat) == [] and device.store.pending_count() == 0
    assert list(page.items) == [f"r-{question.event.event_id}"]
    shown = page.messages
    assert 'data-state="rejected"' in shown and "a question far too long for this server" in shown
    assert "Not accepted: the message is longer than 20 characters (this server&#x27;s limit)" in shown
    assert ">Edit and resend<" in shown and ">Discard<" in shown
    assert request.error == "the message to answer (parentId) is not in this chat"

    # Edit and resend: the text goes back into the composer; the corrected one is delivered and
    # asked of the same assistant; the refused one is gone in the same write.
    await client.dispatch("resend", {"id": question.event.event_id})
    assert page.composer.text == "a question far too long for this server" and "did not accept" in (page.composer.note or "")
    await client.dispatch("send", {"text": "a short question"})
    assert device.store.rejected(chat) == []
    await device.sync()
    client.redraw()
    delivered, reply = device.store.messages(chat)
    assert delivered.content == "a short question" and delivered.last_seq and device.store.rejected(chat) == []
    assert reply.parent_id == delivered.id and reply.assistant_id == "demo" and reply.run_id
    assert list(page.items) == [f"m-{delivered.id}", f"m-{reply.id}"]

    # Discard: gone, with nothing sent.
    await client.dispatch("send", {"text": "another one far too long for it", "assistant": ""})
    await device.sync()
    client.redraw()
    [refused] = device.store.rejected(chat)
    assert f"r-{refused.event.event_id}" in page.items
    await client.dispatch("discard", {"id": refused.event.event_id})
    assert device.store.rejected(chat) == [] and f"r-{refused.event.event_id}" not in page.items
    assert len(device.store.messages(chat)) == 2
