"""The chaos devices' live socket (server/chaos/transport.py) ends as a page's does: closed under
a receive that waits for a frame, the receive raises the close, never a cancellation."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from server.chaos.transport import ChaosSocket
from webapp.transport import NetworkError


async def test_a_socket_closed_under_a_waiting_receive_raises_the_close() -> None:
    """Found by a 3-minute run (seed 676258, `lost 126`): the socket's close cancelled the frame
    it had asked for (``ready``), and with it the engine's wait in ``receive``: a cancellation
    that ended the engine, so the devices whose sockets the nemesis closed synced nothing more."""

    async def silent(ws: ServerConnection) -> None:
        await ws.wait_closed()

    async with serve(silent, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        records: list[dict[str, Any]] = []
        transport = SimpleNamespace(record=records.append, device="d1", sockets=[])
        socket = ChaosSocket(await connect(f"ws://127.0.0.1:{port}"), transport, 1)  # type: ignore[arg-type]
        transport.sockets.append(socket)
        assert socket.ready() is None  # (nothing yet: the next frame is asked for)
        waiting = asyncio.ensure_future(socket.receive())
        await asyncio.sleep(0.05)
        await socket.close()  # (as the nemesis's offline does, under the engine)
        with pytest.raises(NetworkError):
            await waiting
