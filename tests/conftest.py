"""Fixtures and hooks shared by every test package."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import settings

# No Hypothesis deadline: it is a timed assertion (one slow example fails the test), and these
# tests also run on a loaded machine. Performance is for tests/bench.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# The tests' accounts are hashed with Argon2id at its least cost (settings of the server, whose
# defaults cost about 0.2 s of CPU a sign-up or login: the tests outside tests/e2e spent about
# 100 s of CPU on them). In-process apps get it from their Settings; the servers the tests start
# as processes (and theirs: the chaos checker's, the command-line tools') from the environment.
QUICK_PASSWORDS = {"password_memory_kib": 32, "password_time_cost": 1}
os.environ.update({f"CHAT_{name.upper()}": str(value) for name, value in QUICK_PASSWORDS.items()})

# The PostgreSQL the tests use (a server runs at 127.0.0.1:5432 on these machines; CI too).
# A missing server fails the tests that need it, loudly: it is never a skip.
POSTGRES_URL = os.environ.get("CHAT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the Playwright tests last.

    pytest-playwright's sync API keeps an asyncio loop running in the main thread from its first
    test to the end of the session (its `playwright` fixture is session-scoped), and pytest-asyncio
    cannot start a loop of its own inside it. Every async test therefore runs before the browser.
    """
    items.sort(key=lambda item: item.nodeid.startswith("tests/e2e/"))


async def postgres_schema() -> tuple[str, str]:
    """A fresh schema on the test server; returns (schema, URL whose search_path is it)."""
    try:
        conn = await asyncpg.connect(POSTGRES_URL)
    except (OSError, asyncpg.PostgreSQLError) as e:
        pytest.fail(
            f"PostgreSQL is needed at {POSTGRES_URL} (set CHAT_TEST_POSTGRES_URL): {e}", pytrace=False
        )
    schema = f"test_{uuid.uuid4().hex[:12]}"
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    separator = "&" if "?" in POSTGRES_URL else "?"
    return schema, f"{POSTGRES_URL}{separator}search_path={schema}"


async def drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Each test that uses it runs once per backend: the same contract, SQLite and PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chat.db'}"
        return
    schema, url = await postgres_schema()
    try:
        yield url
    finally:
        await drop_schema(schema)
