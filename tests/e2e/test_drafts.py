"""The composer's text survives a reload, per chat, and a browser killed right after typing."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Playwright, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import BOOT_TIMEOUT, signed_up, wait_until
from tests.e2e.profiles import kill, reopened, signed_up_in_a_profile
from tests.processes import Server

# What the page's own IndexedDB holds for a chat's draft (static/pending.js).
KEPT_DRAFT = """(chat) => new Promise((resolve, reject) => {
  const opening = indexedDB.open("chat-pending");
  opening.onsuccess = () => {
    const get = opening.result.transaction("drafts").objectStore("drafts").get(chat);
    get.onsuccess = () => resolve(get.result?.text ?? null);
    get.onerror = () => reject(get.error);
  };
  opening.onerror = () => reject(opening.error);
})"""


def test_a_draft_is_back_after_a_reload(contexts: Contexts, server: Server, load: str) -> None:
    page = signed_up(contexts, server)
    box = page.get_by_role("textbox", name="Message")
    box.press_sequentially("something I have not sent yet")
    page.reload()  # 0 ms after the last key
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(box).to_have_value("something I have not sent yet")

    # The Draft mark means durable: the page's IndexedDB has every character by then.
    box.press_sequentially(", and more")
    expect(page.locator(".chat-item.selected")).to_contain_text("Draft")
    chat = box.get_attribute("data-chat")
    page.wait_for_function(  # (the mark shows once the page has handed the text to Python)
        "() => pyodide.runPython('chat_client.store.draft(chat_client.selected)') === 'something I have not sent yet, and more'"
    )
    assert page.evaluate(KEPT_DRAFT, chat) == "something I have not sent yet, and more"

    box.press("Enter")  # sending it clears the draft
    expect(page.get_by_role("list", name="Messages").get_by_text("something I have not sent yet, and more", exact=True)).to_be_visible()
    expect(box).to_have_value("")
    page.reload()  # (at once)
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(page.get_by_role("list", name="Messages").get_by_text("something I have not sent yet, and more", exact=True)).to_have_count(1)
    expect(box).to_have_value("")
    expect(page.locator(".chat-item.selected")).not_to_contain_text("Draft")

    # A message Python could not save, whatever failed, comes back into the box saying why, and
    # stays there as the draft (the page forgets a send once Python has answered it).
    page.evaluate("(code) => pyodide.runPython(code)", "def _broken(*args):\n    raise OSError('disk full')\nchat_client.store.shown_path = _broken")
    box.fill("a message that could not be saved")
    box.press("Enter")
    expect(page.get_by_text("Not sent: it could not be saved on this device. It is back in the box.")).to_be_visible()
    expect(box).to_have_value("a message that could not be saved")
    expect(page.get_by_role("list", name="Messages").get_by_text("a message that could not be saved")).to_have_count(0)
    expect(page.locator(".chat-item.selected")).to_contain_text("Draft")
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(box).to_have_value("a message that could not be saved")

    # ...and should Python fail before it gets that far, the page puts the text back itself.
    page.evaluate("(code) => pyodide.runPython(code)", "async def _failing(data):\n    raise OSError('gone')\nchat_client._on_send = _failing")
    box.press("Enter")
    wait_until(page, lambda: any("message not saved" in line for line in contexts.console), "the send did not fail")
    expect(box).to_have_value("a message that could not be saved")
    expect(page.get_by_role("list", name="Messages").get_by_text("a message that could not be saved")).to_have_count(0)
    page.context.close()


# Counts the draft saves, and how many are under way at once.
COUNT_SAVES = """
saves = {"calls": 0, "now": 0, "most": 0}
save_draft = chat_client.store.save_draft
async def counted(chat_id, text):
    saves["calls"] += 1
    saves["now"] += 1
    saves["most"] = max(saves["most"], saves["now"])
    try:
        await save_draft(chat_id, text)
    finally:
        saves["now"] -= 1
chat_client.store.save_draft = counted
"""


def test_a_draft_is_saved_as_it_is_typed_one_save_at_a_time(contexts: Contexts, server: Server) -> None:
    page = signed_up(contexts, server)
    page.evaluate("code => pyodide.runPython(code)", COUNT_SAVES)
    text = "typed fast, every key an input event of its own"
    page.get_by_role("textbox", name="Message").press_sequentially(text)
    page.wait_for_function(f"() => pyodide.runPython('chat_client.store.draft(chat_client.selected)') === {text!r}")
    saves = page.evaluate("pyodide.runPython('import json; json.dumps(saves)')")
    calls, most = (int(n) for n in re.findall(r'"(?:calls|most)": (\d+)', saves))
    assert most == 1 and 1 <= calls < len(text), saves  # one at a time, each carrying what came meanwhile
    page.context.close()


def test_what_was_typed_survives_the_browser_killed(
    playwright: Playwright, contexts: Contexts, server: Server, tmp_path: Path, load: str
) -> None:
    """Killed as soon as the page says everything typed is saved, then killed 150 ms after the
    last key whatever the page says: whatever Python is doing (starting, saving the draft before),
    the page's own strict IndexedDB write has every character by then."""
    profile = tmp_path / "profile"
    signed_up_in_a_profile(playwright, contexts, profile, server)
    context, page = reopened(playwright, profile, server)
    text = "Every key counts, up to the last one typed!"
    page.get_by_role("textbox", name="Message").click()
    page.keyboard.type(text, delay=25)
    page.wait_for_function("() => document.body.dataset.drafts === 'saved'")  # (the page says so: it must be true)
    kill(profile, context)

    context, page = reopened(playwright, profile, server)
    box = page.get_by_role("textbox", name="Message")
    expect(box).to_have_value(text, timeout=BOOT_TIMEOUT)
    box.click()
    page.keyboard.press("Control+End")  # (the end of the text, not of its first line: it wraps)
    more = " And then the machine went down right after."
    page.keyboard.type(more, delay=25)
    page.wait_for_timeout(150)
    kill(profile, context)

    context, page = reopened(playwright, profile, server)
    expect(page.get_by_role("textbox", name="Message")).to_have_value(text + more, timeout=BOOT_TIMEOUT)
    context.close()
