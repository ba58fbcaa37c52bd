"""What the server is still serving: the requests and WebSockets open now, named in the log when
the server stops (so a stop that waits out Hypercorn's graceful timeout says what it waited for)."""

from __future__ import annotations

import itertools
import time
from typing import Any


class InFlight:
    """ASGI middleware that keeps each open request's method, path and start."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._open: dict[int, tuple[str, str, float]] = {}
        self._ids = itertools.count()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        key = next(self._ids)
        method = scope.get("method", "WEBSOCKET") if scope["type"] == "http" else "WEBSOCKET"
        self._open[key] = (method, scope["path"], time.monotonic())
        try:
            await self.app(scope, receive, send)
        finally:
            del self._open[key]

    def describe(self) -> str:
        """The open requests, oldest first ("none" when there are none)."""
        now = time.monotonic()
        ordered = sorted(self._open.values(), key=lambda item: item[2])
        return ", ".join(f"{method} {path} ({now - started:.1f} s)" for method, path, started in ordered) or "none"
