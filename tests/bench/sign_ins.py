"""Benchmark: a new device signing in, several times back to back, with each ``/sync/state``
page's parse and store timed in the page (Python's own clock, around the calls webapp/browser.py
and webapp/snapshots.py make), beside the time to Online. Run on demand, from the tree to measure:

    .venv/bin/python -m tests.bench.sign_ins [--messages 50000] [--runs 4] [--idle]

Each sign-in is ``tests/bench/browser_sync.py: whole_state_sync``'s "once precached and warmed":
a new browser context, the service worker's precache and the first start's warm-up waited for,
then the click on Sign in, timed until the status says Online; with a process spinning on one core
beside it (unless ``--idle``), started before the context and killed (by its pid) after it.
The parse is whatever turns the response's bytes into what is stored (``read_state_page``, or
on a tree from before it, ``StateResponse.model_validate_json``); the store is
``apply_snapshot_page`` until it returns (one transaction; its IndexedDB write is not awaited but
on the last page). Figures of the 5,000-row pages only (not the first, 500 rows, nor the last).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

from tests.bench import browser_sync
from tests.e2e.conftest import playwright_config
from tests.e2e.pages import open_app
from tests.processes import Server

TRACE = """
import json, time
from webapp import browser, store

trace = {"parse": [], "store": [], "rows": [], "times": []}

def _timed_parse(parse):
    def timed(body):
        start = time.perf_counter()
        page = parse(body)
        trace["parse"].append(time.perf_counter() - start)
        trace["times"].append(("parse", start, time.perf_counter()))
        return page
    return timed

if hasattr(browser, "read_state_page"):
    browser.read_state_page = _timed_parse(browser.read_state_page)
else:  # (a tree from before the rows: the page parsed into models)
    class _Models:
        model_validate_json = staticmethod(_timed_parse(browser.StateResponse.model_validate_json))
    browser.StateResponse = _Models

_apply = store.LocalStore.apply_snapshot_page

async def _timed_apply(self, page, first):
    start = time.perf_counter()
    rows = page.count() if hasattr(page, "count") else len(page.snapshot.messages) + len(page.snapshot.chats)
    done = await _apply(self, page, first)
    trace["store"].append(time.perf_counter() - start)
    trace["times"].append(("store", start, time.perf_counter()))
    trace["rows"].append(rows)
    return done

store.LocalStore.apply_snapshot_page = _timed_apply
"""


def sign_in(browser: Browser, server: Server, username: str, spinning: bool) -> dict[str, object]:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if spinning else None
    try:
        context = browser.new_context(base_url=server.url)
        page = context.new_page()
        open_app(page)
        browser_sync.until_warmed(page)
        page.evaluate("code => pyodide.runPython(code)", TRACE)
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", browser_sync.PASSWORD)
        page.evaluate("() => { window.benchStart = performance.now(); }")
        page.click("button[value=signin]")
        page.wait_for_function(browser_sync.STATUS_ONLINE, timeout=600_000, polling=10)
        online, start = page.evaluate("() => [performance.now(), window.benchStart]")
        trace = json.loads(page.evaluate("() => pyodide.runPython('json.dumps(trace)')"))
        count = page.evaluate(
            "code => pyodide.runPython(code)",
            "chat_client.store.conn.execute('SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM chats)').fetchone()[0]",
        )
        context.close()
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    # The page's thread between a page stored and the next one parsed: redraws, or waiting for it.
    times = sorted(trace["times"], key=lambda t: t[1])
    waits = [b[1] - a[2] for a, b in zip(times, times[1:], strict=False) if a[0] == "store" and b[0] == "parse"]
    full = [i for i, rows in enumerate(trace["rows"]) if rows == max(trace["rows"])][:-1]  # (5,000-row pages, not the last)
    seconds = (online - start) / 1000
    return {
        "online": seconds,
        "rows": count,
        "rate": count / seconds,
        "parse": statistics.median(trace["parse"][i] for i in full) * 1000,
        "store": statistics.median(trace["store"][i] for i in full) * 1000,
        "parse_range": (min(trace["parse"][i] for i in full) * 1000, max(trace["parse"][i] for i in full) * 1000),
        "store_range": (min(trace["store"][i] for i in full) * 1000, max(trace["store"][i] for i in full) * 1000),
        "waits": sum(waits),
        "busy": sum(t[2] - t[1] for t in times),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--idle", action="store_true", help="no process spinning beside the sign-ins")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp())
    url = f"sqlite:///{data / 'chat.db'}"
    browser_sync.seed(url, "signin", args.messages, max(1, args.messages // 500))
    server = Server(url, data / "server.log", rate_limit_per_minute="0")
    server.start()
    print(f"{time.strftime('%Y-%m-%d %H:%M')} {Path.cwd()}: {args.messages:,} messages, {'idle' if args.idle else 'one core spinning'}", flush=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)
            for _ in range(args.runs):
                load = Path("/proc/loadavg").read_text().split()[0]
                f = sign_in(browser, server, "signin", spinning=not args.idle)
                print(
                    f"  Online {f['online']:5.2f} s ({f['rate']:,.0f} rows/s) | a 5,000-row page: parse {f['parse']:5.1f} ms"
                    f" ({f['parse_range'][0]:.0f}-{f['parse_range'][1]:.0f}), store {f['store']:5.1f} ms"
                    f" ({f['store_range'][0]:.0f}-{f['store_range'][1]:.0f}) | all pages' parse and store {f['busy']:4.2f} s,"
                    f" between a page stored and the next parsed {f['waits']:4.2f} s (redraws, waiting for it) | load before {load}",
                    flush=True,
                )
            browser.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
