"""Browser contexts that start Python as a returning visitor's browser does.

A new context is a browser that has never seen the app: its first start of Python builds the
interpreter from scratch and compiles our modules (about 5 s here), and a reload soon after does
it again until the warm-up (static/warm-worker.js) has kept a memory snapshot and the bytecode in
Cache Storage ("python-start"). Those two are content-addressed and immutable (their keys name the
Pyodide build and the exact sources), so the suite makes them once, by a first visit, and puts
them into each new context before it opens the app: sharing them couples no tests. A test of the
first start itself (tests/e2e/test_service_worker.py, the snapshot test in test_render_cache.py,
the insecure contexts, which have no Cache Storage) uses ``browser.new_context`` as it is.

The bytes reach a new context's Cache Storage from a small HTTP server of their own (CORS open),
fetched by a blank page the test routes onto the app's origin: through Playwright's route they
would cross the DevTools protocol as base64 (31 MB: about 14 s a context, against under 1 s).
"""

from __future__ import annotations

import base64
import fcntl
import functools
import http.server
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, BrowserContext, Page

from tests.e2e.pages import open_app, wait_for_next_start

CACHE = "python-start"
_BLANK = "/__python-start-seed"
# A page of the app's origin reads the kept entries out in slices, as base64 (a string is what
# page.evaluate can return).
_SIZE = "async (key) => { const r = await (await caches.open('python-start')).match(key); window.seedBytes = new Uint8Array(await r.arrayBuffer()); return window.seedBytes.length; }"
_SLICE = """([at, size]) => {
  const part = window.seedBytes.subarray(at, at + size);
  let text = "";
  for (let i = 0; i < part.length; i += 0x8000) text += String.fromCharCode.apply(null, part.subarray(i, i + 0x8000));
  return btoa(text);
}"""
_PUT = """async ([entries, source]) => {
  const cache = await caches.open("python-start");
  for (const [path, file] of entries) {
    const response = await fetch(source + file);
    if (!response.ok) throw new Error(`${file}: ${response.status}`);
    await cache.put(new URL(path, location).href, response);
  }
}"""


class _Files(http.server.SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Contexts:
    """Makes new browser contexts whose Cache Storage holds what the next start of Python begins
    from, as a browser that has opened the app before."""

    def __init__(self, browser: Browser, directory: Path) -> None:
        self.browser = browser
        self.directory = directory
        self.entries: list[tuple[str, str]] = []  # (the cache key's path, the file here)
        self.console: list[str] = []  # what the pages of these contexts logged (conftest.py prints it on a failure)
        self._files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Files, directory=str(directory)))
        threading.Thread(target=self._files.serve_forever, daemon=True).start()
        self.source = f"http://127.0.0.1:{self._files.server_address[1]}/"

    def keep_from(self, base_url: str) -> None:
        """A first visit to the app, and what its warm-up kept, read out into files."""
        context = self.browser.new_context(base_url=base_url)
        try:
            page = context.new_page()
            open_app(page)
            wait_for_next_start(page)
            keys = page.evaluate("async () => (await (await caches.open('python-start')).keys()).map((r) => new URL(r.url).pathname)")
            for number, path in enumerate(keys):
                size = page.evaluate(_SIZE, path)
                step = 4 << 20
                data = b"".join(base64.b64decode(page.evaluate(_SLICE, [at, step])) for at in range(0, size, step))
                assert len(data) == size, (path, len(data), size)
                (self.directory / f"entry-{number}").write_bytes(data)
                self.entries.append((path, f"entry-{number}"))
        finally:
            context.close()
        assert len(self.entries) == 2, self.entries  # (the snapshot and the bytecode)

    def keep_once(self, base_url: str) -> None:
        """``keep_from``, once for every process given this directory (pytest-xdist's workers):
        the first to come makes the entries, the others wait for it and read what it kept. (About
        20 s of CPU a first visit costs, on a machine the suite keeps busy.)"""
        with open(self.directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            manifest = self.directory / "entries.json"
            if manifest.exists():
                self.entries = [(path, file) for path, file in json.loads(manifest.read_text())]
            else:
                self.keep_from(base_url)
                manifest.write_text(json.dumps(self.entries))

    def seed(self, context: BrowserContext, base_url: str) -> None:
        """Puts the kept entries into ``context``'s Cache Storage for the origin of ``base_url``."""
        parts = urlsplit(base_url)
        origin = f"{parts.scheme}://{parts.netloc}"
        # (A routed page is of no address space Chromium knows: its fetch of the loopback files
        # needs the permission of Local Network Access; the app's own pages never do. Granted for
        # every origin, which Playwright adds to the context's permissions: one granted for an
        # origin would replace the context's others there, as the clipboard's.)
        context.grant_permissions(["local-network-access"])
        context.route(origin + _BLANK, lambda route: route.fulfill(body="<!doctype html><title>seed</title>", content_type="text/html"))
        page = context.new_page()
        try:
            page.goto(origin + _BLANK)
            page.evaluate(_PUT, [self.entries, self.source])
        finally:
            page.close()
            context.unroute(origin + _BLANK)

    def new(self, base_url: str, **options: Any) -> BrowserContext:
        context = self.browser.new_context(base_url=base_url, **options)
        self.seed(context, base_url)
        context.on("console", lambda message: self.console.append(f"{message.type}: {message.text} (at {message.location})"))
        context.on("weberror", lambda error: self.console.append(f"uncaught: {error.error}"))
        return context

    def page(self, base_url: str, **options: Any) -> Page:
        """A page of a new seeded context."""
        return self.new(base_url, **options).new_page()

    def close(self) -> None:
        self._files.shutdown()
        self._files.server_close()
