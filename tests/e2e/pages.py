"""Helpers that drive the app the way a person does."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Page, expect

from tests.processes import Server

if TYPE_CHECKING:
    from tests.e2e.contexts import Contexts

BOOT_TIMEOUT = 60_000
# page.wait_for_function is given a function ("() => ..."), never a bare expression: Playwright
# evaluates an expression with eval on every poll after the first, which the app's
# Content-Security-Policy refuses (a function is evaluated once, then called).


def open_app(page: Page) -> None:
    page.goto("/")
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)


def sign(page: Page, username: str, password: str, signup: bool) -> None:
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click(f"button[value={'signup' if signup else 'signin'}]")
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()


def wait_for_service_worker(page: Page) -> None:
    """The service worker has precached everything and controls the page."""
    page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=BOOT_TIMEOUT)


def new_chat(page: Page) -> None:
    """Make a chat, and wait until the composer writes in it."""
    before = page.locator(".chat-item").count()
    drawer = page.get_by_role("button", name="Chats")
    if drawer.is_visible():  # a narrow screen: the chat list is a drawer
        drawer.click()
    # (the first: a chat not named yet is a button "New chat" too, in the list after it)
    page.get_by_role("button", name="New chat", exact=True).first.click()
    expect(page.locator(".chat-item")).to_have_count(before + 1)
    page.wait_for_function(
        "() => document.getElementById('composer-text').dataset.chat === "
        "document.querySelector('.chat-item.selected')?.dataset.id"
    )


def signed_up(contexts: Contexts, server: Server, **options: Any) -> Page:
    """A page of a new seeded context, signed up as a new user, in a new chat."""
    page = contexts.page(server.url, **options)
    sign_up(page)
    return page


def sign_up(page: Page) -> None:
    """The app opened in ``page``, signed up as a new user, in a new chat."""
    open_app(page)
    sign(page, f"u{uuid.uuid4().hex[:10]}", "a long password", signup=True)
    new_chat(page)


def wait_for_next_start(page: Page) -> None:
    """The next start's Python snapshot and compiled modules are stored (made in workers once the
    page is interactive: the last thing a first visit does). (page.wait_for_function does not await
    a promise: each poll asks the cache, and looks at what the poll before found.)"""
    page.wait_for_function(
        """() => {
          caches.open("python-start").then((c) => c.keys()).then((keys) => { window.startCached = keys.length; });
          return window.startCached === 2;
        }""",
        polling=250,
        timeout=90_000,
    )


def wait_until(page: Page | None, predicate: Callable[[], object], why: Callable[[], str] | str = "", timeout: float = 30.0) -> None:
    """Like tests/waiting.py's until, for a condition on what Playwright's handlers (a route, a
    WebSocket's frames) record in Python: they run only while Playwright is called, so this polls
    with short waits of Playwright's until the condition holds, and fails after ``timeout`` s.
    With no page (none open: a browser killed), the waits are plain sleeps."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {why() if callable(why) else why}")
        if page is None:
            time.sleep(0.02)
        else:
            page.wait_for_timeout(20)


def at_bottom(page: Page) -> bool:
    """The message list is scrolled to its end."""
    return bool(page.evaluate("(s => s.scrollHeight - s.scrollTop - s.clientHeight <= 24)(document.getElementById('scroller'))"))


def send(page: Page, text: str, assistant: str = "") -> None:
    """Type and send a message, answered by ``assistant`` (none by default)."""
    page.fill("textarea[name=text]", text)
    choice = page.locator("select[name=assistant]")
    if choice.count():  # (not while editing a message)
        choice.select_option(assistant)
    page.locator("textarea[name=text]").press("Enter")


def api(base_url: str, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    request = urllib.request.Request(
        base_url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())
