"""The HTTP and WebSocket API of PROTOCOL.md, and the static assets, as one Quart app."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from hypercorn.middleware import ProxyFixMiddleware
from pydantic import ValidationError
from quart import Quart, Response, g, request, websocket
from werkzeug.exceptions import HTTPException

from server import auth
from server.assets import Assets, content_type, immutable
from server.assistants import load_assistants
from server.compactor import run_compactor
from server.compression import LazilyEncoded, StaticFiles, compressed_json
from server.config import Settings
from server.db import open_database
from server.event_store import SqlEventStore
from server.fanout import PostgresListener, publish_delta, publish_end
from server.headers import SecurityHeaders, content_security_policy, security_headers
from server.help import HOME_NETWORK, help_page
from server.limits import RateLimiter
from server.live import Hub, KeepAsgiSend, SharedReads, follow, text_sender
from server.metrics import Metrics
from server.openapi import DEFAULT_LIMIT, DOCS_PAGE, MAX_INT, MAX_LIMIT, MAX_STATE_LIMIT, openapi
from server.run_store import SqlRunStore
from server.runs import RunWorker
from server.store import (
    CursorExpired,
    InvalidPage,
    Rejected,
    SessionInfo,
    UsernameTaken,
)
from server.validation import content_error
from shared.models import (
    Credentials,
    DomainEvent,
    EventType,
    Session,
    StateResponse,
    SubmitResponse,
    UpdatesResponse,
    format_time,
)

SESSION_COOKIE = "chat_session"
access_log = logging.getLogger("server.access")
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
}


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


def open_store(url: str, clock: Callable[[], datetime]) -> SqlEventStore:
    try:
        return SqlEventStore(open_database(url), clock)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def utc_now() -> datetime:
    return datetime.now(UTC)


def describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}" if where else str(item["msg"]))
    return "; ".join(parts)


def create_app(settings: Settings, clock: Callable[[], datetime] = utc_now) -> Quart:
    app = Quart(__name__, static_folder=None)
    headers = security_headers(content_security_policy(settings.device_model_origins))
    app.asgi_app = KeepAsgiSend(SecurityHeaders(app.asgi_app, headers))  # type: ignore[method-assign]
    if settings.trusted_proxies > 0:
        # Opt-in: the scheme (so the Secure cookie), client address and host a proxy reports.
        # Outermost, so that its copy of the scope is made before a socket's send is put in it.
        app.asgi_app = ProxyFixMiddleware(  # type: ignore[method-assign]
            app.asgi_app, mode="legacy", trusted_hops=settings.trusted_proxies
        )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    store = open_store(settings.database_url, clock)
    hub = Hub(SharedReads(store))
    sync_limiter = RateLimiter(settings.rate_limit_per_minute, burst=max(1, settings.rate_limit_per_minute / 6))
    auth_limiter = RateLimiter(settings.auth_rate_limit_per_minute, burst=max(1, settings.auth_rate_limit_per_minute / 3))
    sessions = auth.SessionCache(settings.session_cache_seconds)
    assets = Assets.load(settings.static_dir)
    metrics = Metrics(hub.socket_count)
    app.extensions["store"] = store
    app.extensions["hub"] = hub
    app.extensions["metrics"] = metrics
    assistants = load_assistants(
        settings.assistants_file, settings.assistants, settings.upstream_timeout_seconds, settings.demo_seconds_per_word
    )
    # Stream a run's tokens to the account's live sockets, in every process.
    app.extensions["publish_delta"] = functools.partial(publish_delta, store.db, hub)
    runs = RunWorker(
        store,
        SqlRunStore(store.db),
        assistants,
        app.extensions["publish_delta"],
        hub.notify,
        clock,
        lease_seconds=settings.run_lease_seconds,
        poll_seconds=settings.run_poll_seconds,
        checkpoint_seconds=settings.run_checkpoint_seconds,
        end_stream=functools.partial(publish_end, store.db, hub),
        streamed=hub.text_so_far,
    )
    app.extensions["runs"] = runs

    background: list[asyncio.Task[None]] = []

    listener = (
        PostgresListener(settings.database_url, hub) if store.db.dialect == "postgres" else None
    )

    @app.before_serving
    async def _open() -> None:
        await store.open()
        if listener is not None:
            await listener.start()
        if settings.compact_interval_seconds > 0:
            background.append(asyncio.ensure_future(run_compactor(store, settings, metrics)))
        background.append(asyncio.ensure_future(runs.run_forever()))

    @app.after_serving
    async def _close() -> None:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if listener is not None:
            await listener.stop()
        await store.close()

    # --- errors: every one is JSON ---------------------------------------------------------------

    @app.errorhandler(ApiError)
    async def _api_error(error: ApiError) -> Response:
        return error.response()

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        code = HTTP_CODES.get(status, "error")
        return ApiError(status, code, error.description or code).response()

    @app.errorhandler(CursorExpired)
    async def _cursor_expired(error: CursorExpired) -> Response:
        return ApiError(
            410,
            "cursor_expired",
            "This cursor is older than the log: fetch /sync/state and start again from its upToSeq.",
            minAvailableSeq=error.min_available_seq,
            currentSeq=error.current_seq,
        ).response()

    # --- helpers -------------------------------------------------------------------------------

    async def json_body() -> Any:
        raw = await request.get_data()
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "bad_request", "The body is not valid JSON.") from None

    def int_arg(args: Any, name: str, default: int | None, low: int = 0, high: int | None = None) -> int | None:
        raw = args.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, "bad_request", f"{name} must be an integer.") from None
        high = MAX_INT if high is None else high
        if not low <= value <= high:
            limits = f"between {low} and {high}"
            raise ApiError(400, "bad_request", f"{name} must be {limits}.")
        return value

    async def session_of(headers: Any, cookies: Any) -> SessionInfo | None:
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
        session = sessions.get(key)
        if session is None:
            session = await store.find_session(key)
            if session is not None:
                sessions.put(key, session)
        return session

    def chat_arg() -> str | None:
        chat_id = request.args.get("chatId")
        if chat_id is None:
            return None
        try:
            return str(uuid.UUID(chat_id))
        except ValueError:
            raise ApiError(400, "bad_request", "chatId must be a UUID.") from None

    async def require_session() -> SessionInfo:
        session = await session_of(request.headers, request.cookies)
        if session is None:
            raise ApiError(401, "unauthorized", "Sign in first: no valid session token or cookie.")
        limit(sync_limiter, session.account_id)
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

    def session_response(session: Session, status: int) -> Response:
        response = Response(json.dumps(session.wire()), status=status, content_type="application/json")
        # Secure when the request came over HTTPS (then the browser sends it back over HTTPS only);
        # not over plain http, where browsers refuse a Secure cookie from any host but localhost.
        response.set_cookie(
            SESSION_COOKIE,
            session.token,
            httponly=True,
            samesite="Strict",
            max_age=400 * 86400,
            secure=request.scheme == "https",
        )
        return response

    async def start_session(account_id: str, device_name: str | None) -> Session:
        token = auth.new_token()
        device_id = str(uuid.uuid4())
        await store.create_session(auth.token_hash(token), account_id, device_id, device_name or "device")
        return Session(user_id=account_id, device_id=device_id, token=token)

    async def credentials() -> Credentials:
        limit(auth_limiter, request.remote_addr or "unknown")
        try:
            return Credentials.model_validate(await json_body())
        except ValidationError as e:
            raise ApiError(400, "bad_request", describe(e)) from None

    # --- accounts ------------------------------------------------------------------------------

    @app.post("/auth/signup")
    async def signup() -> Response:
        if settings.signup == "closed":
            raise ApiError(
                403, "forbidden", "Sign-up is closed here: ask the administrator for an account."
            )
        creds = await credentials()
        account_id = str(uuid.uuid4())
        password_hash = await asyncio.to_thread(auth.hash_password, creds.password)
        try:
            await store.create_account(account_id, creds.username, password_hash)
        except UsernameTaken:
            raise ApiError(409, "username_taken", "This username is taken: choose another.") from None
        return session_response(await start_session(account_id, creds.device_name), 201)

    @app.post("/auth/login")
    async def login() -> Response:
        creds = await credentials()
        account = await store.find_account(creds.username)
        ok = account is not None and await asyncio.to_thread(
            auth.verify_password, creds.password, account.password_hash
        )
        if not ok or account is None:
            raise ApiError(401, "unauthorized", "Wrong username or password.")
        return session_response(await start_session(account.id, creds.device_name), 200)

    @app.post("/auth/logout")
    async def logout() -> Response:
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() or request.cookies.get(SESSION_COOKIE)
        if token:
            sessions.evict(auth.token_hash(token))
            await store.delete_session(auth.token_hash(token))
        response = Response(status=204)
        response.delete_cookie(SESSION_COOKIE, secure=request.scheme == "https", httponly=True, samesite="Strict")
        return response

    # --- sync ----------------------------------------------------------------------------------

    @app.post("/sync/events")
    async def post_events() -> Response:
        session = await require_session()
        body = await json_body()
        raw_events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(raw_events, list):
            raise ApiError(422, "invalid_event", "The body must be {\"events\": [DomainEvent, ...]}.")
        if len(raw_events) > settings.max_batch_events:
            raise ApiError(
                413,
                "payload_too_large",
                f"At most {settings.max_batch_events} events per request: split the batch.",
            )
        batch: list[DomainEvent | Rejected] = []
        for index, raw in enumerate(raw_events):
            event_id = raw.get("eventId") if isinstance(raw, dict) else None
            try:
                event = DomainEvent.model_validate(raw)
            except ValidationError as e:
                error = describe(e)
            else:
                too_long = content_error(event, settings.max_content_chars)
                if too_long is None:
                    batch.append(event)
                    continue
                error = too_long
            try:
                event_id = str(uuid.UUID(str(event_id)))
            except ValueError:
                raise ApiError(
                    422, "invalid_event", f"events[{index}] has no valid eventId: {error}", index=index
                ) from None
            batch.append(Rejected(event_id, error))
        results, current = await store.append(session.account_id, session.device_id, batch)
        if any(r.status == "accepted" for r in results):
            hub.notify(session.account_id, current)
            metrics.events_appended.inc(sum(r.status == "accepted" for r in results))
            if any(isinstance(e, DomainEvent) and e.type is EventType.ASSISTANT_RUN_REQUESTED for e in batch):
                runs.wake()
        response = SubmitResponse.model_construct(results=results, current_seq=current)
        # The wire form, serialized by pydantic (five times json's speed on a 100-event batch).
        return Response(
            response.model_dump_json(by_alias=True, exclude_none=True), content_type="application/json"
        )

    @app.get("/sync/updates")
    async def get_updates() -> Response:
        session = await require_session()
        after = int_arg(request.args, "afterSeq", 0)
        limit = int_arg(request.args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        assert after is not None and limit is not None
        updates = await store.read_updates(session.account_id, after, limit)
        await store.record_cursor(session.account_id, session.device_id, after)
        return await compressed_json(
            request.headers,
            UpdatesResponse(
                events=updates.events, has_more=updates.has_more, current_seq=updates.current_seq
            ),
        )

    @app.get("/sync/state")
    async def get_state() -> Response:
        session = await require_session()
        up_to = int_arg(request.args, "upToSeq", None)
        limit = int_arg(request.args, "limit", DEFAULT_LIMIT, 1, MAX_STATE_LIMIT)
        assert limit is not None
        chat_id = chat_arg()
        try:
            page = await store.read_state(
                session.account_id, up_to, chat_id, limit, request.args.get("page")
            )
        except InvalidPage as e:
            raise ApiError(400, "bad_request", str(e)) from None
        return await compressed_json(
            request.headers,
            StateResponse(
                snapshot=page.snapshot,
                up_to_seq=page.up_to_seq,
                current_seq=page.current_seq,
                next_page=page.next_page,
                total=page.total,
            ),
        )

    @app.websocket("/sync/live")
    async def live() -> None:
        try:
            session = await session_of(websocket.headers, websocket.cookies)
        except ApiError:  # a cookie, but from another site's page
            await websocket.accept()
            await websocket.close(4403, "forbidden")
            return
        await websocket.accept()
        if session is None:
            await websocket.close(4401, "unauthorized")
            return
        try:
            cursor = int(websocket.args.get("afterSeq", "0"))
            if cursor < 0:
                raise ValueError
        except ValueError:
            await websocket.close(4400, "bad_request")
            return
        await store.record_cursor(session.account_id, session.device_id, cursor)
        await follow(
            text_sender(websocket.scope), websocket.close, hub, session.account_id, cursor, settings.ping_seconds
        )

    # --- operations and static assets ----------------------------------------------------------

    @app.before_request
    async def _started() -> None:
        g.started = time.perf_counter()

    @app.after_request
    async def _log_request(response: Response) -> Response:
        seconds = time.perf_counter() - g.get("started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.observe_request(route, request.method, response.status_code, seconds)
        access_log.info(
            json.dumps(
                {
                    "at": format_time(clock()),
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "ms": round(seconds * 1000, 2),
                    "remote": request.remote_addr,
                }
            )
        )
        return response

    @app.get("/assistants")
    async def list_assistants() -> Response:
        """The server-side assistants a client can request runs of."""
        await require_session()
        return json_response([a.public() for a in assistants.values()])

    @app.get("/runs")
    async def list_runs() -> Response:
        """The assistant runs of one chat: how each ended, why, and what it cost."""
        session = await require_session()
        chat_id = chat_arg()
        if chat_id is None:
            raise ApiError(400, "bad_request", "chatId is required.")
        return json_response([run.wire() for run in await runs.run_store.chat_runs(session.account_id, chat_id)])

    @app.get("/healthz")
    async def healthz() -> Response:
        """The process is up."""
        return json_response({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        """The process can serve: its database answers and (PostgreSQL) it hears other processes."""
        problems = []
        try:
            await store.current_seq("readyz")
        except Exception as e:  # any failure means "not ready", with its reason
            problems.append(f"database: {e}")
        if listener is not None and not listener.connected:
            problems.append("fan-out: not listening")
        if hub.closing:
            problems.append("shutting down")
        if problems:
            return json_response({"status": "unavailable", "problems": problems}, status=503)
        return json_response({"status": "ready"})

    spec = openapi()

    @app.get("/openapi.json")
    async def openapi_json() -> Response:
        return json_response(spec)

    @app.get("/docs")
    async def docs() -> Response:
        return Response(DOCS_PAGE, content_type="text/html; charset=utf-8")

    home_network = help_page(HOME_NETWORK)

    @app.get("/help/home-network")
    async def help_home_network() -> Response:
        """How to serve the app to the other devices of a home network (README.md's section)."""
        return Response(home_network, content_type="text/html; charset=utf-8")

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return Response(metrics.render(), content_type=metrics.content_type)

    @app.get("/")
    async def index() -> Response:
        return await static_file("index.html")

    service_worker_script = LazilyEncoded(assets.service_worker().encode(), assets.version)
    bundle = LazilyEncoded(assets.bundle, assets.bundle_etag)
    files = StaticFiles(settings.static_dir)

    @app.get("/sw.js")
    async def service_worker() -> Response:
        script = await service_worker_script.get()
        return script.response(request.headers, "text/javascript; charset=utf-8", "no-cache")

    @app.get("/py/app.zip")
    async def python_bundle() -> Response:
        return (await bundle.get()).response(request.headers, "application/zip", "no-cache")

    @app.get("/static/<path:path>")
    async def static_file(path: str) -> Response:
        found = files.locate(path)
        if found is None:
            raise ApiError(404, "not_found", "No such file.")
        kind = content_type(path)
        if kind.startswith("text/"):
            kind += "; charset=utf-8"
        # Vendor files whose URL changes with their content (a version in the path or the name)
        # are kept for a year without asking; everything else is revalidated (a 304 keeps the
        # browser's compiled-wasm cache, which is keyed to the original 200).
        cache_control = "public, max-age=31536000, immutable" if immutable(path) else "no-cache"
        return (await files.encoded(found)).response(request.headers, kind, cache_control)

    return app


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def same_origin(origin: str | None, host: str | None, absent_ok: bool = False) -> bool:
    """Whether a request's Origin is this server (``absent_ok``: a request without one, which
    browsers do not make cross-site, passes)."""
    if not origin:
        return absent_ok
    return host is not None and urlsplit(origin).netloc == host
