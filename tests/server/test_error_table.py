"""The one error translation (server/errors.py), as a table: each exception the layers below a
route may raise becomes the status, code and sentence listed here, through a real app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from quart import Quart

from server import db, store
from server.app import create_app
from server.config import Settings
from server.errors import ERRORS
from tests.conftest import QUICK_PASSWORDS
from tests.server.conftest import bearer, signup

# exception raised -> (status, error, message, extra fields, headers)
EXPECTED: list[tuple[Exception, int, str, str, dict[str, Any], dict[str, str]]] = [
    (
        store.CursorExpired(4, 9), 410, "cursor_expired",
        "This cursor is older than the log: fetch /sync/state and start again from its upToSeq.",
        {"minAvailableSeq": 4, "currentSeq": 9}, {},
    ),
    (store.InvalidPage("this page token is not one of ours"), 400, "bad_request", "this page token is not one of ours", {}, {}),
    (store.UsernameTaken(), 409, "username_taken", "This username is taken: choose another.", {}, {}),
    (
        db.DatabaseUnavailable("the database is not open"), 503, "unavailable",
        "The database cannot be reached just now: try again in a moment.", {}, {"Retry-After": "5"},
    ),
]  # fmt: skip


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[Quart]:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url))

    @app.get("/raise/<int:index>")
    async def raise_it(index: int) -> None:
        raise EXPECTED[index][0]

    async with app.test_app():
        yield app


@pytest.mark.parametrize("index", range(len(EXPECTED)), ids=[type(row[0]).__name__ for row in EXPECTED])
async def test_each_exception_of_the_table_is_its_status_code_and_sentence(app: Quart, index: int) -> None:
    _, status, code, message, extra, headers = EXPECTED[index]
    response = await app.test_client().get(f"/raise/{index}")
    assert response.status_code == status
    assert response.content_type == "application/json"
    assert await response.get_json() == {"error": code, "message": message, **extra}
    for name, value in headers.items():
        assert response.headers[name] == value


def _subclasses(kind: type[Exception]) -> set[type[Exception]]:
    found = set()
    for sub in kind.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def test_the_table_is_this_test_and_covers_every_store_error() -> None:
    assert {type(row[0]) for row in EXPECTED} == set(ERRORS)
    # A new StoreError (or DatabaseError a request can meet) needs a line in the table; the
    # unique violation never leaves the store (it becomes UsernameTaken or a duplicate).
    assert _subclasses(store.StoreError) | (_subclasses(db.DatabaseError) - {db.UniqueViolation}) <= set(ERRORS)


async def test_the_routes_go_through_the_table(app: Quart) -> None:
    client = app.test_client(use_cookies=False)
    session = await signup(client)
    taken = await client.post("/auth/signup", json={"username": "alice", "password": "long enough"})
    assert taken.status_code == 409 and (await taken.get_json())["error"] == "username_taken"
    page = await client.get("/sync/state?page=nonsense", headers=bearer(session))
    assert page.status_code == 400 and (await page.get_json())["error"] == "bad_request"
    await app.extensions["store"].close()  # the database goes away under a request
    gone = await client.get("/sync/updates", headers=bearer(session))
    assert gone.status_code == 503 and (await gone.get_json())["error"] == "unavailable"
    await app.extensions["store"].open()  # (for the app's own shut-down)
