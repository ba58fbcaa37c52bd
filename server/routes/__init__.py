"""The API's routes, one blueprint per part (``create_blueprint(parts)`` in each module):
``accounts`` (sign-up, login, logout), ``sync`` (the log, the state, the live socket),
``runs`` (assistants and their runs), ``blobs`` (attachments' bytes), ``operations`` (health, readiness, metrics, the API's
description, help pages, the access log) and ``assets`` (the page, the service worker, Python, the
static files). ``server/app.py`` builds the parts and registers the blueprints.

This module holds what every route shares: ``Parts`` (the app's parts, with the session and
rate-limit checks) and the request helpers."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from quart import Response, request
from werkzeug.datastructures import Headers

from server import auth
from server.assets import Assets
from server.attachments import Attachments
from server.config import Settings
from server.errors import ApiError
from server.event_store import SqlEventStore
from server.fanout import PostgresListener
from server.limits import RateLimiter
from server.live import Hub
from server.metrics import Metrics
from server.openapi import MAX_INT
from server.runs import RunWorker
from server.store import SessionInfo

SESSION_COOKIE = "chat_session"


@dataclass
class Parts:
    """What the routes work with, made once per app by ``create_app``."""

    settings: Settings
    store: SqlEventStore
    attachments: Attachments
    hub: Hub
    runs: RunWorker
    metrics: Metrics
    assets: Assets
    listener: PostgresListener | None
    sessions: auth.SessionCache
    sync_limiter: RateLimiter
    auth_limiter: RateLimiter
    clock: Callable[[], datetime]

    async def session_of(self, headers: Headers, cookies: Mapping[str, str]) -> SessionInfo | None:
        """The session a request's bearer token or cookie names (None: neither, or unknown)."""
        header = headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
        if not token:
            token = cookies.get(SESSION_COOKIE)
            # A cookie rides along on any request the browser makes: one from another site's
            # page must not act with it (cross-site request forgery), whatever SameSite says.
            if token and not same_origin(headers.get("Origin"), headers.get("Host"), absent_ok=True):
                raise ApiError(403, "forbidden", "This request comes from another site's page.")
        if not token:
            return None
        key = auth.token_hash(token)
        session = self.sessions.get(key)
        if session is None:
            session = await self.store.find_session(key)
            if session is not None:
                self.sessions.put(key, session)
        return session

    async def require_session(self) -> SessionInfo:
        session = await self.session_of(request.headers, request.cookies)
        if session is None:
            raise ApiError(401, "unauthorized", "Sign in first: no valid session token or cookie.")
        limit(self.sync_limiter, session.account_id)
        return session


def limit(limiter: RateLimiter, key: str) -> None:
    wait = limiter.take(key)
    if wait is not None:
        raise ApiError(
            429,
            "rate_limited",
            f"Too many requests: try again in {math.ceil(wait)} seconds.",
            headers={"Retry-After": str(math.ceil(wait))},
        )


async def json_body() -> Any:
    raw = await request.get_data()
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, "bad_request", "The body is not valid JSON.") from None


def int_arg(name: str, default: int | None, low: int = 0, high: int | None = None) -> int | None:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be an integer.") from None
    high = MAX_INT if high is None else high
    if not low <= value <= high:
        raise ApiError(400, "bad_request", f"{name} must be between {low} and {high}.")
    return value


def chat_arg() -> str | None:
    chat_id = request.args.get("chatId")
    if chat_id is None:
        return None
    try:
        return str(uuid.UUID(chat_id))
    except ValueError:
        raise ApiError(400, "bad_request", "chatId must be a UUID.") from None


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def same_origin(origin: str | None, host: str | None, absent_ok: bool = False) -> bool:
    """Whether a request's Origin is this server (``absent_ok``: a request without one, which
    browsers do not make cross-site, passes)."""
    if not origin:
        return absent_ok
    return host is not None and urlsplit(origin).netloc == host
