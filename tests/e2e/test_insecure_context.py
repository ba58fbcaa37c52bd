"""Opened over plain http:// under a home-network name, the page is not a secure context: no Web
Locks, no service worker. The app still works online, one tab owning the database through
static/locks.js, and says what HTTPS would add. The module itself is tested here too, in pages of
that origin (a document that does not start the app)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, BrowserType, Page, expect
from playwright.sync_api import Error as PlaywrightError

from shared.assistants import demo_answer
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, send, sign
from tests.processes import Server

# A home-network name (RFC 8375) that this test's browser resolves to 127.0.0.1 (loopback itself
# would be a secure context, even over http).
HOST = "chat.home.arpa"
LEASE_MS = 4000  # static/locks.js LEASE_MS


@pytest.fixture(scope="module")
def lan_browser(browser_type: BrowserType, browser_type_launch_args: dict[str, Any]) -> Iterator[Browser]:
    """A Chromium that resolves HOST to 127.0.0.1."""
    args = [*browser_type_launch_args.get("args", []), f"--host-resolver-rules=MAP {HOST} 127.0.0.1"]
    browser = browser_type.launch(**{**browser_type_launch_args, "args": args})
    yield browser
    browser.close()


@pytest.fixture
def lan_url(server: Server) -> str:
    return f"http://{HOST}:{server.port}"


def crash(page: Page) -> None:
    """Kill the page's renderer, as a crash or the OS would: nothing runs, not even pagehide
    (chrome://crash, typed, makes the page's own renderer crash; it is never navigated to)."""
    with page.expect_event("crash"):
        try:
            page.goto("chrome://crash", timeout=5_000)
        except PlaywrightError:  # (the navigation is aborted)
            pass


def test_over_plain_http_the_app_works_online_and_one_tab_owns_the_database(lan_browser: Browser, lan_url: str) -> None:
    context = lan_browser.new_context(base_url=lan_url)
    first = context.new_page()
    open_app(first)
    assert first.evaluate("[window.isSecureContext, typeof navigator.locks, 'serviceWorker' in navigator]") == [
        False, "undefined", False,
    ]  # fmt: skip
    notice = first.get_by_role("note")
    expect(notice).to_contain_text("need HTTPS")
    expect(notice.get_by_role("link")).to_have_attribute("href", "/help/home-network")

    username = f"lan{uuid.uuid4().hex[:8]}"
    sign(first, username, "a long password", signup=True)
    new_chat(first)
    send(first, "Hello from the home network", assistant="demo")
    answer = demo_answer("Hello from the home network", 1)
    expect(first.locator(".message.assistant.completed .content")).to_have_text(answer, timeout=30_000)

    # Another device, a phone, signed in as the same user: it has everything, and what either
    # writes reaches the other live. The notice fits its width and covers nothing.
    phone = lan_browser.new_context(base_url=lan_url, viewport={"width": 390, "height": 800}).new_page()
    open_app(phone)
    phone_notice = phone.get_by_role("note")
    expect(phone_notice).to_be_visible()
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    sign(phone, username, "a long password", signup=False)
    expect(phone.locator(".message.assistant.completed .content")).to_have_text(answer, timeout=30_000)
    notice_box, root_box = phone_notice.bounding_box(), phone.locator("#root").bounding_box()
    assert notice_box and root_box and notice_box["y"] + notice_box["height"] <= root_box["y"]
    send(first, "written on the computer")
    expect(phone.locator(".message", has_text="written on the computer")).to_be_visible()
    send(phone, "written on the phone")
    expect(first.locator(".message", has_text="written on the phone")).to_be_visible()

    # A second tab of the same browser defers to the first, and can take the database over.
    second = context.new_page()
    second.goto("/")
    expect(second.locator(".elsewhere")).to_contain_text("This chat is open in another tab", timeout=BOOT_TIMEOUT)
    second.get_by_role("button", name="Use it here").click()
    second.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    for text in ("written on the computer", "written on the phone"):
        expect(second.locator(".message", has_text=text)).to_be_visible()
    expect(first.locator(".elsewhere")).to_contain_text("This chat is open in another tab")
    expect(first.locator("#status")).to_have_attribute("data-state", "elsewhere")
    send(second, "written in the second tab")
    expect(phone.locator(".message", has_text="written in the second tab")).to_be_visible()

    # The notice can be put away, for this tab.
    second.get_by_role("note").get_by_role("button", name="Dismiss").click()
    expect(second.get_by_role("note")).to_be_hidden()

    # A reload reads the chats from IndexedDB (the server's sync API is out of reach for it), and
    # the notice stays put away.
    second.route("**/sync/**", lambda route: route.abort())
    second.route_web_socket("**/sync/live**", lambda socket: socket.close())
    second.reload()
    second.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    for text in ("written on the computer", "written on the phone", "written in the second tab"):
        expect(second.locator(".message", has_text=text)).to_be_visible()
    expect(second.locator(".message.assistant .content")).to_have_text(answer)
    expect(second.locator("#insecure")).to_be_hidden()
    phone.context.close()
    context.close()


def test_a_killed_owner_tab_does_not_lock_the_next_one_out(lan_browser: Browser, lan_url: str) -> None:
    context = lan_browser.new_context(base_url=lan_url)
    first = context.new_page()
    open_app(first)
    sign(first, f"kill{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    new_chat(first)
    send(first, "written before the crash")
    expect(first.locator(".message", has_text="written before the crash")).to_be_visible()
    crash(first)
    first.close()  # (the dead tab's renderer gone for good: the next tab is not put in it while it ends)

    # No "Use it here" to click: the lease of the tab that died runs out, and this tab has it.
    second = context.new_page()
    second.goto("/")
    second.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(second.locator(".message", has_text="written before the crash")).to_be_visible()
    expect(second.locator(".elsewhere")).to_have_count(0)
    context.close()


# --- static/locks.js itself, in pages of the insecure origin -------------------------------------

LOAD = "async () => { window.locks = await import('/static/locks.js'); }"

# `n` short sections one after the other, each checking nobody else ran meanwhile: it writes its
# page's name to a probe database, waits, and reads it back. Returns how many found another's name
# (`locked`: under the lock "io", else with none).
SECTIONS = """async ([me, n, locked]) => {
  const db = await new Promise((resolve) => {
    const req = indexedDB.open("probe", 1);
    req.onupgradeneeded = () => req.result.createObjectStore("s");
    req.onsuccess = () => resolve(req.result);
  });
  const run = (mode, body) => new Promise((resolve) => {
    const req = body(db.transaction("s", mode).objectStore("s"));
    req.onsuccess = () => resolve(req.result);
  });
  let others = 0;
  const section = async () => {
    await run("readwrite", (s) => s.put(me, "holder"));
    await new Promise((resolve) => setTimeout(resolve, 5));
    if ((await run("readonly", (s) => s.get("holder"))) !== me) others += 1;
  };
  for (let i = 0; i < n; i++) await (locked ? locks.request("io", section) : section());
  return others;
}"""

# Holds the lease "owner" if it is available (or by stealing it); window.lease says what happened.
HOLD = """(steal) => {
  window.lease = "asked";
  const started = performance.now();
  locks.request("owner", steal ? { steal: true } : { ifAvailable: true }, async (lock) => {
    window.waited = performance.now() - started;
    if (!lock) return (window.lease = "unavailable");
    window.lease = "held";
    await new Promise(() => {});
  }).catch((error) => { window.lease = error.name; });
}"""


# Counts the IndexedDB transactions this page begins (IndexedDB runs transactions of one store in
# the order they were begun, whichever page begins them).
COUNT_TRANSACTIONS = """() => {
  window.transactions = 0;
  const begin = IDBDatabase.prototype.transaction;
  IDBDatabase.prototype.transaction = function (...args) {
    window.transactions += 1;
    return begin.apply(this, args);
  };
}"""


def pages(browser: Browser, url: str, count: int) -> tuple[BrowserContext, list[Page]]:
    context = browser.new_context(base_url=url)
    opened = [context.new_page() for _ in range(count)]
    for page in opened:
        page.goto("/healthz")
        page.evaluate(LOAD)
    return context, opened


def hold(page: Page, steal: bool = False) -> str:
    page.evaluate(HOLD, steal)
    page.wait_for_function("() => window.lease !== 'asked'", timeout=2 * LEASE_MS)
    return str(page.evaluate("window.lease"))


def test_sections_of_two_tabs_never_overlap(lan_browser: Browser, lan_url: str) -> None:
    context, (a, b) = pages(lan_browser, lan_url, 2)
    for locked in (False, True):  # (unlocked first: the check does see overlapping sections)
        start = f"(args) => {{ window.others = null; ({SECTIONS})(args).then((n) => {{ window.others = n; }}); }}"
        a.evaluate(start, ["a", 20, locked])
        others_b = b.evaluate(SECTIONS, ["b", 20, locked])
        a.wait_for_function("() => window.others !== null", timeout=30_000)
        others = others_b + a.evaluate("window.others")
        assert (others == 0) if locked else (others > 0)
    context.close()


def test_a_lease_is_refused_stolen_and_freed_by_a_reload_a_close_or_a_crash(lan_browser: Browser, lan_url: str) -> None:
    context, (a, b) = pages(lan_browser, lan_url, 2)
    assert hold(a) == "held"
    assert hold(b) == "unavailable"
    assert b.evaluate("window.waited") < 1000  # the holder answered at once
    assert hold(b, steal=True) == "held"
    a.wait_for_function("() => window.lease === 'AbortError'")
    assert hold(a) == "unavailable"

    b.reload()  # a reload (or a closed tab) frees it at once
    b.evaluate(LOAD)
    assert hold(b) == "held" and b.evaluate("window.waited") < 1000
    b.close()
    assert hold(a) == "held" and a.evaluate("window.waited") < 1000

    # A crashed holder: its lease runs out (and nobody answers for it).
    c = context.new_page()
    c.goto("/healthz")
    c.evaluate(LOAD)
    assert hold(c, steal=True) == "held"
    a.wait_for_function("() => window.lease === 'AbortError'")
    crash(c)
    assert hold(a) == "held"
    assert a.evaluate("window.waited") < LEASE_MS + 1500
    context.close()


def test_a_crashed_tab_in_a_section_frees_it(lan_browser: Browser, lan_url: str) -> None:
    context, (a, b) = pages(lan_browser, lan_url, 2)
    a.evaluate("() => { locks.request('io', () => new Promise(() => { window.inside = true; })); }")
    a.wait_for_function("() => window.inside === true")
    b.evaluate("() => { window.entered = false; locks.request('io', () => { window.entered = true; }); }")
    crash(a)
    b.wait_for_function("() => window.entered === true", timeout=5_000)
    context.close()


def test_a_section_after_a_steal_finds_the_lease_lost_before_it_runs(lan_browser: Browser, lan_url: str) -> None:
    """The fence: whatever the timing of messages and renewals, a section of the old holder that
    runs after the steal is told first."""
    context, (a, b) = pages(lan_browser, lan_url, 2)
    assert hold(a) == "held"
    # A is in a section; B steals meanwhile (its transaction waits for A's section), then A asks for
    # another section, which IndexedDB runs after the steal.
    a.evaluate("() => { locks.request('io', () => new Promise((resolve) => { window.leave = resolve; })); }")
    a.wait_for_function("() => window.leave !== undefined")
    b.evaluate(COUNT_TRANSACTIONS)
    b.evaluate(HOLD, True)
    b.wait_for_function("() => window.transactions >= 1")  # B's steal is queued in IndexedDB, before A's next section
    a.evaluate("() => { window.seen = null; locks.request('io', () => { window.seen = window.lease; }); }")
    a.evaluate("() => window.leave()")
    a.wait_for_function("() => window.seen !== null")
    assert a.evaluate("window.seen") == "AbortError"
    b.wait_for_function("() => window.lease === 'held'")
    context.close()
