"""Benchmark: how fast a device catches up, in Chromium (Pyodide) and in CPython.

Run on demand:  .venv/bin/python -m tests.bench.browser_sync [--sizes 10000 50000] [--log-events 10000]

- ``new_device_sync(n)``: an account of ``n`` messages over ``n // 500`` chats (seeded with
  ``python -m server import``, the server's own append, on a temporary SQLite database); a new
  browser context signs in, and the time from the click on Sign in until the status says Online
  (the snapshot downloaded page by page, stored durably in IndexedDB, then the log from its
  upToSeq and the outbox pushed) gives rows/s. Beside it, in the same run: the time ``curl``
  (one process per page, ``--compressed``) needs to download the same snapshot pages, the
  floor the network and the server set. Also when the chat list was first drawn.
- ``log_catch_up(n)``: the same ``n`` logged events pulled through ``/sync/updates`` and applied
  by the same code (``SyncEngine.pull`` on the log path into a fresh ``LocalStore``, persisted
  as a plain file in both places, so only Python and SQLite are compared) in Pyodide in
  Chromium and in CPython; the ratio is Pyodide's rate over CPython's.

``bench_browser.py`` (the issue's browser benchmark) can call these functions; ``main`` prints them.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, Page, sync_playwright

from server.config import ROOT
from shared.models import UpdatesResponse
from tests.e2e.conftest import playwright_config
from tests.e2e.pages import open_app, sign, wait_for_service_worker
from tests.processes import Server

PASSWORD = "a long password"
T0 = 1_764_590_400_000  # 2025-12-01T12:00:00Z, in ms
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()
STATUS_ONLINE = "() => document.getElementById('status')?.dataset.state === 'online'"
WARMED = "async () => (await (await caches.open('python-start')).keys()).length === 2"  # (snapshot, bytecode)


def until_warmed(page: Page) -> None:
    """The first visit's background work done: the service worker has precached the app, and
    the warm-up (static/warm-worker.js) has kept what the next start begins from. Each takes a
    core for seconds: a figure taken beside them is of them too (a person takes a few seconds
    over their name and password, and a page is first visited once)."""
    wait_for_service_worker(page)
    for _ in range(1200):
        if page.evaluate(WARMED):
            return
        page.wait_for_timeout(100)
    raise AssertionError("no Python snapshot and bytecode were kept in two minutes")


def _time(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _uuid7(ms: int, n: int) -> str:
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0x8 << 60) | n))


def export_file(messages: int, chats: int) -> str:
    """An export (shared/transfer.py's format) of ``messages`` messages spread over ``chats``
    chats, each chat a thread of ~200-character messages, user and assistant in turn."""
    chat_rows, message_rows, last = [], [], {}
    for c in range(chats):
        at = T0 + c
        chat_rows.append({"id": _uuid7(at, c), "title": f"chat {c}", "createdAt": _time(at), "updatedAt": _time(at), "lastSeq": 0})
    for m in range(messages):
        chat = chat_rows[m % chats]["id"]
        at = T0 + 10_000 + m * 10
        text = " ".join(WORDS[(m + k) % len(WORDS)] for k in range(36))[:200]
        message_rows.append({
            "id": _uuid7(at, 1_000_000 + m), "chatId": chat, "role": "user" if m % 2 == 0 else "assistant",
            "content": f"{m}: {text}", "parentId": last.get(chat), "status": "completed", "assistantId": None,
            "runId": None, "createdAt": _time(at), "updatedAt": _time(at), "lastSeq": 0,
        })  # fmt: skip
        last[chat] = message_rows[-1]["id"]
    return json.dumps({"format": "chat-export", "version": 1, "exportedAt": _time(T0), "chats": chat_rows, "messages": message_rows})


def seed(database_url: str, username: str, messages: int, chats: int) -> None:
    """An account with that many chats and messages, through the server's own code."""
    env = {"CHAT_DATABASE_URL": database_url}
    run = lambda *args, stdin: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "server", *args], cwd=ROOT, input=stdin, capture_output=True, check=True,
        env={**__import__("os").environ, **env},
    )
    run("add-user", username, stdin=(PASSWORD + "\n").encode())
    run("import", "--user", username, stdin=export_file(messages, chats).encode())


def login(server: Server, username: str) -> str:
    response = httpx.post(server.url + "/auth/login", json={"username": username, "password": PASSWORD})
    response.raise_for_status()
    return str(response.json()["token"])


