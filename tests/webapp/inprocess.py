"""A Transport that talks to the real server app in-process (Quart's test client), and can be
switched offline: the sync engine's code path under CPython, against the real server code."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import TypeAdapter
from quart.testing.connections import WebsocketDisconnectError
from quart.typing import TestClientProtocol as Client

from shared.models import (
    DomainEvent,
    Frame,
    StateResponse,
    SubmitResponse,
    UpdatesResponse,
)
from webapp.transport import (
    AnyFrame,
    CursorExpiredError,
    NetworkError,
    ServerError,
    Unauthorized,
    close_error,
)

FRAME: TypeAdapter[Any] = TypeAdapter(Frame)


class InProcessSocket:
    """Frames are read by a task into a queue, so closing from our side wakes a waiting receive."""

    def __init__(self, context: Any, transport: InProcessTransport) -> None:
        self._context = context
        self._transport = transport
        self._queue: asyncio.Queue[Exception | str] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self) -> InProcessSocket:
        ws = await self._context.__aenter__()
        self._transport.sockets.append(self)
        self._reader = asyncio.ensure_future(self._read(ws))
        return self

    async def _read(self, ws: Any) -> None:
        try:
            while True:
                self._queue.put_nowait(await ws.receive())
        except WebsocketDisconnectError as e:
            self._queue.put_nowait(close_error(int(e.args[0]) if e.args else 1006, ""))

    async def receive(self) -> AnyFrame:
        item = await self._queue.get()
        if isinstance(item, Exception):
            self._queue.put_nowait(item)  # stays closed
            raise item
        frame: AnyFrame = FRAME.validate_json(item)
        return frame

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.put_nowait(NetworkError("closed"))
        if self._reader is not None:
            self._reader.cancel()
        await self._context.__aexit__(None, None, None)


class InProcessTransport:
    def __init__(self, client: Client, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}
        self.offline = False
        self.sockets: list[InProcessSocket] = []

    async def go_offline(self) -> None:
        self.offline = True
        for socket in self.sockets:
            await socket.close()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        if self.offline:
            raise NetworkError("offline")
        response = await self.client.open(path, method=method, json=body, headers=self.headers)
        data = await response.get_json()
        if response.status_code == 401:
            raise Unauthorized(data["message"])
        if response.status_code == 410:
            raise CursorExpiredError(data["message"])
        if response.status_code >= 400:
            raise ServerError(data["message"])
        return data

    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse:
        return UpdatesResponse.model_validate(await self._call("GET", f"/sync/updates?afterSeq={after_seq}&limit={limit}"))

    async def state(self, up_to_seq: int | None, page: str | None) -> StateResponse:
        query = "limit=2"  # small pages, so paging is exercised
        if up_to_seq is not None:
            query += f"&upToSeq={up_to_seq}"
        if page is not None:
            query += f"&page={page}"
        return StateResponse.model_validate(await self._call("GET", f"/sync/state?{query}"))

    async def submit(self, events: list[DomainEvent]) -> SubmitResponse:
        body = {"events": [e.wire() for e in events]}
        return SubmitResponse.model_validate(await self._call("POST", "/sync/events", body))

    async def live(self, after_seq: int) -> InProcessSocket:
        if self.offline:
            raise NetworkError("offline")
        context = self.client.websocket(f"/sync/live?afterSeq={after_seq}", headers=self.headers)
        return await InProcessSocket(context, self).open()
