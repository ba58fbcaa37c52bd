"""The security headers of every response: a Content-Security-Policy, nosniff, no referrer.

The policy allows what the app really does, and nothing else:

- scripts, styles, images, the manifest, the Web Worker (static/python-worker.js) and the service
  worker (/sw.js) only from this origin; no inline script or style anywhere (the API docs page
  and the help page load theirs from /static; a table's alignment is a class, not a style
  attribute; JavaScript setting ``element.style`` is not inline style and needs nothing);
- ``'wasm-unsafe-eval'``: Pyodide compiles WebAssembly (the page's and the worker's). This allows
  ``WebAssembly.compile`` and nothing else: ``eval`` and ``new Function`` stay refused;
- ``connect-src``: ``fetch`` and the live WebSocket to this origin (CSP Level 3 ``'self'`` also
  matches ``ws:``/``wss:`` to the same host and port), and "Model on this device": an
  OpenAI-compatible server the user names (Ollama at http://localhost:11434, LM Studio,
  llama.cpp), which the page calls directly. By default that is this device's loopback, any port,
  http or https: the feature is a model on the device itself, and an HTTPS page could not call a
  plain-http server elsewhere on the network anyway (mixed content), so a wider default would add
  reach without adding a working setup. Whoever runs a model elsewhere names its origin in
  ``--device-model-origins``. ``connect-src`` matters because code runs here on purpose: the local
  helper runs Python the user sends (in a worker under this same policy), and with a narrow
  ``connect-src`` such code cannot send what it reads to anywhere but here and the model;
- ``frame-ancestors 'none'`` (no other site frames the app: clickjacking), ``object-src 'none'``,
  ``base-uri 'none'``, ``form-action 'self'``.
"""

from __future__ import annotations

import re
from typing import Any

# Loopback as CSP sources: a host source has no IPv6 form, so [::1] cannot be named (a model there
# is reached as localhost).
LOOPBACK = ("http://localhost:*", "http://127.0.0.1:*", "https://localhost:*", "https://127.0.0.1:*")
# What --device-model-origins may hold: origins (a port, or * for any), or a bare scheme.
_ORIGIN = re.compile(r"https?:(//(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:(\d{1,5}|\*))?)?")


def content_security_policy(device_model_origins: str = "") -> str:
    """The policy, with ``device_model_origins`` (space-separated) added to ``connect-src``."""
    extra = device_model_origins.split()
    for origin in extra:
        if not _ORIGIN.fullmatch(origin):
            raise SystemExit(
                f"device-model-origins: {origin!r} is not an origin such as https://models.example:8443"
                " (space-separated, a port or * for any, no path)"
            )
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'", "'wasm-unsafe-eval'"],
        "style-src": ["'self'"],
        # Attachments are shown from the page's IndexedDB as object URLs (static/files.js):
        # blob: URLs are the page's own, made of bytes it holds.
        "img-src": ["'self'", "blob:"],
        "connect-src": ["'self'", *LOOPBACK, *extra],
        "worker-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in directives.items())


def security_headers(policy: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-security-policy", policy.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]


class SecurityHeaders:
    """ASGI middleware: the headers on every HTTP response the app sends (pages, JSON, files,
    errors, 404s) and on a WebSocket handshake it refuses with an HTTP response. A header the app
    set itself is kept. In ASGI rather than Quart's ``after_request``, so that no response path
    (an error handler, a failing one) goes without them."""

    def __init__(self, app: Any, headers: list[tuple[bytes, bytes]]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in self.headers if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
