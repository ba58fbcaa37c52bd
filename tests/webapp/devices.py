"""Simulated browsers for the sync tests: a local database file and an engine each, talking to
the real server app in-process."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

from quart import Quart

from shared.ids import Uuid7Generator
from shared.models import Chat, DomainEvent, EventType, Message, Payload
from tests.webapp.inprocess import InProcessTransport
from webapp.database import FilePersistence, Persistence
from webapp.store import LocalStore
from webapp.sync import SyncEngine

new_id = Uuid7Generator(itertools.count(1_700_000_000_000).__next__, os.urandom)
T = "2026-11-30T12:00:00.000Z"


class Device:
    """One browser: a local database file and an engine, over an in-process transport."""

    def __init__(self, app: Quart, token: str, path: Path, persistence: Persistence | None = None) -> None:
        self.path = path
        self.persistence = persistence or FilePersistence()
        self.transport = InProcessTransport(app.test_client(use_cookies=False), token)
        # A pull or a push under way in a task of its own (its answer held by the network): the
        # engine never runs two pulls or two pushes at once, and neither does sync() here.
        self.under_way: dict[str, asyncio.Task[None]] = {}
        self.open()

    def open(self) -> None:
        self.store = LocalStore(str(self.path), self.persistence)
        self.engine = SyncEngine(
            self.store, self.transport, lambda: None, lambda s: None, min_backoff=0.01, max_backoff=0.05
        )

    def reload(self) -> None:
        """The tab is closed and opened again: memory is lost, the database file stays (and what
        was under way dies with the tab: a request the server had stays there)."""
        for task in self.under_way.values():
            task.cancel()
        self.under_way.clear()
        self.transport.held.clear()
        self.store.close()
        self.open()

    async def add(self, kind: EventType, payload: Payload) -> DomainEvent:
        event = DomainEvent(event_id=new_id(), type=kind, payload=payload, created_at=T)
        await self.store.add_local(event)
        return event

    async def new_chat(self) -> str:
        chat = Chat(id=new_id(), title="chat", created_at=T)
        await self.add(EventType.CHAT_CREATED, chat)
        return chat.id

    async def say(self, chat_id: str, text: str) -> str:
        message = Message(id=new_id(), chat_id=chat_id, role="user", content=text, created_at=T)
        await self.add(EventType.MESSAGE_APPENDED, message)
        return message.id

    async def sync(self) -> None:
        for step in (self.engine.pull, self.engine.push, self.engine.pull):
            if step.__name__ not in self.under_way:
                await step()


async def signup(app: Quart) -> str:
    response = await app.test_client().post("/auth/signup", json={"username": "ann", "password": "long enough"})
    token: str = (await response.get_json())["token"]
    return token


