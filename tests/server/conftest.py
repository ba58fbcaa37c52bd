from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from quart import Quart
from quart.typing import TestClientProtocol as Client

from server.app import create_app
from server.config import Settings
from tests.conftest import QUICK_PASSWORDS
from tests.fake_upstream import FakeUpstream


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[Quart]:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url, ping_seconds=0.5))
    async with app.test_app():
        yield app


@pytest.fixture
def client(app: Quart) -> Client:
    return app.test_client(use_cookies=False)


async def signup(client: Client, username: str = "alice") -> dict[str, Any]:
    response = await client.post("/auth/signup", json={"username": username, "password": "correct horse"})
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


def bearer(session: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['token']}"}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    """A fake OpenAI-compatible service (tests/fake_upstream.py) for the assistants' runs."""
    fake = FakeUpstream()
    server = await fake.start()
    yield fake
    server.close()