def curl_snapshot(server: Server, token: str, limit: int = 1000) -> tuple[float, int, int]:
    """Download every page of the snapshot with curl, one process per page: (seconds curl
    reported in all, rows, bytes over the wire)."""
    seconds, rows, wire, page, up_to = 0.0, 0, 0, None, None
    while True:
        query = f"limit={limit}" + (f"&upToSeq={up_to}&page={urllib.parse.quote(page)}" if page else "")
        done = subprocess.run(
            ["curl", "-s", "--compressed", "-H", f"Authorization: Bearer {token}", "-w", "\n%{time_total} %{size_download}",
             f"{server.url}/sync/state?{query}"],
            capture_output=True, check=True, text=True,
        )  # fmt: skip
        body, _, figures = done.stdout.rpartition("\n")
        took, size = figures.split()
        seconds, wire = seconds + float(took), wire + int(size)
        data = json.loads(body)
        rows += len(data["snapshot"]["chats"]) + len(data["snapshot"]["messages"])
        up_to, page = data["upToSeq"], data["nextPage"]
        if page is None:
            return seconds, rows, wire


@dataclass(frozen=True)
class WholeStateFigures:
    """A new device's sync timed to three ends, in seconds from the click on Sign in."""

    messages: int
    rows: int
    at_once: bool  # signed in at once after the first page load (else: once precached and warmed)
    spinning: bool  # a process spinning on one core beside it
    last_state_response: float  # the end of the last /sync/state response (page.on("requestfinished"))
    online: float  # the status says Online
    oldest_found: float  # the oldest message found by an offline search (typed once Online)
    indexed: float  # the search index holds every message (its backlog empty)

    @property
    def rate(self) -> float:
        """Rows/s to Online."""
        return self.rows / self.online


# When a search result shows the oldest message (performance.now()).
OLDEST_FOUND = """() => { window.benchFound = null;
  const seen = () => [...document.querySelectorAll('button')].some((b) => b.closest('[aria-label="Search results"]') && b.textContent.includes('0: the quick'));
  new MutationObserver((_, observer) => {
    if (seen()) { window.benchFound = performance.now(); observer.disconnect(); }
  }).observe(document.body, { childList: true, subtree: true, characterData: true }); }"""

# Once Online: how many messages the search index does not hold yet, polled in the page every
# 50 ms until none (performance.now() of the first poll that finds none).
INDEXED = """() => new Promise((resolve) => {
  const poll = () => {
    if (pyodide.runPython('chat_client.store.search_backlog()') === 0) resolve(performance.now());
    else setTimeout(poll, 50);
  };
  poll();
})"""


