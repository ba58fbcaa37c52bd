"""The sync engine's view of the network: one small interface, implemented by the browser
(``webapp/browser.py``: fetch + WebSocket) and by in-memory fakes in the tests. The upload
engine (webapp/uploads.py) uses its two blob calls, tus 1.0 core (docs/protocol.md,
"Attachments"), whose answers ``blob_error`` reads the same way for every implementation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from shared.models import (
    CaughtUpFrame,
    DeltaFrame,
    DomainEvent,
    EventFrame,
    PingFrame,
    RunSummary,
    SubmitResponse,
    UpdatesResponse,
)
from webapp.state_page import StatePage


class NetworkError(Exception):
    """The server could not be reached, or the connection broke: retry later."""


NO_ANSWER = "the server did not answer"  # (a person reads it: "Not sent yet: …")
# The longest a request other than the sync's and the uploads' waits for its answer (a sign-in, a
# sign-out, the server's assistants and limits; webapp/app.py).
ASK_SECONDS = 60.0

T = TypeVar("T")


async def answered_within(request: Callable[[], Awaitable[T]], seconds: float) -> T:
    """The answer of ``request()``, or NetworkError when none came within ``seconds`` (a
    connection left half-open when a phone changed networks, a server stuck): the caller tries
    again, as after any failure of the network, where it would have waited for good. The request
    is made only once this runs (a task of it cancelled before it starts leaves no coroutine
    never awaited)."""
    try:
        async with asyncio.timeout(seconds):
            return await request()
    except TimeoutError:
        raise NetworkError(NO_ANSWER) from None


class Unauthorized(Exception):
    """The session is gone (401 / close 4401): the user must sign in again."""


class CursorExpiredError(Exception):
    """410 / close 4410: the events after our cursor were compacted away; do a full resync."""


class ServerError(Exception):
    """Any other error answer; it carries the server's sentence for a person."""


class BlobOffsetMismatch(Exception):
    """409: the server has ``offset`` bytes of the upload, not what the chunk said."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class BlobTooLarge(Exception):
    """413: the file is over the server's limits (a file's, or an account's); the server's sentence."""


class BlobHashMismatch(Exception):
    """422: the bytes uploaded, whole, are not the file the SHA-256 names; the server discarded them."""


# Every blob request carries it (tus 1.0: the server refuses HEAD and PATCH without it).
TUS_HEADERS = {"Tus-Resumable": "1.0.0"}
CHUNK_TYPE = "application/offset+octet-stream"


@dataclass(frozen=True)
class BlobLimits:
    """What an answer to OPTIONS /blobs says: the largest file the server takes
    (``Tus-Max-Size``), and how many more bytes the account may upload (``Upload-Account-Free``,
    said to a session only); None where it does not say."""

    max_file: int | None
    account_free: int | None


def blob_limits(headers: Mapping[str, str]) -> BlobLimits:
    """The limits an answer to OPTIONS /blobs says (header names lowercase)."""
    values = [headers.get(name, "") for name in ("tus-max-size", "upload-account-free")]
    largest, free = (int(v) if v.isdigit() and len(v) <= 18 else None for v in values)
    return BlobLimits(largest, free)


def blob_error(status: int, body: bytes, headers: Mapping[str, str]) -> Exception:
    """The exception an error answer (``status`` >= 400) of ``/blobs`` stands for; ``headers``
    with lowercase names."""
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = {}
    message = str(data.get("message") or f"error {status}") if isinstance(data, dict) else f"error {status}"
    if status == 401:
        return Unauthorized(message)
    if status == 409:
        offset = headers.get("upload-offset") or (data.get("offset") if isinstance(data, dict) else None)
        if offset is not None and str(offset).isdigit():
            return BlobOffsetMismatch(message, int(offset))
    if status == 413:
        return BlobTooLarge(message)
    if status == 422:
        return BlobHashMismatch(message)
    if status >= 500:
        return NetworkError(f"server error {status}")
    return ServerError(message)


def blob_progress(headers: Mapping[str, str]) -> tuple[int, int]:
    """(Upload-Offset, Upload-Length) of a HEAD or PATCH answer, ``headers`` with lowercase names."""
    try:
        return int(headers["upload-offset"]), int(headers["upload-length"])
    except (KeyError, ValueError):
        raise ServerError("The server's answer to an upload said no Upload-Offset and Upload-Length.") from None


AnyFrame = EventFrame | CaughtUpFrame | DeltaFrame | PingFrame


@dataclass(frozen=True)
class AssistantInfo:
    id: str
    name: str
    kind: str
    model: str
    vision: bool = False  # it reads images (a server older than attachments does not say: no)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> AssistantInfo:
        return cls(str(data["id"]), str(data["name"]), str(data["kind"]), str(data["model"]), data.get("vision") is True)


class LiveSocket(Protocol):
    async def receive(self) -> AnyFrame:
        """The next frame; raises NetworkError, Unauthorized or CursorExpiredError when closed."""

    def ready(self) -> AnyFrame | None:
        """The next frame if it has come already, without waiting; else None (and for the
        socket's end, which ``receive`` raises)."""

    async def close(self) -> None: ...


class Transport(Protocol):
    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse: ...

    async def assistants(self) -> list[AssistantInfo]:
        """GET /assistants: the server's assistants."""

    async def runs(self, chat_id: str) -> list[RunSummary]:
        """GET /runs: the server-side runs of a chat."""

    async def state(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StatePage:
        """GET /sync/state: one page of the snapshot at ``up_to_seq`` (None: now), read into
        rows (webapp/state_page.py)."""

    async def submit(self, events: list[DomainEvent]) -> SubmitResponse: ...

    async def live(self, after_seq: int) -> LiveSocket: ...

    async def blob_limits(self) -> BlobLimits:
        """OPTIONS /blobs (tus), with the session: the largest file the server takes, and what
        the account may still upload."""

    async def blob_offset(self, sha256: str) -> tuple[int, int] | None:
        """HEAD /blobs/{sha256}: (offset, length) of the account's upload (equal: the server has
        the file), or None when it has neither the file nor an upload of it."""

    async def blob_append(
        self, sha256: str, offset: int, length: int, chunk: Any, progress: Callable[[int], None] | None = None
    ) -> int:
        """PATCH /blobs/{sha256}: ``chunk`` (a ``Chunk``'s body) at ``offset`` of a file of ``length`` bytes; the
        server's new offset. ``progress`` is told the bytes of the chunk sent so far, as they go
        (where the transport can tell: the browser's). Raises BlobOffsetMismatch (409), BlobTooLarge (413),
        BlobHashMismatch (422), and the usual Unauthorized, NetworkError, ServerError."""


def close_error(code: int, reason: str) -> Exception:
    """The exception a live socket's close code stands for."""
    if code == 4401:
        return Unauthorized(reason or "signed out")
    if code == 4410:
        return CursorExpiredError(reason or "cursor_expired")
    return NetworkError(f"live socket closed ({code} {reason})".strip())
