"""The LISTEN side of cross-process fan-out, against the real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from server.append_sql import NOTIFY_CHANNEL
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


async def until_connected(listener: PostgresListener, connected: bool, timeout: float = 10) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while listener.connected != connected:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_a_listener_that_cannot_reconnect_says_it_is_not_connected_until_it_is_back() -> None:
    """What /readyz reports: while the listening connection is gone and cannot come back, the
    listener is not connected; once it is back, it is."""
    role = f"fanout_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(POSTGRES_URL)
    await admin.execute(f"CREATE ROLE {role} LOGIN")
    url = POSTGRES_URL.replace("postgres@", f"{role}@", 1)
    assert url != POSTGRES_URL
    hub = Hub(SharedReads(EmptyLog()))  # type: ignore[arg-type]
    listener = PostgresListener(url, hub, max_backoff=0.1)
    try:
        await listener.start()
        assert listener.connected
        await admin.execute(f"ALTER ROLE {role} NOLOGIN")  # it cannot come back...
        await admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
        assert await until_connected(listener, False)
        await admin.execute(f"ALTER ROLE {role} LOGIN")  # ...until it can
        assert await until_connected(listener, True)
    finally:
        await listener.stop()
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()
