"""The composer's text survives a reload, per chat, and a browser killed right after typing."""

from __future__ import annotations

import os
import re
import signal
import uuid
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, Playwright, expect

from tests.e2e.conftest import playwright_config
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, sign, signed_up
from tests.processes import Server


def test_a_draft_is_back_after_a_reload(browser: Browser, server: Server) -> None:
    page = signed_up(browser, server)
    page.fill("textarea[name=text]", "something I have not sent yet")
    expect(page.locator(".chat-item.selected")).to_contain_text("Draft")  # saved
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(page.locator("textarea[name=text]")).to_have_value("something I have not sent yet")

    page.click("textarea[name=text]")
    page.keyboard.press("Enter")  # sending it clears the draft
    expect(page.locator(".message", has_text="something I have not sent yet")).to_be_visible()
    expect(page.locator(".chat-item.selected")).not_to_contain_text("Draft")
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(page.locator("textarea[name=text]")).to_have_value("")
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


def test_a_draft_is_saved_as_it_is_typed_one_save_at_a_time(browser: Browser, server: Server) -> None:
    page = signed_up(browser, server)
    page.evaluate("code => pyodide.runPython(code)", COUNT_SAVES)
    text = "typed fast, every key an input event of its own"
    page.get_by_role("textbox", name="Message").press_sequentially(text)
    page.wait_for_function(f"() => pyodide.runPython('chat_client.store.draft(chat_client.selected)') === {text!r}")
    saves = page.evaluate("pyodide.runPython('import json; json.dumps(saves)')")
    calls, most = (int(n) for n in re.findall(r'"(?:calls|most)": (\d+)', saves))
    assert most == 1 and 1 <= calls < len(text), saves  # one at a time, each carrying what came meanwhile
    page.context.close()


def _browser_processes(profile: Path) -> list[int]:
    """The pids of the Chromium browser process (not its renderers) running on this profile."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--user-data-dir={profile}".encode() in args and not any(a.startswith(b"--type=") for a in args):
            found.append(int(entry.name))
    return found


def _launch(playwright: Playwright, profile: Path, server: Server) -> BrowserContext:
    return playwright.chromium.launch_persistent_context(str(profile), base_url=server.url, **playwright_config.LAUNCH_ARGS)  # type: ignore[arg-type]


def test_what_was_typed_survives_the_browser_killed_as_soon_as_the_page_says_it_is_saved(
    playwright: Playwright, server: Server, tmp_path: Path
) -> None:
    profile = tmp_path / "profile"
    context = _launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    sign(page, f"kill{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    new_chat(page)
    context.close()  # (the session cookie is on disk now: the kill below is what is tested)

    context = _launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    text = "Every key counts, up to the last one typed!"
    page.get_by_role("textbox", name="Message").click()
    page.keyboard.type(text, delay=25)
    page.wait_for_function("() => document.body.dataset.drafts === 'saved'")  # (the page says so: it must be true)
    [pid] = _browser_processes(profile)
    os.kill(pid, signal.SIGKILL)
    try:
        context.close()
    except Exception:  # the browser is gone: nothing left to close
        pass

    context = _launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    expect(page.get_by_role("textbox", name="Message")).to_have_value(text, timeout=BOOT_TIMEOUT)
    context.close()
