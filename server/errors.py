"""Every error the API answers is JSON (docs/protocol.md, "Errors", lists every code): ``{"error": code, "message":
sentence, ...extra}``. A route raises ``ApiError`` for what it checks itself; what the layers below
raise becomes an answer through one table, ``ERRORS`` (exception type -> status, code, sentence),
tested as a table in tests/server/test_error_table.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from quart import Response

from server.db import DatabaseUnavailable
from server.store import CursorExpired, InvalidPage, UsernameTaken

# The code of an HTTP error raised by Quart itself (an unknown route, a body over the limit, ...).
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    410: "cursor_expired",
    413: "payload_too_large",
    422: "invalid_event",
    429: "rate_limited",
    503: "unavailable",
}
# The code of any other status (a 500: a failure nothing above expected).
OTHER_CODE = "error"


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra
        self.headers = headers or {}

    def response(self) -> Response:
        body = {"error": self.code, "message": self.message, **self.extra}
        return Response(
            json.dumps(body), status=self.status, content_type="application/json", headers=self.headers
        )


def _no_extra(error: Exception) -> dict[str, Any]:
    return {}


def _cursor(error: Exception) -> dict[str, Any]:
    assert isinstance(error, CursorExpired)
    return {"minAvailableSeq": error.min_available_seq, "currentSeq": error.current_seq}


@dataclass(frozen=True)
class Translation:
    status: int
    code: str
    message: str | Callable[[Exception], str]  # a sentence, or how to say it from the exception
    extra: Callable[[Exception], dict[str, Any]] = _no_extra
    headers: dict[str, str] = field(default_factory=dict)


ERRORS: dict[type[Exception], Translation] = {
    CursorExpired: Translation(
        410, "cursor_expired",
        "This cursor is older than the log: fetch /sync/state and start again from its upToSeq.", _cursor,
    ),
    InvalidPage: Translation(400, "bad_request", str),
    UsernameTaken: Translation(409, "username_taken", "This username is taken: choose another."),
    DatabaseUnavailable: Translation(
        503, "unavailable", "The database cannot be reached just now: try again in a moment.", headers={"Retry-After": "5"}
    ),
}  # fmt: skip


def translated(error: Exception) -> ApiError | None:
    """The answer the table gives ``error`` (by its class or the nearest base listed), if any."""
    for kind in type(error).__mro__:
        translation = ERRORS.get(kind)
        if translation is not None:
            message = translation.message if isinstance(translation.message, str) else translation.message(error)
            return ApiError(
                translation.status, translation.code, message, dict(translation.headers), **translation.extra(error)
            )
    return None


def describe(error: ValidationError) -> str:
    """A pydantic error as one sentence a person can act on."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}" if where else str(item["msg"]))
    return "; ".join(parts)