def whole_state_sync(browser: Browser, server: Server, username: str, messages: int, at_once: bool, spinning: bool) -> WholeStateFigures:
    """A new browser context signs in to the account, either once the service worker has
    precached the app and the first start has made what the next starts from (as
    ``new_device_sync``), or ``at_once`` after the first page load, as a person signing in
    quickly on a fresh browser meets it (the precache and the warm-up workers,
    static/warm-worker.js, run beside the sync). Timed to the last /sync/state response's end,
    to Online, to the oldest message found by a search with the context offline, and to the
    search index complete."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if spinning else None
    try:
        context = browser.new_context(base_url=server.url)
        page = context.new_page()
        finished: list[float] = []  # epoch ms of each /sync/state response's end
        page.on(
            "requestfinished",
            lambda request: "/sync/state" in request.url
            and finished.append(request.timing["startTime"] + request.timing["responseEnd"]),
        )
        open_app(page)
        if not at_once:
            until_warmed(page)
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.evaluate("() => { window.benchStart = performance.now(); }")
        page.click("button[value=signin]")
        page.wait_for_function(STATUS_ONLINE, timeout=600_000, polling=10)
        online, start, origin = page.evaluate("() => [performance.now(), window.benchStart, performance.timeOrigin]")
        # The oldest message (the export's first, "0: ..."; the token 0 is in no other), searched
        # for with the device offline, the way a person would look for it.
        context.set_offline(True)
        page.evaluate(OLDEST_FOUND)
        page.keyboard.press("Control+K")
        page.get_by_role("searchbox", name="Search").press_sequentially("0")
        page.wait_for_function("() => window.benchFound !== null", timeout=600_000)
        found = page.evaluate("() => window.benchFound")
        indexed = page.evaluate(INDEXED)
        count = page.evaluate(
            "code => pyodide.runPythonAsync(code)",
            "chat_client.store.conn.execute('SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM chats)').fetchone()[0]",
        )
        page.wait_for_timeout(200)  # (the last requestfinished event delivered)
        context.close()
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    assert finished, "no /sync/state response"
    _, rows, _ = curl_snapshot(server, login(server, username))
    assert count == rows, (count, rows)
    since = lambda t: (t - start) / 1000  # noqa: E731
    return WholeStateFigures(
        messages, count, at_once, spinning, (max(finished) - origin - start) / 1000, since(online), since(found), since(indexed)
    )


def print_whole_state(f: WholeStateFigures) -> None:
    how = "signed in at once (precache and warm-up beside)" if f.at_once else "signed in once precached and warmed"
    load = "one core spinning" if f.spinning else "idle"
    print(
        f"  {f.messages:>6} messages, {how}, {load}: last /sync/state response {f.last_state_response:5.2f} s"
        f" | Online {f.online:5.2f} s ({f.rate:,.0f} rows/s) | oldest found offline {f.oldest_found:5.2f} s"
        f" | search index complete {f.indexed:5.2f} s",
        flush=True,
    )


@dataclass(frozen=True)
class SyncFigures:
    messages: int
    rows: int
    seconds: float  # sign-in click until Online
    list_drawn: float | None  # sign-in click until the chat list had its first chat
    curl_seconds: float
    curl_bytes: int

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


# The baseline in the same run: the same client made to replay the whole log instead, as every
# new device did before the state path.
LOG_PATH = """
from webapp import store, sync
sync.FAR_BEHIND = 10**9
store.LocalStore.synced_at = lambda self: self._meta("synced_at") or "never, but take the log"
"""


def new_device_sync(browser: Browser, server: Server, username: str, messages: int, log_path: bool = False) -> SyncFigures:
    """A new browser context signs in to the account and syncs it (see the module); with
    ``log_path``, through the log (the baseline)."""
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    open_app(page)
    # A person takes a few seconds over their name and password: by then the service worker
    # has precached the app and the first start has made what the next one starts from
    # (static/warm-worker.js), either of which would otherwise take a core from the sync.
    until_warmed(page)
    if log_path:
        page.evaluate("code => pyodide.runPythonAsync(code)", LOG_PATH)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.evaluate(
        """() => { window.benchStart = performance.now(); window.benchList = null;
            new MutationObserver((_, observer) => {
              if (document.querySelector('.chat-item')) { window.benchList = performance.now(); observer.disconnect(); }
            }).observe(document.body, {childList: true, subtree: true}); }"""
    )
    page.click("button[value=signin]")
    page.wait_for_function(STATUS_ONLINE, timeout=600_000, polling=10)
    end, start, drawn = page.evaluate("() => [performance.now(), window.benchStart, window.benchList]")
    count = page.evaluate(
        "code => pyodide.runPythonAsync(code)",
        "chat_client.store.conn.execute('SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM chats)').fetchone()[0]",  # (nothing pending: the rows shown are the server's)
    )
    context.close()
    token = login(server, username)
    curl_seconds, rows, wire = curl_snapshot(server, token)
    assert count == rows, (count, rows)
    return SyncFigures(messages, rows, (end - start) / 1000, None if drawn is None else (drawn - start) / 1000, curl_seconds, wire)


def median_sync(browser: Browser, server: Server, username: str, messages: int, runs: int = 3) -> SyncFigures:
    """``new_device_sync`` ``runs`` times (a new device each time): the run of the median time."""
    figures = sorted((new_device_sync(browser, server, username, messages) for _ in range(runs)), key=lambda f: f.seconds)
    return figures[len(figures) // 2]


CATCH_UP = """
import json, time
from webapp.database import FilePersistence
from webapp.store import LocalStore
from webapp import sync
from webapp.sync import SyncEngine
from TRANSPORT_MODULE import TRANSPORT

sync.FAR_BEHIND = 10**9  # the log path, however far behind

async def catch_up(path, transport):
    store = LocalStore(path, FilePersistence())
    await store.apply_remote([], None)  # it has synced once (an empty account): the log path
    engine = SyncEngine(store, transport, lambda: None, lambda status: None)
    start = time.perf_counter()
    await engine.pull()
    seconds = time.perf_counter() - start
    events = store.last_seq()
    store.close()
    return seconds, events
