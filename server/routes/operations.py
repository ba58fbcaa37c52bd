"""Operations: liveness and readiness, Prometheus metrics, the API's description, the help pages,
and the access log (one JSON line per request, and its duration in the metrics)."""

from __future__ import annotations

import json
import logging
import time

from quart import Blueprint, Response, g, request

from server.help import HOME_NETWORK, help_page
from server.openapi import DOCS_PAGE, openapi
from server.routes import Parts, json_response
from shared.models import format_time

access_log = logging.getLogger("server.access")


def create_blueprint(parts: Parts) -> Blueprint:
    routes = Blueprint("operations", __name__)
    spec = openapi()
    home_network = help_page(HOME_NETWORK)

    @routes.before_app_request
    async def _started() -> None:
        g.started = time.perf_counter()

    @routes.after_app_request
    async def _log_request(response: Response) -> Response:
        seconds = time.perf_counter() - g.get("started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        parts.metrics.observe_request(route, request.method, response.status_code, seconds)
        access_log.info(
            json.dumps(
                {
                    "at": format_time(parts.clock()),
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "ms": round(seconds * 1000, 2),
                    "remote": request.remote_addr,
                }
            )
        )
        return response

    @routes.get("/healthz")
    async def healthz() -> Response:
        """The process is up."""
        return json_response({"status": "ok"})

    @routes.get("/readyz")
    async def readyz() -> Response:
        """The process can serve: its database answers and (PostgreSQL) it hears other processes."""
        problems = []
        try:
            await parts.store.current_seq("readyz")
        except Exception as e:  # any failure means "not ready", with its reason
            problems.append(f"database: {e}")
        if parts.listener is not None and not parts.listener.connected:
            problems.append("fan-out: not listening")
        if parts.hub.closing:
            problems.append("shutting down")
        if problems:
            return json_response({"status": "unavailable", "problems": problems}, status=503)
        return json_response({"status": "ready"})

    @routes.get("/openapi.json")
    async def openapi_json() -> Response:
        return json_response(spec)

    @routes.get("/docs")
    async def docs() -> Response:
        return Response(DOCS_PAGE, content_type="text/html; charset=utf-8")

    @routes.get("/help/home-network")
    async def help_home_network() -> Response:
        """How to serve the app to the other devices of a home network (README.md's section)."""
        return Response(home_network, content_type="text/html; charset=utf-8")

    @routes.get("/metrics")
    async def metrics_page() -> Response:
        return Response(parts.metrics.render(), content_type=parts.metrics.content_type)

    return routes
