"""An upload's request (static/files.js: send), in Chromium, with no Pyodide: one whose
connection goes quiet (neither a byte of the body goes nor an answer comes) is given up, so the
upload engine tries again from the server's offset, where it waited for good."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, Route

from tests.processes import Server

TEST_PAGE = "/upload-test"
HTML = """<!doctype html><title>upload test</title><body><script type="module">
import * as files from "/static/files.js";
globalThis.chatFiles = files;
document.body.dataset.ready = "true";
</script></body>"""

SEND = """async ([url, stalledMs]) => {
  const started = performance.now();
  const hung = new Promise((resolve) => setTimeout(() => resolve(["still waiting"]), 20000));
  const sent = chatFiles.send(url, "PATCH", {"Upload-Offset": "0"}, new Blob(["abc"]), null, stalledMs ?? undefined)
    .then(([status]) => [status], (e) => [String(e), performance.now() - started]);
  return Promise.race([sent, hung]);
}"""


def test_an_upload_request_whose_connection_goes_quiet_is_given_up(browser: Browser, server: Server) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    held: list[Route] = []
    page.route(f"{server.url}{TEST_PAGE}", lambda route: route.fulfill(content_type="text/html", body=HTML))
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
