"""The sync engine's ``Transport`` (webapp/transport.py) over the real network under CPython:
HTTP by httpx, the live socket by ``websockets``, to one of the world's servers (the next one
when it cannot be reached, as a load balancer would send a client elsewhere).

It is the device's network card too: ``offline`` makes every call fail and closes the live
socket (the nemesis's device offline), ``cut()`` aborts the live socket's TCP connection under
it (a socket cut), and what the engine was told is written to the history as it arrives: each
submitted event's result, and the seqs each live socket delivered after ``caughtUp``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import httpx
from pydantic import TypeAdapter
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from shared.models import DomainEvent, Frame, LoggedEvent, RunSummary, StateResponse, SubmitResponse, UpdatesResponse
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
TIMEOUT = httpx.Timeout(20.0, connect=3.0)

Record = Callable[[dict[str, Any]], None]


class Offline(NetworkError):
    pass


class ChaosSocket:
    """One live socket; it notes the seqs of the event frames it delivers after ``caughtUp``."""

    def __init__(self, ws: ClientConnection, transport: HttpTransport, number: int) -> None:
        self.ws = ws
        self.transport = transport
        self.number = number
        self.caught_up: int | None = None
        self.seqs: list[int] = []
        self.closed = False
        self._next: asyncio.Task[str | bytes] | None = None  # the frame asked for (ready: has it come?)

    async def receive(self) -> AnyFrame:
        if self.closed:
            raise NetworkError("closed")
        try:
            text = await self._asked()  # (a timeout cancels the recv with the wait: websockets allows it)
        except ConnectionClosed as e:
            self._note()
            code = e.rcvd.code if e.rcvd is not None else 1006
            raise close_error(code, e.rcvd.reason if e.rcvd is not None else "") from None
        finally:
            if self._next is not None and self._next.done():
                self._next = None
        return self._delivered(text)

    def ready(self) -> AnyFrame | None:
        """The next frame if it has come (asked for here, so that the next call can tell)."""
        if self.closed:
            return None
        asked = self._asked()
        if not asked.done() or asked.cancelled() or asked.exception() is not None:
            return None  # (not yet; or the socket's end, which receive raises)
        self._next = None
        return self._delivered(asked.result())

    def _asked(self) -> asyncio.Task[str | bytes]:
        """The next frame, asked for once."""
        if self._next is None:
            self._next = asyncio.ensure_future(self.ws.recv())
        return self._next

    def _delivered(self, text: str | bytes) -> AnyFrame:
        frame: AnyFrame = FRAME.validate_json(text)
        if frame.type == "caughtUp":
            self.caught_up = frame.seq
        elif frame.type == "event":
            self.transport.logged([frame.event])
            if self.caught_up is not None:
                self.seqs.append(frame.event.seq)
        return frame

    def _note(self) -> None:
        """The history's record of what this socket delivered (once, when it ends)."""
        if not self.closed:
            self.closed = True
            if self.caught_up is not None:
                self.transport.record(
                    {"op": "live", "device": self.transport.device, "socket": self.number, "caughtUp": self.caught_up, "seqs": self.seqs}
                )
            with contextlib.suppress(ValueError):
                self.transport.sockets.remove(self)

    async def close(self) -> None:
        self._note()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 2)
        # The frame asked for ends with the connection: a receive waiting for it raises the
        # close (the nemesis closes a socket under its engine). Cancelled instead, it would
        # cancel the engine's wait and so the engine itself: a chaos run caught devices that
        # synced nothing more after an offline or a killed server.
        if self._next is not None and self._next.done() and not self._next.cancelled():
            self._next.exception()  # (retrieved: nobody may wait for it any more)

    def cut(self) -> None:
        """Abort the TCP connection (no close frame either way)."""
        transport = self.ws.transport
        if transport is not None:
            transport.abort()


