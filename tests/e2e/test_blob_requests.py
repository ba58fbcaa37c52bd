"""A file's requests (static/files.js), in Chromium, with no Pyodide: one whose connection goes
quiet (no byte of an upload's body goes, or no answer or no byte of a download comes) is given
up, so it is made again later from where the server is, where it would have waited for good.

The page and files.js are served by a small server of the test's own, which can answer a
download's headers and then fall silent (Playwright's routes answer whole or not at all)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Browser, Route

from server.config import ROOT

TEST_PAGE = "/blob-test"
HTML = b"""<!doctype html><title>blob test</title><body><script type="module">
import * as files from "/static/files.js";
globalThis.chatFiles = files;
document.body.dataset.ready = "true";
</script></body>"""
FILE = bytes(range(256)) * 12_000  # 3 MB: several of the pieces a download is kept as
FILE_SHA256 = hashlib.sha256(FILE).hexdigest()
QUIET, HALF = "a" * 64, "b" * 64  # no answer at all; headers and some bytes, then nothing

SEND = """async ([url, stalledMs]) => {
  const started = performance.now();
  const hung = new Promise((resolve) => setTimeout(() => resolve(["still waiting"]), 20000));
  const sent = chatFiles.send(url, "PATCH", {"Upload-Offset": "0"}, new Blob(["abc"]), null, stalledMs ?? undefined)
    .then(([status]) => [status], (e) => [String(e), performance.now() - started]);
  return Promise.race([sent, hung]);
}"""
WANT = """async ([sha256, stalledMs]) => {
  const started = performance.now();
  const hung = new Promise((resolve) => setTimeout(() => resolve(["still waiting"]), 20000));
  const got = chatFiles.want(sha256, stalledMs).then(([url, why]) => [url ? "url" : "", why, performance.now() - started]);
  return Promise.race([got, hung]);
}"""
KEPT = """async (sha256) => {
  const url = await chatFiles.keptUrl(sha256);
  if (!url) return null;
  const digest = await crypto.subtle.digest("SHA-256", await (await fetch(url)).arrayBuffer());
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}"""


class Handler(BaseHTTPRequestHandler):
    release: threading.Event

    def log_message(self, format: str, *args: Any) -> None:  # (quiet)
        pass

    def _answer(self, status: int, kind: str, body: bytes, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self) -> None:
        if self.path == TEST_PAGE:
            self._answer(200, "text/html", HTML)
        elif self.path == "/static/files.js":
            self._answer(200, "text/javascript", (ROOT / "static" / "files.js").read_bytes())
        elif self.path == f"/blobs/{FILE_SHA256}":
            self._answer(200, "application/octet-stream", FILE)
        elif self.path == f"/blobs/{QUIET}":
            self.release.wait(30)
        elif self.path == f"/blobs/{HALF}":
            self._answer(200, "application/octet-stream", FILE[:1000], length=len(FILE))
            self.release.wait(30)
        else:
            self._answer(404, "application/json", b'{"error": "not_found"}')


@pytest.fixture
def origin() -> Iterator[str]:
    release = threading.Event()
    handler = type("Serving", (Handler,), {"release": release})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    release.set()
    httpd.shutdown()
    httpd.server_close()


def test_an_upload_request_whose_connection_goes_quiet_is_given_up(browser: Browser, origin: str) -> None:
    context = browser.new_context(base_url=origin)
    page = context.new_page()
    held: list[Route] = []
    page.route("**/blobs/quiet", lambda route: held.append(route))  # (never answered: a connection left half-open)
    page.route("**/blobs/answered", lambda route: route.fulfill(status=204, headers={"Upload-Offset": "3"}))
    page.goto(TEST_PAGE)
    page.wait_for_selector("body[data-ready=true]", state="attached")

    answered: list[Any] = page.evaluate(SEND, ["/blobs/answered", None])
    assert answered == [204]
    given_up: list[Any] = page.evaluate(SEND, ["/blobs/quiet", 500])
    assert given_up[0] == "TypeError: the request failed", given_up
    assert given_up[1] >= 500 and held, given_up  # (it went out, and waited that long first)
    assert page.evaluate("chatFiles.STALLED_MS") == 60000
    context.close()


def test_a_download_whose_connection_goes_quiet_is_given_up_and_one_that_comes_is_kept(browser: Browser, origin: str) -> None:
    context = browser.new_context(base_url=origin)
    page = context.new_page()
    page.goto(TEST_PAGE)
    page.wait_for_selector("body[data-ready=true]", state="attached")

    for silent in (QUIET, HALF):  # no answer; an answer whose body stops coming
        given_up: list[Any] = page.evaluate(WANT, [silent, 500])
        assert given_up[:2] == ["", "offline"] and given_up[2] >= 500, (silent, given_up)  # (asked again later)
        assert page.evaluate(KEPT, silent) is None
    assert page.evaluate(WANT, ["c" * 64, 500])[:2] == ["", "missing"]  # (the server does not have it)

    assert page.evaluate(WANT, [FILE_SHA256, 500])[:2] == ["url", ""]
    assert page.evaluate(KEPT, FILE_SHA256) == FILE_SHA256  # kept whole, for offline use
    context.close()
