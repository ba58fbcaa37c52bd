"""A Transport that talks to the real server app in-process (Quart's test client) through an
in-memory network that the tests control: it goes offline, drops, delays, duplicates and reorders.
The sync engine's code path under CPython, against the real server code.

- ``set_offline(True)``: every call fails and the live sockets close; held answers are lost.
- ``hold_next = True | False``: the next call is held until ``release(call)``: with True the server
  gets the request at once and only the answer waits; with False the request waits too (it
  reaches the server when released). Released in any order, held calls arrive reordered;
  released with ``lose=True``, the answer (or the request) never arrives.
- ``duplicate_next``: the next request reaches the server twice (a retrying proxy).
- ``blob_offset`` and ``blob_append``: HEAD and PATCH of ``/blobs`` (tus), offline as the rest.
- ``hold_frames``: live event frames wait in ``held_frames`` until ``release_frames(order)``
  passes them on, in that order, as often as they appear in it (so reordered, duplicated or
  dropped).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from quart.testing.connections import WebsocketDisconnectError
from quart.typing import TestClientProtocol as Client

from shared.models import (
    DomainEvent,
    Frame,
    RunSummary,
    StateResponse,
    SubmitResponse,
    UpdatesResponse,
)
from webapp.state_page import StatePage, state_page_of
from webapp.transport import (
    CHUNK_TYPE,
    TUS_HEADERS,
    AnyFrame,
    AssistantInfo,
    BlobLimits,
    CursorExpiredError,
    NetworkError,
    ServerError,
    Unauthorized,
    blob_error,
    blob_limits,
    blob_progress,
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
                frame = await ws.receive()
                if self._transport.hold_frames and '"type":"event"' in frame.replace(" ", ""):
                    self._transport.held_frames.append((self, frame))
                else:
                    self._queue.put_nowait(frame)
        except WebsocketDisconnectError as e:
            self._queue.put_nowait(close_error(int(e.args[0]) if e.args else 1006, ""))

    def pass_on(self, frame: str) -> None:
        if not self.closed:
            self._queue.put_nowait(frame)

    async def receive(self) -> AnyFrame:
        item = await self._queue.get()
        if isinstance(item, Exception):
            self._queue.put_nowait(item)  # stays closed
            raise item
        frame: AnyFrame = FRAME.validate_json(item)
        return frame

    def ready(self) -> AnyFrame | None:
        if self._queue.empty():
            return None
        item = self._queue.get_nowait()
        if isinstance(item, Exception):
            self._queue.put_nowait(item)  # (the socket's last word: receive raises it)
            return None
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


@dataclass
class HeldCall:
    """A call whose answer (and, unless ``delivered``, whose request) waits to be released."""

    what: str
    delivered: bool
    lose: bool = False
    gate: asyncio.Event = field(default_factory=asyncio.Event)


class InProcessTransport:
    def __init__(self, client: Client, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}
        self.offline = False
        self.sockets: list[InProcessSocket] = []
        self.hold_next: bool | None = None
        self.duplicate_next = False
        self.held: list[HeldCall] = []
        self.hold_frames = False
        self.held_frames: list[tuple[InProcessSocket, str]] = []
        self.state_limit = 2  # the most rows asked for in a page of /sync/state

    async def go_offline(self) -> None:
        await self.set_offline(True)

    async def set_offline(self, offline: bool) -> None:
        self.offline = offline
        if offline:
            for call in list(self.held):
                self.release(call, lose=True)
            for socket in self.sockets:
                await socket.close()

    def release(self, call: HeldCall, lose: bool = False) -> None:
        self.held.remove(call)
        call.lose = lose
        call.gate.set()

    def release_frames(self, order: list[int]) -> None:
        """Pass the held frames on in this order of their indexes (repeat one to duplicate it,
        leave one out to drop it); the held list is emptied."""
        frames, self.held_frames = self.held_frames, []
        for index in order:
            socket, frame = frames[index]
            socket.pass_on(frame)

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        if self.offline:
            raise NetworkError("offline")
        request = functools.partial(self._request, method, path, body)
        if self.duplicate_next:
            self.duplicate_next = False
            await _outcome(request)  # the first copy's answer goes nowhere
        if self.hold_next is None:
            return await request()
        call = HeldCall(f"{method} {path}", delivered=self.hold_next)
        self.hold_next = None
        answer = await _outcome(request) if call.delivered else None
        self.held.append(call)
        await call.gate.wait()
        if call.lose:
            raise NetworkError(f"{call.what}: the {'answer' if call.delivered else 'request'} was lost")
        if answer is None:
            answer = await _outcome(request)
        return answer()

    async def _request(self, method: str, path: str, body: Any) -> Any:
        response = await self.client.open(path, method=method, json=body, headers=self.headers)
        data = await response.get_json()
        if response.status_code == 401:
            raise Unauthorized(data["message"])
        if response.status_code == 410:
            raise CursorExpiredError(data["message"])
        if response.status_code >= 400:
            raise ServerError(data["message"])
        return data

    async def assistants(self) -> list[AssistantInfo]:
        return [AssistantInfo.from_wire(a) for a in await self._call("GET", "/assistants")]

    async def runs(self, chat_id: str) -> list[RunSummary]:
        return [RunSummary.model_validate(r) for r in await self._call("GET", f"/runs?chatId={chat_id}")]

    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse:
        return UpdatesResponse.model_validate(await self._call("GET", f"/sync/updates?afterSeq={after_seq}&limit={limit}"))

    async def state(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StatePage:
        return state_page_of(await self._call("GET", self._state_path(up_to_seq, page, limit)))

    async def state_models(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        """The same page as models (what the tests compare the devices with)."""
        return StateResponse.model_validate(await self._call("GET", self._state_path(up_to_seq, page, limit)))

    def _state_path(self, up_to_seq: int | None, page: str | None, limit: int) -> str:
        query = f"limit={min(limit, self.state_limit)}"  # small pages, so paging is exercised
        if up_to_seq is not None:
            query += f"&upToSeq={up_to_seq}"
        if page is not None:
            query += f"&page={page}"
        return f"/sync/state?{query}"

    async def submit(self, events: list[DomainEvent]) -> SubmitResponse:
        body = {"events": [e.wire() for e in events]}
        return SubmitResponse.model_validate(await self._call("POST", "/sync/events", body))

    async def blob_limits(self) -> BlobLimits:
        if self.offline:
            raise NetworkError("offline")
        response = await self.client.options("/blobs", headers={**self.headers, **TUS_HEADERS})
        return blob_limits({k.lower(): v for k, v in response.headers.items()})

    async def blob_offset(self, sha256: str) -> tuple[int, int] | None:
        if self.offline:
            raise NetworkError("offline")
        response = await self.client.head(f"/blobs/{sha256}", headers={**self.headers, **TUS_HEADERS})
        if response.status_code == 404:
            return None
        headers = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code >= 400:
            raise blob_error(response.status_code, await response.get_data(), headers)
        return blob_progress(headers)

    async def blob_append(
        self, sha256: str, offset: int, length: int, chunk: bytes, progress: Callable[[int], None] | None = None
    ) -> int:  # (a Chunk's body here)
        if self.offline:
            raise NetworkError("offline")
        headers = {
            **self.headers, **TUS_HEADERS, "Content-Type": CHUNK_TYPE, "Upload-Offset": str(offset), "Upload-Length": str(length),
        }  # fmt: skip
        response = await self.client.patch(f"/blobs/{sha256}", data=chunk, headers=headers)
        if progress is not None:  # (the whole chunk went: the in-process client tells no more)
            progress(len(chunk))
        answer = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code >= 400:
            raise blob_error(response.status_code, await response.get_data(), answer)
        return blob_progress(answer)[0]

    async def live(self, after_seq: int) -> InProcessSocket:
        if self.offline:
            raise NetworkError("offline")
        context = self.client.websocket(f"/sync/live?afterSeq={after_seq}", headers=self.headers)
        return await InProcessSocket(context, self).open()


async def _outcome(request: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
    """Make the request now; what it answered (a value or an error) is given back when called."""
    try:
        value = await request()
    except Exception as error:
        failure = error

        def fail() -> Any:
            raise failure

        return fail
    return lambda: value
