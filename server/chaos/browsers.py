"""Browsers: Chromium (Debian's, ``/usr/bin/chromium``) running the real app through Playwright,
each on a profile of its own kept on disk, used as a person uses it: type into the composer
(kept at every keystroke, static/pending.js), send with or without an answer, leave a draft,
start a chat, stop an answer. The nemesis SIGKILLs a whole browser (procs.py) and opens it again
on its profile; what the composer holds then is recorded against what was typed before.

The controls are found by their roles and accessible names, as the app's tests find them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import BrowserContext, ConsoleMessage, Page, Playwright

from server.chaos.checker import tag_of
from server.chaos.devices import PASSWORD
from server.chaos.history import History
from server.chaos.procs import kill_browser
from server.config import ROOT

BOOT_TIMEOUT = 120_000  # ms (Pyodide's first start on a loaded machine)
# A page that does not answer a question (its main thread busy) for this long is frozen: recorded
# ("unresponsive"; after the heal it is stuck), and the run goes on without its answer.
ANSWER_SECONDS = 60.0
# What Chromium itself logs as an error when the network fails under the nemesis (a server killed
# or paused): a request that failed, a live socket that could not connect. Anything else a page
# logs as an error is the app's own.
NETWORK_ERRORS = ("Failed to load resource:", "WebSocket connection to ")


def apps_own(logged: list[str]) -> list[str]:
    """The errors of ``logged`` (the pages' console) that are the app's, not the network's."""
    return [text for text in logged if not text.startswith(NETWORK_ERRORS)]


# The page's Python: the local database as the history's final reads hold it (devices.row_of).
FINAL = """
import json
def _row(m):
    return {"id": m.id, "chat": m.chat_id, "role": m.role, "content": m.content, "status": m.status,
            "parent": m.parent_id, "run": m.run_id, "assistant": m.assistant_id, "created": m.created_at,
            "files": sorted(a.sha256 for a in m.attachments), "seq": m.last_seq}
_s = chat_client.store
json.dumps({"chats": {c.id: {"title": c.title} for c in _s.chats()}, "messages": {m.id: _row(m) for m in _s.all_messages()},
            "outbox": _s.pending_count(), "uploads": len(_s.queued_uploads()), "lastSeq": _s.last_seq()})
"""
# What the app made of a message sent from the composer, found by its tag: taken (Python drew it:
# the page's own drawing at Send, static/view.js: showSending, is marked data-sending until then)
# or refused (that drawing gone, the text back in the composer and the reason under it; a Send
# that did nothing is neither); else null.
SENT = """(tag) => {
  const item = [...document.querySelectorAll("#messages > li")].find((li) => li.querySelector(".content")?.textContent.includes(tag));
  if (item && !item.hasAttribute("data-sending")) return { id: item.id.replace(/^m-/, ""), text: item.querySelector(".content").innerText };
  const box = document.getElementById("composer-text");
  const note = document.getElementById("composer-files").innerText;  // (the app's words for it: "Not sent: ...")
  if (!item && box.value.includes(tag) && note.includes("Not sent")) return { refused: note, composer: box.value };
  return null;
}"""
SHOWN = "() => [...document.querySelectorAll('#messages > li.user')].map((li) => [li.id, li.textContent])"
SETTLED = "chat_client.store.pending_count() == 0 and not chat_client.store.queued_uploads()"
WORDS = "a page typed this while the servers were dying and the sockets were cut".split()


T = TypeVar("T")


class Unresponsive(Exception):
    """The page did not answer within ANSWER_SECONDS."""


def launch_args() -> dict[str, Any]:
    """playwright.config.py's settings (Debian's Chromium, quiet on a closed network)."""
    spec = importlib.util.spec_from_file_location("playwright_config", ROOT / "playwright.config.py")
    assert spec is not None and spec.loader is not None
    config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config)
    args: dict[str, Any] = dict(config.LAUNCH_ARGS)
    return args


