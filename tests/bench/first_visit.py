"""Benchmark: the bytes a first visit moves over the wire, the service worker's precache included.

Run on demand:  .venv/bin/python -m tests.bench.first_visit

Starts the app (tests.processes.Server, a temporary SQLite database) behind a small counting TCP
proxy, so every byte the browser receives is counted whoever asked for it (the page, the service
worker's precache, a worker): nothing escapes the count. Then, in a fresh Chromium context, it opens
the page, signs up as the e2e tests do, waits until the app is ready (body[data-ready=true]) and the
service worker controls the page (it activates only once its precache is complete), and reports the
bytes received (headers and bodies as sent, so compressed bodies count compressed), in total and by
request path. Target (issue 13): <= 8 MB for a first visit.
"""

from __future__ import annotations

import asyncio
import collections
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, sync_playwright

from tests.e2e.conftest import playwright_config
from tests.e2e.pages import BOOT_TIMEOUT, open_app, sign, wait_for_service_worker
from tests.processes import Server, free_port


class _Requests:
    """The client's side of one HTTP/1.1 connection: the request targets, in order."""

    def __init__(self) -> None:
        self.buffer = b""
        self.skip = 0
        self.targets: collections.deque[tuple[str, str]] = collections.deque()
        self.upgraded = False

    def feed(self, data: bytes) -> None:
        if self.upgraded:
            return
        self.buffer += data
        while True:
            if self.skip:
                taken = min(self.skip, len(self.buffer))
                self.buffer, self.skip = self.buffer[taken:], self.skip - taken
                if self.skip:
                    return
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
            lines = head.split("\r\n")
            method, target = lines[0].split(" ")[:2]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            self.targets.append((method, target.split("?")[0]))
            self.skip = int(headers.get("content-length", "0"))
            if headers.get("upgrade", "").lower() == "websocket":
                self.upgraded = True
                return


class _Responses:
    """The server's side of the same connection: each response's bytes, given to its request."""

    def __init__(
        self, requests: _Requests, counts: collections.Counter[str], responses: collections.Counter[str],
        downloads: collections.Counter[str],
    ) -> None:
        self.requests = requests
        self.counts = counts
        self.responses = responses
        self.downloads = downloads
        self.buffer = b""
        self.current: str | None = None  # the path of the response being received
        self.body_left = 0
        self.chunked = False
        self.websocket: str | None = None

    def feed(self, data: bytes) -> None:
        if self.websocket is not None:
            self.counts[self.websocket] += len(data)
            return
        self.buffer += data
        while self.buffer:
            if self.current is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buffer[: end + 4]
                self.buffer = self.buffer[end + 4 :]
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ")[1])
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                if 100 <= status < 200 and status != 101:
                    continue
                method, path = self.requests.targets.popleft() if self.requests.targets else ("GET", "?")
                self.current = path
                self.counts[path] += len(head)
                self.responses[path] += 1
                self.downloads[path] += status == 200
                if status == 101:
                    self.websocket = f"{path} (WebSocket)"
                    self.counts[self.websocket] += len(self.buffer)
                    self.buffer = b""
                    return
                self.chunked = "chunked" in headers.get("transfer-encoding", "")
                no_body = method == "HEAD" or status in (204, 304)
                self.body_left = 0 if no_body or self.chunked else int(headers.get("content-length", "0"))
                if no_body or (not self.chunked and self.body_left == 0):
                    self.current = None
                continue
            if self.chunked:
                end = self.buffer.find(b"\r\n")
                if end < 0:
                    return
                size = int(self.buffer[:end].split(b";")[0], 16)
                need = end + 2 + size + 2
                if size == 0:  # the last chunk, then (no trailers from our server) an empty line
                    need = end + 4
                if len(self.buffer) < need:
                    return
                self.counts[self.current] += need
                self.buffer = self.buffer[need:]
                if size == 0:
                    self.current = None
                continue
            taken = min(self.body_left, len(self.buffer))
            self.counts[self.current] += taken
            self.buffer, self.body_left = self.buffer[taken:], self.body_left - taken
            if self.body_left == 0:
                self.current = None


class CountingProxy:
    """A TCP proxy on a free port in a thread of its own, counting what the server sends back."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: collections.Counter[str] = collections.Counter()  # bytes by request path
        self.responses: collections.Counter[str] = collections.Counter()  # responses by request path
        self.downloads: collections.Counter[str] = collections.Counter()  # of them, 200s (with the file)
        self.total_received = 0
        self.total_sent = 0
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.Server | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CountingProxy:
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _close(self) -> None:
        if self.server is not None:
            self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def reset(self) -> None:
        self.received.clear()
        self.responses.clear()
        self.downloads.clear()
        self.total_received = self.total_sent = self.connections = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            self.server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
            self.started.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        requests = _Requests()
        responses = _Responses(requests, self.received, self.responses, self.downloads)

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if upstream:
                        self.total_sent += len(data)
                        requests.feed(data)
                    else:
                        self.total_received += len(data)
                        responses.feed(data)
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        await asyncio.gather(pump(client_reader, server_writer, True), pump(server_reader, client_writer, False))


def measure(base_url: str, browser: Browser | None = None) -> dict[str, Any]:
    """A first visit to the app at ``base_url`` (a server on 127.0.0.1) through a counting proxy:
    ``{"total_bytes", "sent_bytes", "connections", "by_file": {path: bytes}, "responses": {path: n},
    "downloads": {path: how many of those were 200s}}``
    (``browser``: a Chromium already running; otherwise one is launched for the visit)."""
    upstream_port = int(base_url.rsplit(":", 1)[1].strip("/"))
    with CountingProxy(upstream_port) as proxy:
        if browser is not None:
            _visit(browser, proxy.url)
        else:
            with sync_playwright() as p:
                launched = p.chromium.launch(**playwright_config.LAUNCH_ARGS)  # type: ignore[arg-type]
                try:
                    _visit(launched, proxy.url)
                finally:
                    launched.close()
        return {
            "total_bytes": proxy.total_received,
            "sent_bytes": proxy.total_sent,
            "connections": proxy.connections,
            "by_file": dict(proxy.received.most_common()),
            "responses": dict(proxy.responses),
            "downloads": dict(proxy.downloads),
        }


def _visit(browser: Browser, url: str) -> None:
    context = browser.new_context(base_url=url)
    try:
        page = context.new_page()
        open_app(page)
        sign(page, f"visit{uuid.uuid4().hex[:8]}", "a long password", signup=True)
        wait_for_service_worker(page)
        page.wait_for_function(
            "() => navigator.serviceWorker.ready.then((r) => r.active !== null && r.installing === null)",
            timeout=BOOT_TIMEOUT,
        )
        page.wait_for_timeout(1000)  # anything still in flight lands in the count
    finally:
        context.close()


def report(result: dict[str, Any]) -> str:
    lines = [f"first visit: {result['total_bytes'] / 1e6:.2f} MB received ({result['sent_bytes'] / 1e3:.0f} kB sent, "
             f"{result['connections']} connections; target <= 8 MB)"]
    for path, size in result["by_file"].items():
        responses, downloads = result["responses"].get(path, 0), result["downloads"].get(path, 0)
        lines.append(f"  {size / 1e3:10.1f} kB  {responses} responses, {downloads} with the file  {path}")
    return "\n".join(lines)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(f"sqlite:///{Path(tmp) / 'chat.db'}", Path(tmp) / "server.log")
        server.start()
        try:
            print(report(measure(server.url)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