class HttpTransport:
    def __init__(self, urls: list[str], device: str, record: Record, start: int = 0) -> None:
        self.urls = urls
        self.index = start % len(urls)
        self.device = device
        self.record = record
        self.token = ""
        self.offline = False
        self.sockets: list[ChaosSocket] = []
        self._opened = 0
        self._unanswered: dict[str, str] = {}  # event id -> type: pushed, and no answer heard for it yet
        self.client = httpx.AsyncClient(timeout=TIMEOUT)

    @property
    def url(self) -> str:
        return self.urls[self.index]

    def _next_server(self) -> None:
        self.index = (self.index + 1) % len(self.urls)

    async def set_offline(self, offline: bool) -> None:
        self.offline = offline
        if offline:
            for socket in list(self.sockets):
                socket.cut()

    def cut(self) -> int:
        """Cut every live socket of this device; how many there were."""
        sockets = list(self.sockets)
        for socket in sockets:
            socket.cut()
        return len(sockets)

    async def close(self) -> None:
        for socket in list(self.sockets):
            await socket.close()
        await self.client.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self.offline:
            raise Offline("offline")
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        try:
            return await self.client.request(method, self.url + path, headers=headers, **kwargs)
        except httpx.HTTPError as e:
            self._next_server()
            raise NetworkError(f"{method} {path}: {type(e).__name__}") from None

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        response = await self._send(method, path, json=body) if body is not None else await self._send(method, path)
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code == 401:
            raise Unauthorized(str(data.get("message", "signed out")))
        if response.status_code == 410:
            raise CursorExpiredError(str(data.get("message", "cursor_expired")))
        if response.status_code >= 500 or response.status_code == 429:
            self._next_server()
            raise NetworkError(f"server error {response.status_code}")
        if response.status_code >= 400:
            raise ServerError(str(data.get("message", f"error {response.status_code}")))
        return data

    async def sign_in(self, username: str, password: str, signup: bool) -> dict[str, Any]:
        path = "/auth/signup" if signup else "/auth/login"
        for _ in range(len(self.urls) * 20):
            try:
                response = await self.client.post(self.url + path, json={"username": username, "password": password})
            except httpx.HTTPError:
                self._next_server()
                await asyncio.sleep(0.2)
                continue
            if response.status_code >= 500 or response.status_code == 429:
                await asyncio.sleep(0.5)
                continue
            if response.status_code >= 400:
                raise ServerError(response.text)
            data: dict[str, Any] = response.json()
            self.token = str(data["token"])
            return data
        raise NetworkError(f"{path}: no server answered")

    # --- the Transport protocol -----------------------------------------------------------------

    async def assistants(self) -> list[AssistantInfo]:
        return [AssistantInfo.from_wire(a) for a in await self._json("GET", "/assistants")]

    async def runs(self, chat_id: str) -> list[RunSummary]:
        return [RunSummary.model_validate(r) for r in await self._json("GET", f"/runs?chatId={chat_id}")]

    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse:
        response = UpdatesResponse.model_validate(await self._json("GET", f"/sync/updates?afterSeq={after_seq}&limit={limit}"))
        self.logged(response.events)
        return response

    async def state(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StatePage:
        return state_page_of(await self._json("GET", self._state_path(up_to_seq, page, limit)))

    async def state_models(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        """The same page as models (for the checker's record of the server's state)."""
        return StateResponse.model_validate(await self._json("GET", self._state_path(up_to_seq, page, limit)))

    @staticmethod
    def _state_path(up_to_seq: int | None, page: str | None, limit: int) -> str:
        query = f"limit={limit}"
        if up_to_seq is not None:
            query += f"&upToSeq={up_to_seq}"
        if page is not None:
            query += f"&page={page}"
        return f"/sync/state?{query}"

    async def submit(self, events: list[DomainEvent]) -> SubmitResponse:
        kinds = {e.event_id: str(e.type) for e in events}
        self._unanswered.update(kinds)
        response = SubmitResponse.model_validate(await self._json("POST", "/sync/events", {"events": [e.wire() for e in events]}))
        for result in response.results:
            self._unanswered.pop(result.event_id, None)
            self.record(
                {"op": "result", "device": self.device, "event": result.event_id, "type": kinds.get(result.event_id),
                 "status": result.status, "seq": result.seq, "error": result.error}
            )  # fmt: skip
        return response

    def logged(self, events: Iterable[LoggedEvent]) -> None:
        """Events of this device's pushes whose answer it never heard (the server went while
        answering), found in the log: the server took them, at these seqs. The engine takes its
        own event back from the log as its confirmation (webapp/store.py: apply_remote) and does
        not push it again, so no other answer will come for it: recorded as its result."""
        for event in events:
            kind = self._unanswered.pop(event.event_id, None)
            if kind is not None:
                self.record(
                    {"op": "result", "device": self.device, "event": event.event_id, "type": kind, "status": "logged",
                     "seq": event.seq, "error": None}
                )  # fmt: skip

    async def blob_limits(self) -> BlobLimits:
        response = await self._send("OPTIONS", "/blobs", headers=TUS_HEADERS)
        return blob_limits({k.lower(): v for k, v in response.headers.items()})

    async def blob_offset(self, sha256: str) -> tuple[int, int] | None:
        response = await self._send("HEAD", f"/blobs/{sha256}", headers=TUS_HEADERS)
        if response.status_code == 404:
            return None
        headers = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code >= 400:
            raise blob_error(response.status_code, response.content, headers)
        return blob_progress(headers)

    async def blob_append(
        self, sha256: str, offset: int, length: int, chunk: Any, progress: Callable[[int], None] | None = None
    ) -> int:
        headers = {**TUS_HEADERS, "Content-Type": CHUNK_TYPE, "Upload-Offset": str(offset), "Upload-Length": str(length)}
        response = await self._send("PATCH", f"/blobs/{sha256}", content=bytes(chunk), headers=headers)
        answer = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code >= 400:
            raise blob_error(response.status_code, response.content, answer)
        return blob_progress(answer)[0]

    async def live(self, after_seq: int) -> ChaosSocket:
        if self.offline:
            raise Offline("offline")
        url = self.url.replace("http", "ws", 1) + f"/sync/live?afterSeq={after_seq}"
        try:
            headers = {"Authorization": f"Bearer {self.token}"}
            ws = await asyncio.wait_for(connect(url, additional_headers=headers, open_timeout=5, ping_interval=None, max_size=2**24), 10)
        except InvalidStatus as e:
            if e.response.status_code == 401:
                raise Unauthorized("signed out") from None
            self._next_server()
            raise NetworkError(f"live: HTTP {e.response.status_code}") from None
        except (OSError, InvalidHandshake, TimeoutError) as e:
            self._next_server()
            raise NetworkError(f"live: {type(e).__name__}") from None
        self._opened += 1
        socket = ChaosSocket(ws, self, self._opened)
        self.sockets.append(socket)
        if self.offline:  # (went offline while it opened)
            socket.cut()
        return socket
