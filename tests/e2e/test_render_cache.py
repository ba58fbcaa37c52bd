"""Paint before Python: the last screen comes from the render cache (static/paint.js) before
Pyodide is ready, Python takes that DOM over as it is, and what is typed meanwhile is kept. The
cache of one account is never painted for another.

These pages block the service worker, so that the test can hold Python's bundle (/py/app.zip)
back with page.route: that is what "before Python is ready" is here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from playwright.sync_api import Browser, Page, Route, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, sign, wait_for_next_start
from tests.processes import Server

PASSWORD = "a long password"

# Records whether a text was ever in the page, from the first node the parser adds.
WATCH = """
window.chatSeen = [];
new MutationObserver(() => {
  const text = document.documentElement.textContent;
  for (const word of %s) if (text.includes(word) && !window.chatSeen.includes(word)) window.chatSeen.push(word);
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def _page(contexts: Contexts, server: Server) -> Page:
    return contexts.new(server.url, service_workers="block").new_page()


def _send(page: Page, text: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(text)
    box.press("Enter")
    expect(page.get_by_role("list", name="Messages")).to_contain_text(text)


def _cache_holds(page: Page, text: str) -> None:
    """The render cache has been saved with this text on screen (a moment after it is drawn)."""
    page.wait_for_function(
        """(text) => {
          const account = localStorage.getItem('chat-render-current');
          const cache = account && JSON.parse(localStorage.getItem('chat-render:' + account) || 'null');
          return cache !== null && cache.html.includes(text);
        }""",
        arg=text,
    )


def _reload_holding_python(page: Page) -> Callable[[], None]:
    """Reload with Python's bundle held back; returns what lets it through."""
    held: list[Route] = []
    page.route("**/py/app.zip", lambda route: held.append(route))
    page.reload(wait_until="domcontentloaded")
    page.wait_for_function("() => performance.getEntriesByName('chat:owner').length > 0 || document.readyState === 'complete'")

    def release() -> None:
        for route in held:
            route.continue_()
        page.unroute("**/py/app.zip")
        page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)

    return release


def test_the_last_chat_is_painted_before_python_and_what_is_typed_meanwhile_is_kept(contexts: Contexts, server: Server) -> None:
    page = _page(contexts, server)
    open_app(page)
    sign(page, f"u{uuid.uuid4().hex[:10]}", PASSWORD, signup=True)
    new_chat(page)
    _send(page, "A question painted from the cache")
    new_chat(page)  # the chat open at the reload is not the one with the latest activity
    _send(page, "The chat that was open")
    page.get_by_role("navigation", name="Chats").get_by_role("button").filter(has_text="A question painted").click()
    expect(page.get_by_role("list", name="Messages")).to_contain_text("A question painted from the cache")
    _cache_holds(page, "A question painted from the cache")

    release = _reload_holding_python(page)
    assert page.evaluate("() => document.body.dataset.ready") is None  # Python has not started
    messages = page.get_by_role("list", name="Messages")
    expect(messages).to_contain_text("A question painted from the cache")
    expect(page.get_by_role("navigation", name="Chats")).to_contain_text("The chat that was open")
    box = page.get_by_role("textbox", name="Message")
    box.press_sequentially("typed before Python")
    page.evaluate("() => { document.getElementById('composer-text').chatMark = 'the painted box'; }")
    release()

    # Python took the painted page over: the same box, the same chat, the text kept.
    assert page.evaluate("() => document.getElementById('composer-text').chatMark") == "the painted box"
    expect(box).to_have_value("typed before Python")
    expect(messages).to_contain_text("A question painted from the cache")
    expect(messages).not_to_contain_text("The chat that was open")
    box.press_sequentially(", and after")
    expect(page.get_by_role("navigation", name="Chats")).to_contain_text("Draft")
    page.wait_for_function(  # (saved as the chat's draft: in the database)
        """() => pyodide.runPython("chat_client.store.draft(chat_client.selected)") === 'typed before Python, and after'"""
    )

    # ...so that after a reload it is there.
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(page.get_by_role("textbox", name="Message")).to_have_value("typed before Python, and after")

    # A message sent before Python is ready shows at once, as being saved, and the box is clear:
    # a second press sends nothing. Once Python is up, it is saved and sent, once.
    release = _reload_holding_python(page)
    box = page.get_by_role("textbox", name="Message")
    box.fill("")
    box.press_sequentially("sent before Python")
    box.press("Enter")
    sent = page.get_by_role("list", name="Messages").locator("li", has=page.get_by_text("sent before Python", exact=True))
    expect(sent).to_contain_text("Saving on this device…")
    expect(box).to_have_value("")
    box.press("Enter")
    assert page.evaluate("() => document.body.dataset.ready") is None  # (all of it before Python)
    release()
    expect(sent).to_have_count(1)
    expect(sent).not_to_contain_text("Saving on this device…")
    expect(box).to_have_value("")
    page.context.close()


def test_a_message_sent_before_python_survives_a_reload_before_python(contexts: Contexts, server: Server, load: str) -> None:
    """Sent on the painted screen, then the page reloaded before Python had it: the message is
    shown again at once after the reload, and saved (once) when Python is up."""
    page = _page(contexts, server)
    open_app(page)
    sign(page, f"u{uuid.uuid4().hex[:10]}", PASSWORD, signup=True)
    new_chat(page)
    _send(page, "The first message")
    _cache_holds(page, "The first message")

    _reload_holding_python(page)
    box = page.get_by_role("textbox", name="Message")
    box.press_sequentially("sent, then reloaded at once")
    box.press("Enter")
    messages = page.get_by_role("list", name="Messages")
    expect(messages.locator("li", has=page.get_by_text("sent, then reloaded at once", exact=True))).to_contain_text("Saving on this device…")
    release = _reload_holding_python(page)  # (0 ms after the press: localStorage has it)
    expect(messages.locator("li", has=page.get_by_text("sent, then reloaded at once", exact=True))).to_contain_text("Saving on this device…")
    release()
    sent = messages.locator("li", has=page.get_by_text("sent, then reloaded at once", exact=True))
    expect(sent).to_have_count(1)
    expect(sent).not_to_contain_text("Saving on this device…")
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(messages.locator("li", has=page.get_by_text("sent, then reloaded at once", exact=True))).to_have_count(1)
    expect(box).to_have_value("")
    page.context.close()


def test_the_render_cache_of_one_account_is_never_painted_for_another(contexts: Contexts, server: Server) -> None:
    page = _page(contexts, server)
    page.add_init_script(WATCH % '["Alpha secret", "Bravo words"]')
    open_app(page)
    alpha = f"a{uuid.uuid4().hex[:10]}"
    sign(page, alpha, PASSWORD, signup=True)
    new_chat(page)
    _send(page, "Alpha secret")
    _cache_holds(page, "Alpha secret")
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    assert page.evaluate("() => window.chatSeen") == ["Alpha secret"]  # (the watch works)

    # Alpha signs out, keeping the chats on this device: the next start paints nothing of them.
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("dialog").get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    assert page.evaluate("() => window.chatSeen") == []
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()

    # Bravo signs in on this device: Alpha's screen never shows, before or after Python.
    sign(page, f"b{uuid.uuid4().hex[:10]}", PASSWORD, signup=True)
    new_chat(page)
    _send(page, "Bravo words")
    _cache_holds(page, "Bravo words")
    release = _reload_holding_python(page)
    expect(page.get_by_role("list", name="Messages")).to_contain_text("Bravo words")
    release()
    assert page.evaluate("() => window.chatSeen") == ["Bravo words"]
    page.context.close()


def test_the_next_start_begins_from_a_python_snapshot_and_compiled_modules(browser: Browser, server: Server) -> None:
    page = browser.new_context(base_url=server.url, service_workers="block").new_page()  # (a first visit)
    open_app(page)
    assert page.evaluate("() => document.body.dataset.python") == "fresh"
    wait_for_next_start(page)
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    assert page.evaluate("() => document.body.dataset.python") == "snapshot"
    assert page.evaluate("() => document.body.dataset.bytecode") == "kept"  # (our modules compiled before)
    sign(page, f"u{uuid.uuid4().hex[:10]}", PASSWORD, signup=True)  # Python works: it signs up, syncs, sends
    new_chat(page)
    _send(page, "From a snapshot")
    expect(page.get_by_role("status").first).to_have_text("Online")
    page.context.close()
