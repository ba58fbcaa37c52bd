"""The chaos devices' live socket (server/chaos/transport.py) ends as a page's does: closed under
a receive that waits for a frame, the receive raises the close, never a cancellation."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from server.chaos.transport import ChaosSocket, HttpTransport
from shared.models import DomainEvent, EventType, LoggedEvent, Message, UpdatesResponse
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


async def test_a_push_whose_answer_was_lost_is_recorded_when_its_event_comes_back_through_the_log() -> None:
    """Found by the suite's chaos minute (seed 22, `lost 1`): a server killed while answering a
    push had stored its edit; the device took the event back from the log as its confirmation
    and never pushed it again, so no answer was ever recorded for it, and the checker held the
    message's earlier text as its latest accepted one."""
    edit = DomainEvent(
        event_id="0193a000-0000-7000-8000-0000000000e1", type=EventType.MESSAGE_EDITED, created_at="2026-12-06T15:49:17.000Z",
        payload=Message(id="0193a000-0000-7000-8000-000000000002", chat_id="0193a000-0000-7000-8000-000000000001", role="user",
                        content="edited", created_at="2026-12-06T15:49:11.000Z"),
    )  # fmt: skip
    logged = LoggedEvent(**edit.model_dump(), seq=191, origin="d3")

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/sync/events":
            raise httpx.RemoteProtocolError("the server went while answering")
        return httpx.Response(200, json=UpdatesResponse(events=[logged], has_more=False, current_seq=191).wire())

    records: list[dict[str, Any]] = []
    transport = HttpTransport(["http://127.0.0.1:9"], "d3", records.append)
    transport.client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    with pytest.raises(NetworkError):
        await transport.submit([edit])
    assert records == []
    await transport.updates(190, 100)
    await transport.updates(190, 100)  # (recorded once)
    assert records == [
        {"op": "result", "device": "d3", "event": edit.event_id, "type": "MessageEdited", "status": "logged", "seq": 191, "error": None}
    ]
    await transport.close()
