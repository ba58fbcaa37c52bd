"""Benchmark: the app in Chromium, from a reload to a screen, from sign-in to synced, a first
visit's bytes, and Pyodide against CPython (issue 13). Run on demand:

    .venv/bin/python -m tests.bench.bench_browser [--sizes 1000 10000 50000] [--reloads 5] [--only start]

Sections (``--only`` picks some; all by default):

- ``start``: an account of N messages (seeded with ``python -m server import``), synced into a
  browser context; then ``--reloads`` reloads, each measured from navigation start: *painted*,
  the first contentful paint that shows the last chat (from the render cache, static/paint.js),
  and *interactive*, when a send works (the page's ``chat:interactive`` mark); the median of every
  start-up step (the ``chat:*`` marks static/app.js and webapp/browser.py set) for README's table.
  Baselines in the same run: the shell's own first paint (the same reload with the render cache
  removed) and a bare Pyodide start in the same page (``loadPyodide()`` and ``import sqlite3``).
  Then *typed message shown*: ``--reloads`` more reloads, each with a short message typed as
  soon as the painted composer is there and sent with Enter; from the key's press (a keydown
  listener an init script adds, ``performance.now()``) until an ``li`` with its text is in the
  Messages list (a MutationObserver), beside *interactive* of the same reload; the message must
  show before Python is up, and be there once after it (saved, no longer "Saving on this device").
- ``sync``: a new device's sync at each size in rows/s (the median of 3 new devices, each signing in
  once the first start has made what the next starts from, as by the time a person has typed a
  password), beside ``curl`` downloading the same
  snapshot pages (tests/bench/browser_sync.py).
- ``whole``: a new device's sync at each size timed to the last ``/sync/state`` response, to
  Online, to the oldest message found by an offline search, and to the search index complete;
  signed in once precached and warmed (as ``sync``) and at once after the first page load (a
  fresh browser, the precache and warm-up workers beside it), each idle and beside a process
  spinning on one core (tests/bench/browser_sync.py: ``whole_state_sync``).
- ``catchup``: the same 10,000 logged events applied through the log path in Pyodide in Chromium
  and in CPython (tests/bench/browser_sync.py).
- ``visit``: the bytes a first visit moves over the wire, the service worker's precache included
  (tests/bench/first_visit.py).
- ``answer``: the log bytes of one 2,000-token answer over its text (tests/bench/bench_answer_log.py).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

from tests.bench import browser_sync
from tests.e2e.conftest import playwright_config
from tests.e2e.pages import BOOT_TIMEOUT, open_app, sign
from tests.processes import Server

SECTIONS = ("start", "sync", "whole", "catchup", "visit", "answer")

# Start-up steps, in the order they end (static/app.js, webapp/browser.py).
STEPS = ("painted", "owner", "bundle", "python", "database read", "pyodide", "database installed", "imported", "database opened", "drawn", "interactive")

READ_MARKS = """() => {
  const marks = {};
  for (const entry of performance.getEntriesByType('mark')) {
    if (entry.name.startsWith('chat:')) marks[entry.name.slice(5)] = entry.startTime;
  }
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  marks.fcp = paint ? paint.startTime : null;
  return marks;
}"""

BARE_PYODIDE = """async () => {
  const started = performance.now();
  const { loadPyodide } = await import('/static/vendor/pyodide/' + PYODIDE_VERSION + '/pyodide.mjs');
  const pyodide = await loadPyodide({ indexURL: '/static/vendor/pyodide/' + PYODIDE_VERSION + '/', stdLibURL: '/static/vendor/python_stdlib.zip' });
  pyodide.runPython('import sqlite3');
  return performance.now() - started;
}"""


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _reload(page: Page) -> dict[str, float]:
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    page.wait_for_timeout(300)  # (the paint entries are there a frame later)
    marks: dict[str, float] = page.evaluate(READ_MARKS)
    return marks


# Added to every page of the context: the press of Enter in the composer, and when an item with
# the text it sent is first in the Messages list (both performance.now(), from navigation start).
TYPED_INIT = """(() => {
  window.benchTyped = null;
  const seen = () => {
    const typed = window.benchTyped;
    if (!typed || typed.shown !== null) return;
    for (const li of document.querySelectorAll('#messages > li')) {
      if (li.textContent.includes(typed.text)) { typed.shown = performance.now(); return; }
    }
  };
  window.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || !e.target.matches || !e.target.matches('#composer-text') || window.benchTyped) return;
    window.benchTyped = { text: e.target.value, press: performance.now(), shown: null, ready: document.body.dataset.ready === 'true' };
  }, true);
  new MutationObserver(seen).observe(document, { childList: true, subtree: true });
})()"""


def _typed_reload(page: Page, text: str) -> dict[str, float]:
    """Reload, send ``text`` from the painted composer at once, and time it (see TYPED_INIT)."""
    page.reload(wait_until="commit")
    box = page.locator("#composer-text")
    box.wait_for(timeout=BOOT_TIMEOUT)
    box.press_sequentially(text)
    box.press("Enter")
    page.wait_for_function("() => window.benchTyped && window.benchTyped.shown !== null", timeout=BOOT_TIMEOUT)
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    sent = page.locator("#messages > li", has=page.get_by_text(text, exact=True))
    sent.first.wait_for()
    page.wait_for_function(  # saved by Python: drawn by it, no longer the page's own "Saving"
        """text => [...document.querySelectorAll('#messages > li')].some(li => li.textContent.includes(text) && !li.hasAttribute('data-sending') && !li.textContent.includes('Saving on this device'))""",
        arg=text, timeout=BOOT_TIMEOUT,
    )
    typed: dict[str, float] = page.evaluate("() => window.benchTyped")
    marks: dict[str, float] = page.evaluate(READ_MARKS)
    assert not typed["ready"], "the press came after Python was up"
    assert sent.count() == 1, f"{text!r} is in the list {sent.count()} times"
    return {"press": typed["press"], "shown": typed["shown"], "interactive": marks["interactive"]}


def _pyodide_version() -> str:
    from server.assets import versioned_dir
    from server.config import ROOT

    return versioned_dir(ROOT / "static", "pyodide").rsplit("/", 1)[-1]


def start_figures(browser: Browser, server: Server, username: str, messages: int, reloads: int) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    open_app(page)
    sign(page, username, browser_sync.PASSWORD, signup=False)
    page.wait_for_function(browser_sync.STATUS_ONLINE, timeout=600_000)
    page.wait_for_function("() => localStorage.getItem('chat-render-current') !== null && document.querySelector('#messages li')")
    page.wait_for_timeout(1500)  # the render cache is saved a second after the screen settles
    _reload(page)  # (warm: the service worker controls the page from here)
    for _ in range(240):  # what the next start begins from (static/python-start.js), made in workers
        if page.evaluate("async () => (await (await caches.open('python-start')).keys()).length") == 2:
            break
        page.wait_for_timeout(500)
    else:
        raise AssertionError("no Python snapshot and bytecode were kept")
    runs = [_reload(page) for _ in range(reloads)]
    missing = [run for run in runs if "painted" not in run]
    assert not missing, f"a reload was not painted from the render cache: {missing[0]}"
    painted = [max(run["painted"], run["fcp"] or 0) for run in runs]
    interactive = [run["interactive"] for run in runs]
    page.add_init_script(TYPED_INIT)
    typed = [_typed_reload(page, f"typed after reload {i} of {messages}") for i in range(reloads)]
    page.wait_for_timeout(1500)  # (the render cache of the last screen saved, as before)
    shell = []
    for _ in range(reloads):
        page.evaluate("() => { for (const k of Object.keys(localStorage)) if (k.startsWith('chat-render')) localStorage.removeItem(k); }")
        shell.append(_reload(page)["fcp"])
    bare = []
    for _ in range(reloads):  # in a page of its own (the same origin and caches), without the app
        other = context.new_page()
        other.goto("/help/home-network")
        bare.append(other.evaluate(BARE_PYODIDE.replace("PYODIDE_VERSION", repr(_pyodide_version()))))
        other.close()
    context.close()
    print(f"\n{messages:,} messages on the device (median of {reloads} reloads, ms from navigation start)")
    print(f"  painted (last chat on screen) {_median(painted):7.0f}   shell's own first paint {_median(shell):6.0f}   ratio {_median(painted) / _median(shell):.2f}")
    print(f"  interactive (a send works)    {_median(interactive):7.0f}   bare Pyodide + sqlite3  {_median(bare):6.0f}   ratio {_median(interactive) / _median(bare):.2f}")
    shown = [t["shown"] - t["press"] for t in typed]
    print(
        f"  typed message shown (Enter -> in the list) median {_median(shown):5.0f} ms, max {max(shown):5.0f}"
        f"  | pressed at {_median([t['press'] for t in typed]):5.0f}, shown at {_median([t['shown'] for t in typed]):5.0f},"
        f" interactive at {_median([t['interactive'] for t in typed]):5.0f} (same reloads; each saved once)"
    )
    print("  steps (median time each ends; ms):")
    previous = 0.0
    for step in STEPS:
        ends = [run[step] for run in runs if step in run]
        if not ends:
            continue
        end = _median(ends)
        print(f"    {step:16} {end:7.0f}  (+{max(0.0, end - previous):.0f})")
        previous = max(previous, end)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp())
    url = f"sqlite:///{data / 'chat.db'}"
    chats_of: Callable[[int], int] = lambda n: max(1, n // 500)  # noqa: E731
    wants_accounts = {"start", "sync", "whole"} & set(args.only)
    if wants_accounts:
        for n in args.sizes:
            browser_sync.seed(url, f"b{n}", n, chats_of(n))
    if "catchup" in args.only:
        browser_sync.seed(url, "log", 10_000 - 100, 100)  # (one event a chat or a message)
    server = Server(url, data / "server.log", rate_limit_per_minute="0")
    server.start()
    print(f"{time.strftime('%Y-%m-%d')}: Chromium {playwright_config.CHROMIUM}, SQLite server, this machine")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)
            if "start" in args.only:
                for n in args.sizes:
                    start_figures(browser, server, f"b{n}", n, args.reloads)
            if "sync" in args.only:
                print("\nA new device's sync (sign-in click until Online; median of 3 new devices)")
                for n in args.sizes:
                    browser_sync.print_sync(browser_sync.median_sync(browser, server, f"b{n}", n))
            if "whole" in args.only:
                print("\nA new device's whole state (s from the click on Sign in; one run each)")
                for n in args.sizes:
                    for at_once in (False, True):
                        for spinning in (False, True):
                            browser_sync.print_whole_state(browser_sync.whole_state_sync(browser, server, f"b{n}", n, at_once, spinning))
            if "catchup" in args.only:
                browser_sync.print_catch_up(browser_sync.log_catch_up(browser, server, "log"))
            browser.close()
    finally:
        server.stop()
    if "visit" in args.only:
        from tests.bench import first_visit

        first_visit.main()
    if "answer" in args.only:
        from tests.bench import bench_answer_log

        asyncio.run(bench_answer_log.main([]))  # (its defaults: one 2,000-token answer at 30 tokens/s)


if __name__ == "__main__":
    main()