"""


class HttpTransport:
    """The log path's one call, for CPython: as webapp/browser.py's transport makes it (the text
    read, json.loads, the pydantic model)."""

    def __init__(self, base_url: str, token: str) -> None:
        self._client = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"})

    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse:
        response = await self._client.get(f"/sync/updates?afterSeq={after_seq}&limit={limit}")
        response.raise_for_status()
        return UpdatesResponse.model_validate(json.loads(response.text))

    async def close(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class CatchUpFigures:
    events: int
    pyodide_seconds: float
    cpython_seconds: float

    @property
    def ratio(self) -> float:
        """Pyodide's rate over CPython's."""
        return self.cpython_seconds / self.pyodide_seconds


def log_catch_up(browser: Browser, server: Server, username: str) -> CatchUpFigures:
    """The account's log pulled and applied by the same code in Pyodide and in CPython."""
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    open_app(page)
    sign(page, username, PASSWORD, signup=False)
    page.wait_for_function(STATUS_ONLINE, timeout=600_000)
    code = CATCH_UP.replace("TRANSPORT_MODULE", "webapp.browser").replace("TRANSPORT", "BrowserTransport")
    code += "\njson.dumps(await catch_up('/tmp/bench-log.db', BrowserTransport()))"
    pyodide_seconds, pyodide_events = json.loads(page.evaluate("code => pyodide.runPythonAsync(code)", code))
    context.close()

    namespace: dict[str, Any] = {}
    exec(CATCH_UP.replace("from TRANSPORT_MODULE import TRANSPORT\n", ""), namespace)
    token = login(server, username)

    async def cpython() -> tuple[float, int]:
        transport = HttpTransport(server.url, token)
        try:
            with tempfile.TemporaryDirectory() as directory:
                result: tuple[float, int] = await namespace["catch_up"](f"{directory}/log.db", transport)
                return result
        finally:
            await transport.close()

    # (in a thread of its own: Playwright's sync API keeps an event loop running in this one)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        cpython_seconds, cpython_events = pool.submit(asyncio.run, cpython()).result()
    assert pyodide_events == cpython_events, (pyodide_events, cpython_events)
    return CatchUpFigures(cpython_events, pyodide_seconds, cpython_seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--log-events", type=int, default=10_000)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp())
    url = f"sqlite:///{data / 'chat.db'}"
    chats_of = lambda n: max(1, n // 500)  # noqa: E731
    for n in args.sizes:
        seed(url, f"sync{n}", n, chats_of(n))
    log_chats = max(1, args.log_events // 100)
    seed(url, "log", args.log_events - log_chats, log_chats)  # (one event a chat or a message)
    server = Server(url, data / "server.log", rate_limit_per_minute="0")
    server.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)
            print(f"{time.strftime('%Y-%m-%d')}: a new device's sync, SQLite server, Chromium (sign-in click until Online)")
            for n in args.sizes:
                print_sync(median_sync(browser, server, f"sync{n}", n))
                print_sync(new_device_sync(browser, server, f"sync{n}", n, log_path=True), "the same, through the log (before)")
            print_catch_up(log_catch_up(browser, server, "log"))
            browser.close()
    finally:
        server.stop()


def print_sync(f: SyncFigures, label: str = "") -> None:
    if label:
        print(f"    {label}: {f.seconds:6.2f} s, {f.rate:8,.0f} rows/s", flush=True)
        return
    curl_rate = f.rows / f.curl_seconds
    drawn = f"{f.list_drawn:.2f} s" if f.list_drawn is not None else "-"
    print(
        f"  {f.messages:>6} messages ({f.rows:,} rows): {f.seconds:6.2f} s, {f.rate:8,.0f} rows/s"
        f"  | chat list drawn after {drawn}"
        f"  | curl, the same pages: {f.curl_seconds:5.2f} s ({curl_rate:,.0f} rows/s, {f.curl_bytes / 1e6:.1f} MB)"
        f"  | {f.rate / curl_rate:.2f} x curl",
        flush=True,
    )


def print_catch_up(c: CatchUpFigures) -> None:
    print(f"catch-up of {c.events:,} events through the log (/sync/updates + apply)")
    print(
        f"  Pyodide in Chromium {c.pyodide_seconds:5.2f} s ({c.events / c.pyodide_seconds:,.0f} events/s)"
        f"  | CPython {c.cpython_seconds:5.2f} s ({c.events / c.cpython_seconds:,.0f} events/s)"
        f"  | ratio {c.ratio:.2f} (target >= 0.33)",
        flush=True,
    )


if __name__ == "__main__":
    main()
