"""Live fan-out across server processes on one PostgreSQL.

Every append transaction NOTIFYs ``chat_log`` with ``"<account> <seq>"`` (server/append_sql.py),
delivered at commit. Each process keeps one connection that LISTENs and wakes its local sockets of
that account (server/live.py); the sockets then read the events from the store, so a lost or
duplicated notification can delay an event but never drop or repeat one. When the listening
connection breaks, it reconnects with backoff and then wakes every socket, in case a notification
went by while it was away.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import asyncpg

from server.append_sql import NOTIFY_CHANNEL
from server.db import Database
from server.live import Hub
from shared.models import DeltaFrame

# Streamed tokens (``delta`` frames) reach every process's sockets through this channel, as
# "<account> <frame JSON>". A NOTIFY payload holds under 8,000 bytes, so long texts are split.
DELTA_CHANNEL = "chat_delta"
# "<account> <message id>": the reply's run has ended; every process forgets its stream (live.py).
STREAM_END_CHANNEL = "chat_stream_end"
DELTA_CHUNK = 1000  # characters: at most 4 bytes each in UTF-8, with room for the frame around


def delta_frames(frame: DeltaFrame) -> list[str]:
    """The frame as JSON texts small enough for one notification each, offsets kept right."""
    chunks = [frame.text[i : i + DELTA_CHUNK] for i in range(0, len(frame.text), DELTA_CHUNK)] or [""]
    offsets = [frame.offset + i * DELTA_CHUNK for i in range(len(chunks))]
    return [
        json.dumps(frame.model_copy(update={"text": chunk, "offset": offset}).wire())
        for chunk, offset in zip(chunks, offsets)
    ]


async def publish_delta(db: Database, hub: Hub, account_id: str, frame: DeltaFrame) -> None:
    """Send a delta frame to every socket of the account: through PostgreSQL to every process
    (this one included, by its own listener), or straight to this process's sockets on SQLite."""
    for text in delta_frames(frame):
        if db.dialect == "postgres":
            await db.read_one("SELECT pg_notify(?, ?)", DELTA_CHANNEL, f"{account_id} {text}")
        else:
            hub.publish(account_id, text)


async def publish_end(db: Database, hub: Hub, account_id: str, message_id: str) -> None:
    """The reply's run has ended: every process forgets the text it kept of its stream. (Sent
    after the run's last delta, on the same path, so it comes after them everywhere.)"""
    if db.dialect == "postgres":
        await db.read_one("SELECT pg_notify(?, ?)", STREAM_END_CHANNEL, f"{account_id} {message_id}")
    else:
        hub.end(account_id, message_id)

log = logging.getLogger(__name__)


class PostgresListener:
    def __init__(self, url: str, hub: Hub, max_backoff: float = 5.0) -> None:
        self._url = url
        self._hub = hub
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()  # set while the listening connection is up
        self._heard_before = False  # (a connection after the first one wakes every socket)

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        async with asyncio.timeout(30):
            await self._connected.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def _on_notification(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        account, _, rest = payload.partition(" ")
        if channel == DELTA_CHANNEL:
            self._hub.publish(account, rest)
        elif channel == STREAM_END_CHANNEL:
            self._hub.end(account, rest)
        else:
            self._hub.notify(account, int(rest))

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(self._url)
            except (OSError, asyncpg.PostgresError) as e:
                log.warning("fan-out: cannot connect to PostgreSQL (%s); retrying", e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            try:
                connection.add_termination_listener(lambda _, lost=lost: lost.set())
                await connection.add_listener(NOTIFY_CHANNEL, self._on_notification)
                await connection.add_listener(DELTA_CHANNEL, self._on_notification)
                await connection.add_listener(STREAM_END_CHANNEL, self._on_notification)
                backoff = 0.1
                if self._heard_before:
                    self._hub.notify_all()  # back after a gap: nothing may stay unseen
                    self._hub.streams_interrupted()  # (and deltas may have gone by)
                self._heard_before = True
                self._connected.set()
                await lost.wait()
                log.warning("fan-out: the listening connection was lost; reconnecting")
            finally:
                self._connected.clear()  # (/readyz says so until it is back)
                await connection.close(timeout=5)
