"""The Quart app: ``create_app`` builds the parts (the event store, the live-socket hub, the run
worker, the limiters), wires what a commit wakes, and registers the routes' blueprints
(``server/routes/``) and the one error translation (``server/errors.py``)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from hypercorn.middleware import ProxyFixMiddleware
from quart import Quart, Request, Response
from werkzeug.exceptions import HTTPException

from server import auth
from server.appender import run_of
from server.assets import Assets
from server.assistants import load_assistants
from server.attachments import MAX_CHUNK_BYTES, Attachments
from server.blobs import open_blob_store
from server.compactor import run_compactor
from server.config import Settings
from server.databases import open_database
from server.errors import ERRORS, HTTP_CODES, OTHER_CODE, ApiError, translated
from server.event_store import SqlEventStore
from server.fanout import PostgresListener, publish_delta, publish_end
from server.headers import SecurityHeaders, content_security_policy, security_headers
from server.in_flight import InFlight
from server.limits import RateLimiter
from server.live import Hub, KeepAsgiSend, SharedReads
from server.metrics import Metrics
from server.routes import Parts, accounts, assets, blobs, operations, runs, sync
from server.run_store import SqlRunStore
from server.runs import RunWorker
from server.store import Commit


def open_store(url: str, clock: Callable[[], datetime]) -> SqlEventStore:
    try:
        return SqlEventStore(open_database(url), clock)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def utc_now() -> datetime:
    return datetime.now(UTC)


log = logging.getLogger("server")


class ChatRequest(Request):
    """A request body is at most ``--max-body-bytes`` (the app's MAX_CONTENT_LENGTH), but for
    an upload's chunk (``PATCH /blobs/...``), which may be ``MAX_CHUNK_BYTES``."""

    def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
        if method == "PATCH" and path.startswith("/blobs/"):
            kwargs["max_content_length"] = MAX_CHUNK_BYTES
        super().__init__(method, scheme, path, *args, **kwargs)


def open_attachments(store: SqlEventStore, settings: Settings, clock: Callable[[], datetime]) -> Attachments:
    blob_store = open_blob_store(store.db, settings.blob_dir, settings.database_url, clock)
    return Attachments(store.db, blob_store, clock, settings.max_file_bytes, settings.max_account_bytes)


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[tuple[SqlEventStore, Attachments]]:
    """The store and the attachments of ``settings``, open, for a command of
    ``python -m server`` (add-user, export, compact...); closed after."""
    store = open_store(settings.database_url, utc_now)
    await store.open()
    try:
        attachments = open_attachments(store, settings, utc_now)
        await attachments.open()
        try:
            yield store, attachments
        finally:
            await attachments.close()
    finally:
        await store.close()


def create_app(settings: Settings, clock: Callable[[], datetime] = utc_now) -> Quart:
    app = Quart(__name__, static_folder=None)
    app.request_class = ChatRequest
    headers = security_headers(content_security_policy(settings.device_model_origins))
    in_flight = InFlight(KeepAsgiSend(SecurityHeaders(app.asgi_app, headers)))
    app.asgi_app = in_flight  # type: ignore[method-assign]
    if settings.trusted_proxies > 0:
        # Opt-in: the scheme (so the Secure cookie), client address and host a proxy reports.
        # Outermost, so that its copy of the scope is made before a socket's send is put in it.
        app.asgi_app = ProxyFixMiddleware(  # type: ignore[method-assign]
            app.asgi_app, mode="legacy", trusted_hops=settings.trusted_proxies
        )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    store = open_store(settings.database_url, clock)
    attachments = open_attachments(store, settings, clock)
    hub = Hub(SharedReads(store))
    metrics = Metrics(hub.socket_count)
    assistants = load_assistants(
        settings.assistants_file, settings.assistants, settings.upstream_timeout_seconds, settings.demo_seconds_per_word
    )
    publish = functools.partial(publish_delta, store.db, hub)  # a run's tokens to the live sockets, in every process
    worker = RunWorker(
        store,
        SqlRunStore(store.db),
        assistants,
        publish,
        clock,
        lease_seconds=settings.run_lease_seconds,
        poll_seconds=settings.run_poll_seconds,
        checkpoint_seconds=settings.run_checkpoint_seconds,
        end_stream=functools.partial(publish_end, store.db, hub),
        streamed=hub.text_so_far,
        attachments=attachments,
    )

    def committed(commit: Commit) -> None:
        """Whoever appended (a client's request, the run worker): the account's live sockets
        read what is new, and a requested run is looked at now rather than at the next poll."""
        hub.notify(commit.account_id, commit.current_seq)
        metrics.events_appended.inc(len(commit.accepted))
        if any(run_of(e, store.serves) is not None for e in commit.accepted):
            worker.wake()

    store.on_commit = committed
    store.serves = assistants.__contains__
    attachments.on_uploaded = lambda account_id: worker.wake()  # (a run may have waited for it)
    listener = PostgresListener(settings.database_url, hub) if store.db.dialect == "postgres" else None
    parts = Parts(
        settings=settings,
        store=store,
        attachments=attachments,
        hub=hub,
        runs=worker,
        metrics=metrics,
        assets=Assets.load(settings.static_dir),
        listener=listener,
        sessions=auth.SessionCache(settings.session_cache_seconds),
        sync_limiter=RateLimiter(settings.rate_limit_per_minute, burst=max(1, settings.rate_limit_per_minute / 6)),
        auth_limiter=RateLimiter(settings.auth_rate_limit_per_minute, burst=max(1, settings.auth_rate_limit_per_minute / 3)),
        clock=clock,
    )
    app.extensions.update(
        in_flight=in_flight, store=store, attachments=attachments, hub=hub, metrics=metrics, runs=worker, publish_delta=publish
    )
    background: list[asyncio.Task[None]] = []

    @app.before_serving
    async def _open() -> None:
        await store.open()
        await attachments.open()
        if listener is not None:
            await listener.start()
        if settings.compact_interval_seconds > 0:
            background.append(asyncio.ensure_future(run_compactor(store, attachments, settings, metrics)))
        background.append(asyncio.ensure_future(worker.run_forever()))

    @app.after_serving
    async def _close() -> None:
        log.info("stopping; open still: %s", in_flight.describe())
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if listener is not None:
            await listener.stop()
        await attachments.close()
        await store.close()

    # Every error is JSON: what a route raises itself, what Quart raises, and what the layers
    # below raise, by the one table of server/errors.py.
    @app.errorhandler(ApiError)
    async def _api_error(error: ApiError) -> Response:
        return error.response()

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        code = HTTP_CODES.get(status, OTHER_CODE)
        return ApiError(status, code, error.description or code).response()

    async def _translated(error: Exception) -> Response:
        answer = translated(error)
        assert answer is not None  # (registered for the table's types only)
        return answer.response()

    for kind in ERRORS:
        app.register_error_handler(kind, _translated)

    for blueprint in (
        accounts.create_blueprint(parts),
        sync.create_blueprint(parts),
        runs.create_blueprint(parts, assistants),
        blobs.create_blueprint(parts),
        operations.create_blueprint(parts),
        assets.create_blueprint(parts),
    ):
        app.register_blueprint(blueprint)
    return app
