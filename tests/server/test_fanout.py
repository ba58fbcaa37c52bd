"""The LISTEN side of cross-process fan-out, against the real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg

from server.appender import NOTIFY_CHANNEL
from server.fanout import PostgresListener
from server.live import Hub, SharedReads, Subscription
from server.store import Updates
from tests.conftest import POSTGRES_URL


class EmptyLog:
    async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
        return Updates(events=[], has_more=False, current_seq=after_seq)


async def woken(mailbox: Subscription, timeout: float = 10) -> bool:
    try:
        await asyncio.wait_for(mailbox.ready.wait(), timeout)
    except TimeoutError:
        return False
    mailbox.ready.clear()
    return mailbox.log_changed


async def test_notifications_wake_the_account_and_a_lost_connection_comes_back() -> None:
    hub = Hub(SharedReads(EmptyLog()))  # type: ignore[arg-type]
    mine, other = hub.subscribe("account-a"), hub.subscribe("account-b")
    listener = PostgresListener(POSTGRES_URL, hub, max_backoff=0.2)
    await listener.start()
    sender = await asyncpg.connect(POSTGRES_URL)
    try:
        await sender.execute(f"SELECT pg_notify('{NOTIFY_CHANNEL}', 'account-a 7')")
        assert await woken(mine)
        assert not other.ready.is_set()

        # The listening connection is killed: it reconnects, and wakes everyone in case a
        # notification went by meanwhile.
        await sender.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
        )
        assert await woken(other)
        assert await woken(mine)
        await sender.execute(f"SELECT pg_notify('{NOTIFY_CHANNEL}', 'account-b 9')")
        assert await woken(other)
    finally:
        await sender.close()
        await listener.stop()
