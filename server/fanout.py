"""Live fan-out across server processes on one PostgreSQL.

Every append transaction NOTIFYs ``chat_log`` with ``"<account> <seq>"`` (server/appender.py),
delivered at commit. Each process keeps one connection that LISTENs and wakes its local sockets of
that account (server/live.py); the sockets then read the events from the store, so a lost or
duplicated notification can delay an event but never drop or repeat one. When the listening
connection breaks, it reconnects with backoff and then wakes every socket, in case a notification
went by while it was away.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

from server.appender import NOTIFY_CHANNEL
from server.live import Hub

log = logging.getLogger(__name__)


class PostgresListener:
    def __init__(self, url: str, hub: Hub, max_backoff: float = 5.0) -> None:
        self._url = url
        self._hub = hub
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        await asyncio.wait_for(self._connected.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def _on_notification(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        account, _, _ = payload.partition(" ")
        self._hub.notify(account)

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
                connection.add_termination_listener(lambda _: lost.set())
                await connection.add_listener(NOTIFY_CHANNEL, self._on_notification)
                backoff = 0.1
                if self._connected.is_set():
                    self._hub.notify_all()  # back after a gap: nothing may stay unseen
                self._connected.set()
                await lost.wait()
                log.warning("fan-out: the listening connection was lost; reconnecting")
            finally:
                await connection.close(timeout=5)