class BrowserDevice:
    def __init__(self, name: str, directory: Path, url: str, history: History, rng: random.Random, playwright: Playwright) -> None:
        self.name = name
        self.profile = directory / f"{name}-profile"
        self.url = url
        self.history = history
        self.rng = rng
        self.playwright = playwright
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.lock = asyncio.Lock()  # (an operation and a kill never at once)
        self.written = 0

    async def open(self, tries: int = 3) -> Page:
        """Open the browser on its profile and the app in it. A page that crashes while it starts
        (seen after a SIGKILL on a loaded machine) is recorded and opened again."""
        for attempt in range(tries):
            self.context = await self.playwright.chromium.launch_persistent_context(str(self.profile), base_url=self.url, **launch_args())
            self.context.on("console", self._console)
            self.context.on("weberror", lambda error: self._logged(str(error.error)))
            page = self.context.pages[0] if self.context.pages else await self.context.new_page()
            try:
                await page.goto("/")
                await page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
            except Exception as e:
                if attempt == tries - 1:
                    raise
                self.history.record({"op": "crashed", "browser": self.name, "error": repr(e)[:300]})
                await asyncio.to_thread(kill_browser, self.profile)
                await self.close()
                continue
            self.page = page
            return page
        raise AssertionError("unreachable")

    def _console(self, message: ConsoleMessage) -> None:
        """What the page logs as an error (an action that failed, a message not saved), in the
        history beside what was done: what an anomaly's diagnosis starts from."""
        if message.type == "error":
            self._logged(message.text)

    def _logged(self, text: str) -> None:
        self.history.record({"op": "console", "browser": self.name, "text": text[:2000]})

    async def sign_in(self, username: str) -> None:
        page = await self.open()
        await page.get_by_role("textbox", name="Username").fill(username)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await page.get_by_role("textbox", name="Message").wait_for(timeout=BOOT_TIMEOUT)
        await self._new_chat()

    async def close(self) -> None:
        if self.context is not None:
            try:
                async with asyncio.timeout(ANSWER_SECONDS):
                    await self.context.close()
            except TimeoutError:  # (a browser that does not answer: killed)
                await asyncio.to_thread(kill_browser, self.profile)
            except Exception:  # (gone already)
                pass
            self.context = self.page = None

    # --- what a person does ---------------------------------------------------------------------

    async def step(self) -> str | None:
        async with self.lock:
            if self.page is None:  # (its reopen failed: again)
                await self.open()
                await self.signed_in()
                return None
            roll = self.rng.random()
            if roll < 0.55:
                await self._send(self.rng.choice(["paced", "paced", ""]))
                return "browser-send"
            if roll < 0.8:
                await self._type()
                return "browser-draft"
            if roll < 0.9:
                await self._new_chat()
                return "browser-chat"
            stop = self.page.get_by_role("button", name="Stop")
            if await stop.count():
                await stop.first.click()
                return "browser-stop"
            return None

    async def _chat(self) -> str:
        assert self.page is not None
        return str(await self.page.get_by_role("textbox", name="Message").get_attribute("data-chat") or "")

    async def _type(self) -> str:
        """Type a tagged sentence (after what the composer holds); recorded with what it holds then."""
        assert self.page is not None
        self.written += 1
        tag = f"q{self.name}-{self.written}"
        box = self.page.get_by_role("textbox", name="Message")
        await box.press_sequentially(f" [{tag}] " + " ".join(self.rng.choices(WORDS, k=3)), delay=5)
        self.history.record({"op": "typed", "browser": self.name, "chat": await self._chat(), "text": await box.input_value()})
        return tag

    async def _send(self, assistant: str) -> None:
        """Type a tagged sentence and press Enter, then wait for what the app made of it: the
        message taken (drawn by Python, no longer the page's own "Saving on this device…"
        drawing) or refused (the chat's queue full: the page's drawing gone and the text back in
        the composer), each recorded as such."""
        assert self.page is not None
        page = self.page
        tag = await self._type()
        await page.get_by_role("combobox", name="Answered by").select_option(assistant)
        chat = await self._chat()
        await page.get_by_role("textbox", name="Message").press("Enter")
        self.history.record({"op": "typed", "browser": self.name, "chat": chat, "text": ""})
        event = f"{self.name}-{self.written}"
        save = {"op": "save", "device": self.name, "event": event, "type": "MessageAppended", "entity": "", "chat": chat,
                "text": f"[{tag}]", "unobserved": True, "asked": assistant or None}  # fmt: skip
        try:
            outcome = await (await page.wait_for_function(SENT, arg=f"[{tag}]", timeout=60_000)).json_value()
        except Exception:  # neither: counted as sent, looked for by its tag at the end
            self.history.record({**save, "unseen": True})
            raise
        if "refused" in outcome:
            self.history.record(save)
            self.history.record({"op": "result", "device": self.name, "event": event, "type": "MessageAppended", "status": "rejected",
                                 "seq": None, "error": outcome["refused"], "by": "page", "composer": outcome["composer"]})  # fmt: skip
            self.history.record({"op": "typed", "browser": self.name, "chat": chat, "text": outcome["composer"]})
            return
        self.history.record({**save, "entity": outcome["id"], "text": outcome["text"]})

    async def _new_chat(self) -> None:
        assert self.page is not None
        # (the first: a chat titled "New chat" in the list has that name too)
        await self.page.get_by_role("button", name="New chat", exact=True).first.click()

    # --- the nemesis's fault --------------------------------------------------------------------

    async def kill_and_reopen(self, reload: bool = False) -> None:
        """SIGKILL the whole browser and open it again on its profile (or, ``reload``, reload the
        page at once), and record what its composer holds for the chat typed into last."""
        async with self.lock:
            typed_chat = await self._chat() if self.page is not None else ""
            killed = self.history.now()
            if reload and self.page is not None:
                page = self.page
                await page.reload()
                await page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
            else:
                await asyncio.to_thread(kill_browser, self.profile)
                await self.close()
                page = await self.open()
            await page.get_by_role("textbox", name="Message").wait_for(timeout=BOOT_TIMEOUT)
            await self.signed_in()
            composer: str | None = None
            if typed_chat and await self._chat() != typed_chat:
                item = page.locator(f"[data-action=select-chat][data-id='{typed_chat}']")
                if await item.count():
                    await item.first.click()
                    await page.wait_for_function(
                        "(chat) => document.getElementById('composer-text').dataset.chat === chat", arg=typed_chat
                    )
            if not typed_chat or await self._chat() == typed_chat:
                composer = await page.get_by_role("textbox", name="Message").input_value()
            self.history.record(
                {"op": "reopened", "browser": self.name, "killed": killed, "chat": typed_chat, "composer": composer, "reload": reload}
            )

    async def signed_in(self) -> None:
        """Once the page knows whether its session stands: sign in again if it ended, as a person
        does when the page says so. (Chromium writes cookies to disk lazily: a browser SIGKILLed
        within about 30 s of signing in comes back without its session cookie. Its chats and its
        outbox stay, and are sent once signed in again.)"""
        assert self.page is not None
        page = self.page
        state = "() => ['online', 'signed-out'].includes(document.getElementById('status')?.dataset.state)"
        try:
            await page.wait_for_function(state, timeout=30_000)
        except Exception:  # (still connecting: its server is down, say; the next reopen, or the heal, looks again)
            return
        if await page.evaluate("() => document.getElementById('status').dataset.state") != "signed-out":
            return
        self.history.record({"op": "signin-again", "browser": self.name})
        form = page.locator("form.session-form")
        await form.get_by_label("Password").fill(PASSWORD)
        await form.get_by_role("button", name="Sign in").click()
        await page.wait_for_function("() => document.getElementById('status')?.dataset.state !== 'signed-out'", timeout=30_000)

    # --- the end --------------------------------------------------------------------------------

    async def _answer(self, what: str, question: Awaitable[T]) -> T:
        """The page's answer to ``question`` (an evaluate: Playwright waits for it for good), or
        Unresponsive, recorded, when none came within ANSWER_SECONDS."""
        try:
            async with asyncio.timeout(ANSWER_SECONDS):
                return await question
        except TimeoutError:
            self.history.record({"op": "unresponsive", "browser": self.name, "what": what, "seconds": ANSWER_SECONDS})
            raise Unresponsive(what) from None

    async def signed_out(self) -> bool:
        if self.page is None:
            return False
        try:
            state = self.page.evaluate("() => document.getElementById('status')?.dataset.state === 'signed-out'")
            return bool(await self._answer("signed out?", state))
        except Exception:
            return False

    async def settled(self) -> bool:
        if self.page is None:
            return False
        try:
            return bool(await self._answer("settled?", self.page.evaluate("(code) => pyodide.runPython(code)", SETTLED)))
        except Exception:
            return False

    async def last_seq(self) -> int:
        """The page's last seq (-1 when it does not say)."""
        if self.page is None:
            return -1
        try:
            return int(await self._answer("last seq?", self.page.evaluate("() => pyodide.runPython('chat_client.store.last_seq()')")))
        except Exception:
            return -1

    async def final(self) -> dict[str, Any] | None:
        """What the page holds (None when it does not answer: recorded as unresponsive)."""
        if self.page is None:  # (a reopen that failed: open it once more to read it)
            await self.open()
            await self.signed_in()
        assert self.page is not None
        try:
            data = json.loads(await self._answer("final read", self.page.evaluate("(code) => pyodide.runPython(code)", FINAL)))
            # What the open chat shows: a message drawn twice (one id twice, or one text under two ids).
            shown = await self._answer("messages shown", self.page.evaluate(SHOWN))
        except Unresponsive:
            return None
        ids = [i for i, _ in shown]
        tags = [tag_of(text) for _, text in shown]
        twice = sorted({i.removeprefix("m-") for i, tag in zip(ids, tags) if ids.count(i) > 1 or (tag and tags.count(tag) > 1)})
        return {"op": "final", "who": self.name, **data, "shownTwice": twice}


async def drive_browser(browser: BrowserDevice, until: float, interval: float) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        await asyncio.sleep(browser.rng.uniform(interval / 2, interval * 1.5))
        if loop.time() >= until:
            return
        try:
            done = await browser.step()
        except Exception as e:  # (a page that did not answer in time: recorded, and it goes on)
            browser.history.record({"op": "error", "device": browser.name, "error": repr(e)[:500]})
            continue
        if done is not None:
            browser.history.record({"op": "did", "device": browser.name, "what": done})
