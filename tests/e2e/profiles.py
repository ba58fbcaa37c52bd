"""A browser on a profile of its own (kept on disk, as a person's): launched, SIGKILLed as a
machine going down kills it, and opened again on the same profile."""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, Playwright

from server.chaos.procs import browser_processes, kill_browser
from tests.e2e.conftest import playwright_config
from tests.e2e.contexts import Contexts
from tests.e2e.pages import new_chat, open_app, sign
from tests.processes import Server


def launch(playwright: Playwright, profile: Path, server: Server) -> BrowserContext:
    return playwright.chromium.launch_persistent_context(str(profile), base_url=server.url, **playwright_config.SUITE_LAUNCH_ARGS)  # type: ignore[arg-type]


def kill(profile: Path, context: BrowserContext) -> None:
    """SIGKILL the whole browser (not just a tab), every process of it at once, as a machine
    going down does: nothing of it gets to save anything more (server/chaos/procs.py). Returns
    once all are gone, so that the next browser never opens the profile beside a process of this
    one. (The "Page crashed" once put down to such a process was Chromium's heap profiler: see
    playwright.config.py.)"""
    [_] = browser_processes(profile)
    kill_browser(profile)
    try:
        context.close()
    except Exception:  # the browser is gone: nothing left to close
        pass


def signed_up_in_a_profile(playwright: Playwright, contexts: Contexts, profile: Path, server: Server, username: str = "") -> None:
    context = launch(playwright, profile, server)
    contexts.seed(context, server.url)  # (kept on disk in the profile, as in a returning visitor's)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    sign(page, username or f"kill{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    new_chat(page)
    context.close()  # (the session cookie is on disk now: the kill below is what is tested)


def reopened(playwright: Playwright, profile: Path, server: Server) -> tuple[BrowserContext, Page]:
    context = launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    return context, page
