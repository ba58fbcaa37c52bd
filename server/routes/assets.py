"""The app's files: the page, the service worker, our Python as one zip, and the static files
(precompressed where set-up made ``.br``/``.gz`` beside them: server/compression.py)."""

from __future__ import annotations

from quart import Blueprint, Response, request

from server.assets import content_type, immutable
from server.compression import LazilyEncoded, StaticFiles
from server.errors import ApiError
from server.routes import Parts


def create_blueprint(parts: Parts) -> Blueprint:
    routes = Blueprint("assets", __name__)
    assets = parts.assets
    service_worker_script = LazilyEncoded(assets.service_worker().encode(), assets.version)
    bundle = LazilyEncoded(assets.bundle, assets.bundle_etag)
    files = StaticFiles(parts.settings.static_dir)

    @routes.get("/")
    async def index() -> Response:
        return await static_file("index.html")

    @routes.get("/sw.js")
    async def service_worker() -> Response:
        script = await service_worker_script.get()
        return script.response(request.headers, "text/javascript; charset=utf-8", "no-cache")

    @routes.get("/py/app.zip")
    async def python_bundle() -> Response:
        return (await bundle.get()).response(request.headers, "application/zip", "no-cache")

    @routes.get("/static/<path:path>")
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

    return routes
