"""`python -m server compact` and the background compactor, on both backends."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from server.app import create_app
from server.config import ROOT, Settings
from server.databases import open_database
from server.event_store import SqlEventStore
from server.store import CursorExpired
from shared.models import DomainEvent
from tests.conftest import QUICK_PASSWORDS
from tests.server.events import chat_created, new_id


def past() -> datetime:
    return datetime(2020, 1, 1, tzinfo=UTC)


async def seeded(database_url: str) -> tuple[str, SqlEventStore]:
    store = SqlEventStore(open_database(database_url), past)  # events logged long ago
    await store.open()
    account = new_id()
    await store.append(account, "dev", [DomainEvent.model_validate(chat_created(new_id())) for _ in range(3)])
    return account, store


async def test_the_compact_command_runs_one_pass(database_url: str) -> None:
    account, store = await seeded(database_url)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "server", "compact", "--database-url", database_url, "--retention-seconds", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"{account}: 0 superseded removed, 3 truncated, min available seq 4" in done.stdout
    with pytest.raises(CursorExpired):
        await store.read_updates(account, 0, 10)
    assert (await store.read_updates(account, 3, 10)).events == []
    await store.close()


async def test_the_server_compacts_in_the_background(database_url: str) -> None:
    account, store = await seeded(database_url)
    await store.close()
    settings = Settings(**QUICK_PASSWORDS, database_url=database_url, compact_interval_seconds=0.05, retention_seconds=60)
    app = create_app(settings)
    async with app.test_app():
        live_store = app.extensions["store"]
        for _ in range(100):
            if await live_store.min_available_seq(account) == 4:
                break
            await asyncio.sleep(0.05)
        assert await live_store.min_available_seq(account) == 4
