"""Two real server processes (Hypercorn) on one PostgreSQL: a device on one receives, live and in
order, what is posted through the other (LISTEN/NOTIFY wakes its socket)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import websockets

from tests.conftest import drop_schema, postgres_schema
from tests.processes import Server
from tests.server.events import chat_created, new_id


@pytest.fixture
async def two_servers(tmp_path: Path) -> AsyncIterator[tuple[Server, Server]]:
    schema, url = await postgres_schema()
    first = Server(url, tmp_path / "first.log")
    await asyncio.to_thread(first.start)  # the first one creates the schema
    second = Server(url, tmp_path / "second.log")
    await asyncio.to_thread(second.start)
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()
        await drop_schema(schema)


async def test_a_commit_in_one_process_reaches_sockets_in_the_other(two_servers: tuple[Server, Server]) -> None:
    first, second = two_servers
    async with httpx.AsyncClient(base_url=second.url) as http:
        signup = await http.post("/auth/signup", json={"username": "multi", "password": "long enough"})
        token = signup.json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        socket_url = first.url.replace("http://", "ws://") + "/sync/live?afterSeq=0"
        async with websockets.connect(socket_url, additional_headers=headers) as socket:
            assert json.loads(await socket.recv()) == {"type": "caughtUp", "seq": 0}
            for _ in range(5):
                batch = [chat_created(new_id()) for _ in range(3)]
                response = await http.post("/sync/events", json={"events": batch}, headers=headers)
                assert response.status_code == 200
            seqs = []
            while len(seqs) < 15:
                frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
                if frame["type"] == "event":
                    seqs.append(frame["event"]["seq"])
            assert seqs == list(range(1, 16))
