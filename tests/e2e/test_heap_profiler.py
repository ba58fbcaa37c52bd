"""The app starts, and Python answers, in a Chromium whose heap profiler samples allocations.

Chromium turns its heap profiler (the HeapProfilerReporting feature) on at random in some sessions
(about 1 launch in 30 here); a sampled allocation made while WebAssembly runs on a JSPI stack
(which Pyodide uses for every call into Python when the browser has JSPI) crashed the renderer at
Python's start: static/no-jspi.js starts Pyodide without JSPI. Here the profiler is forced on, in
every process, sampling often, for two launches of one browser profile in a row: a first
visit (Python started fresh, the next start's snapshot made in a worker), then a returning one
(Python started from that snapshot; a third launch started the same way again). Each one answers in the page (the local helper) and in
the Python worker (its tool). The rest of the suite keeps the profiler off (playwright.config.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, Playwright, expect

from tests.e2e.conftest import playwright_config
from tests.e2e.pages import new_chat, open_app, send, sign, wait_for_next_start
from tests.processes import Server

# Chromium 156's parameters (components/heap_profiling/in_process/heap_profiler_parameters.cc):
# the draw always won, on any channel, renderers always included, a sample every 1,000 bytes on
# average (10 MB by default). Forced so, the first start crashed every time before the fix.
FORCED = (
    "HeapProfilerReporting:stable-probability/1.0/nonstable-probability/1.0"
    "/renderer-prob-pct/100/renderer-sampling-rate-bytes/1000"
)


def _profiler_on(playwright: Playwright, profile: Path, server: Server) -> BrowserContext:
    """The suite's browser, but for its --disable-features (Playwright's own only: the last one
    given is the one Chromium takes) and the profiler forced on."""
    args = [a for a in playwright_config.SUITE_LAUNCH_ARGS["args"] if not a.startswith("--disable-features=")]
    args += [
        "--disable-features=" + ",".join(playwright_config.PLAYWRIGHT_DISABLED_FEATURES),
        "--enable-features=" + FORCED,
    ]
    launch = {**playwright_config.SUITE_LAUNCH_ARGS, "args": args}
    return playwright.chromium.launch_persistent_context(str(profile), base_url=server.url, **launch)  # type: ignore[arg-type]


def _answers(page: Page, turn: int) -> None:
    """The local helper answers in the page's Python, and runs its tool in the worker's."""
    send(page, f"{turn}^2 + 1", assistant="local-tools")
    expect(page.locator(".message.assistant .content").last).to_have_text(f"{turn}^2 + 1 = {turn * turn + 1}", timeout=30_000)
    send(page, f"python: print({turn} * 7)", assistant="local-tools")
    expect(page.locator(".message.tool_result .content").last).to_have_text(str(turn * 7), timeout=60_000)
    expect(page.locator(".message.pending")).to_have_count(0, timeout=20_000)  # saved on the server


def test_the_app_starts_and_python_answers_with_the_heap_profiler_on(playwright: Playwright, server: Server, tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    crashed: list[Page] = []  # ("Page crashed": the renderer died)

    def on_crash(crashed_page: Page) -> None:
        crashed.append(crashed_page)

    for launch in range(2):
        context = _profiler_on(playwright, profile, server)
        page = context.pages[0] if context.pages else context.new_page()
        page.on("crash", on_crash)
        if launch == 0:
            # (else this test could not fail: it is the browser's JSPI that the profiler trips on)
            assert page.evaluate("'Suspending' in WebAssembly"), "this Chromium has no JSPI"
        open_app(page)
        if launch == 0:
            sign(page, f"heap{uuid.uuid4().hex[:8]}", "a long password", signup=True)
        else:
            expect(page.get_by_role("textbox", name="Message")).to_be_visible()  # still signed in
        assert page.evaluate("document.body.dataset.python") == ("fresh" if launch == 0 else "snapshot")
        new_chat(page)
        _answers(page, launch + 2)
        if launch == 0:
            wait_for_next_start(page)  # (made in a worker, under the profiler too)
        assert not crashed
        context.close()
