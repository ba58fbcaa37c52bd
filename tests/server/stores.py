"""Open a store on either backend from synchronous code (Hypothesis drives its own loop)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from server.databases import open_database
from server.event_store import SqlEventStore
from tests.conftest import drop_schema, postgres_schema


class Clock:
    """A settable clock: compaction and grace periods are about time."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def open_store(
    backend: str, tmp_path: Path, clock: Callable[[], datetime]
) -> tuple[SqlEventStore, Callable[[], Awaitable[None]]]:
    if backend == "sqlite":
        store = SqlEventStore(open_database(f"sqlite:///{tmp_path / 'store.db'}"), clock)
        await store.open()
        return store, store.close

    schema, url = await postgres_schema()
    store = SqlEventStore(open_database(url), clock)
    await store.open()

    async def cleanup() -> None:
        await store.close()
        await drop_schema(schema)

    return store, cleanup
