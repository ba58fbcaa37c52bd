"""The error codes of docs/protocol.md ("Errors") that need a particular setting or state to reach."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from quart import Quart
from quart.testing.connections import WebsocketDisconnectError

from server.app import create_app
from server.config import Settings
from tests.conftest import QUICK_PASSWORDS
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, message, new_id


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def limited(database_url: str) -> AsyncIterator[Quart]:
    settings = Settings(
        **QUICK_PASSWORDS,
        database_url=database_url, rate_limit_per_minute=6, auth_rate_limit_per_minute=9, max_content_chars=10
    )
    app = create_app(settings)
    async with app.test_app():
        yield app


async def test_too_many_requests_is_429_with_retry_after(limited: Quart) -> None:
    client = limited.test_client(use_cookies=False)
    session = await signup(client)
    codes = [(await client.get("/sync/updates", headers=bearer(session))).status_code for _ in range(3)]
    assert codes == [200, 429, 429]  # a burst of 6/6 = 1
    response = await client.get("/sync/updates", headers=bearer(session))
    body = await response.get_json()
    assert body["error"] == "rate_limited" and int(response.headers["Retry-After"]) >= 1
    # Another account has its own allowance.
    other = await signup(client, "other")
    assert (await client.get("/sync/updates", headers=bearer(other))).status_code == 200
    # Login attempts are limited per client address.
    attempts = [
        (await client.post("/auth/login", json={"username": "x", "password": "wrong password"})).status_code
        for _ in range(2)
    ]
    assert attempts == [401, 429]


async def test_content_over_the_limit_is_rejected(limited: Quart) -> None:
    client = limited.test_client(use_cookies=False)
    session = await signup(client)
    chat = new_id()
    events = [chat_created(chat), message("MessageAppended", new_id(), chat, "x" * 11)]
    response = await client.post("/sync/events", json={"events": events}, headers=bearer(session))
    results = (await response.get_json())["results"]
    assert [r["status"] for r in results] == ["accepted", "rejected"]
    assert "longer than 10 characters" in results[1]["error"]


async def test_a_request_for_an_answer_to_a_refused_question_is_refused_too(limited: Quart) -> None:
    """Else a run would answer a question that is not there (with no question at all)."""
    client = limited.test_client(use_cookies=False)
    session = await signup(client)
    chat, question, other_chat = new_id(), new_id(), new_id()

    def asked(parent: str, in_chat: str = chat) -> dict[str, object]:
        run = {"runId": new_id(), "chatId": in_chat, "parentId": parent, "messageId": new_id(), "assistantId": "demo"}
        return {"eventId": new_id(), "type": "AssistantRunRequested", "payload": run, "createdAt": "2026-11-30T12:00:00.000Z"}

    short = new_id()
    events = [
        chat_created(chat), chat_created(other_chat), message("MessageAppended", question, chat, "x" * 11), asked(question),
        message("MessageAppended", short, chat, "fine"), asked(short), asked(short, other_chat),
    ]  # fmt: skip
    response = await client.post("/sync/events", json={"events": events}, headers=bearer(session))
    results = (await response.get_json())["results"]
    statuses = ["accepted", "accepted", "rejected", "rejected", "accepted", "accepted", "rejected"]
    assert [r["status"] for r in results] == statuses
    assert results[3]["error"] == results[6]["error"] == "the message to answer (parentId) is not in this chat"


async def test_a_cookie_from_another_sites_page_is_forbidden(app: Quart) -> None:
    client = app.test_client()
    await signup(client)
    body = {"events": [chat_created(new_id())]}
    foreign = await client.post("/sync/events", json=body, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and (await foreign.get_json())["error"] == "forbidden"
    own = await client.post("/sync/events", json=body, headers={"Origin": "http://localhost"})
    assert own.status_code == 200


async def test_an_expired_cursor_is_410_and_closes_the_socket_with_4410(database_url: str) -> None:
    clock = Clock()
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url, compact_interval_seconds=0), clock=clock)
    async with app.test_app():
        client = app.test_client(use_cookies=False)
        session = await signup(client)
        events = [chat_created(new_id()) for _ in range(3)]
        await client.post("/sync/events", json={"events": events}, headers=bearer(session))
        clock.now += timedelta(hours=1)
        await app.extensions["store"].compact_all(retention_seconds=60, grace_seconds=0)

        response = await client.get("/sync/updates?afterSeq=1", headers=bearer(session))
        body = await response.get_json()
        assert response.status_code == 410
        assert body["error"] == "cursor_expired" and body["minAvailableSeq"] == 4 and body["currentSeq"] == 3
        state = await client.get("/sync/state?upToSeq=1", headers=bearer(session))
        assert state.status_code == 410
        # From the current state, a client goes on.
        assert (await client.get("/sync/updates?afterSeq=3", headers=bearer(session))).status_code == 200

        async with client.websocket("/sync/live?afterSeq=1", headers=bearer(session)) as ws:
            with pytest.raises(WebsocketDisconnectError) as closed:
                await asyncio.wait_for(ws.receive(), 5)
        assert closed.value.args[0] == 4410
        async with client.websocket("/sync/live?afterSeq=3", headers=bearer(session)) as ws:
            assert json.loads(await asyncio.wait_for(ws.receive(), 5)) == {"type": "caughtUp", "seq": 3}
