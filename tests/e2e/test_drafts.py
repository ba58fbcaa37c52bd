"""The composer's text survives a reload, per chat, and a browser killed right after typing."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, Playwright, expect

from tests.e2e.conftest import playwright_config
from tests.e2e.contexts import Contexts
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, sign, signed_up
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


def _alive(pid: int) -> bool:
    """Not ended (a zombie, ended and not yet reaped by its parent, holds nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else None
        except (OSError, IndexError, ValueError):
            continue
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _kill(profile: Path, context: BrowserContext) -> None:
    """SIGKILL the whole browser (not just a tab), every process of it at once, as a machine
    going down does: nothing of it gets to save anything more. Returns once all are gone (a
    storage process outliving its browser by a moment, on a busy machine, held the profile's
    files while the next browser opened them: its page crashed)."""
    [pid] = _browser_processes(profile)
    pids = _descendants(pid)
    for each in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{each}").exists() and _alive(each) for each in pids):
        assert time.monotonic() < deadline, "the browser's processes outlived SIGKILL"
        time.sleep(0.05)
    try:
        context.close()
    except Exception:  # the browser is gone: nothing left to close
        pass


def _signed_up_in_a_profile(playwright: Playwright, contexts: Contexts, profile: Path, server: Server) -> None:
    context = _launch(playwright, profile, server)
    contexts.seed(context, server.url)  # (kept on disk in the profile, as in a returning visitor's)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    sign(page, f"kill{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    new_chat(page)
    context.close()  # (the session cookie is on disk now: the kill below is what is tested)


def _reopened(playwright: Playwright, profile: Path, server: Server) -> tuple[BrowserContext, Page]:
    context = _launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    return context, page


def test_what_was_typed_survives_the_browser_killed(playwright: Playwright, contexts: Contexts, server: Server, tmp_path: Path, load: str) -> None:
    """Killed as soon as the page says everything typed is saved, then killed 150 ms after the
    last key whatever the page says: whatever Python is doing (starting, saving the draft before),
    the page's own strict IndexedDB write has every character by then."""
    profile = tmp_path / "profile"
    _signed_up_in_a_profile(playwright, contexts, profile, server)
    context, page = _reopened(playwright, profile, server)
    text = "Every key counts, up to the last one typed!"
    page.get_by_role("textbox", name="Message").click()
    page.keyboard.type(text, delay=25)
    page.wait_for_function("() => document.body.dataset.drafts === 'saved'")  # (the page says so: it must be true)
    _kill(profile, context)

    context, page = _reopened(playwright, profile, server)
    box = page.get_by_role("textbox", name="Message")
    expect(box).to_have_value(text, timeout=BOOT_TIMEOUT)
    box.click()
    page.keyboard.press("Control+End")  # (the end of the text, not of its first line: it wraps)
    more = " And then the machine went down right after."
    page.keyboard.type(more, delay=25)
    page.wait_for_timeout(150)
    _kill(profile, context)

    context, page = _reopened(playwright, profile, server)
    expect(page.get_by_role("textbox", name="Message")).to_have_value(text + more, timeout=BOOT_TIMEOUT)
    context.close()
