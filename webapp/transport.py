"""The sync engine's view of the network: one small interface, implemented by the browser
(``webapp/browser.py``: fetch + WebSocket) and by in-memory fakes in the tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from shared.models import (
    CaughtUpFrame,
    DeltaFrame,
    DomainEvent,
    EventFrame,
    PingFrame,
    RunSummary,
    StateResponse,
    SubmitResponse,
    UpdatesResponse,
)


class NetworkError(Exception):
    """The server could not be reached, or the connection broke: retry later."""


class Unauthorized(Exception):
    """The session is gone (401 / close 4401): the user must sign in again."""


class CursorExpiredError(Exception):
    """410 / close 4410: the events after our cursor were compacted away; do a full resync."""


class ServerError(Exception):
    """Any other error answer; it carries the server's sentence for a person."""


AnyFrame = EventFrame | CaughtUpFrame | DeltaFrame | PingFrame


@dataclass(frozen=True)
class AssistantInfo:
    id: str
    name: str
    kind: str
    model: str

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> AssistantInfo:
        return cls(str(data["id"]), str(data["name"]), str(data["kind"]), str(data["model"]))


class LiveSocket(Protocol):
    async def receive(self) -> AnyFrame:
        """The next frame; raises NetworkError, Unauthorized or CursorExpiredError when closed."""

    async def close(self) -> None: ...


class Transport(Protocol):
    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse: ...

    async def assistants(self) -> list[AssistantInfo]:
        """GET /assistants: the server's assistants."""

    async def runs(self, chat_id: str) -> list[RunSummary]:
        """GET /runs: the server-side runs of a chat."""

    async def state(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StateResponse:
        """GET /sync/state: one page of the snapshot at ``up_to_seq`` (None: now)."""

    async def submit(self, events: list[DomainEvent]) -> SubmitResponse: ...

    async def live(self, after_seq: int) -> LiveSocket: ...


def close_error(code: int, reason: str) -> Exception:
    """The exception a live socket's close code stands for."""
    if code == 4401:
        return Unauthorized(reason or "signed out")
    if code == 4410:
        return CursorExpiredError(reason or "cursor_expired")
    return NetworkError(f"live socket closed ({code} {reason})".strip())
