"""Attaching on the screen painted from the render cache, before Python is up (static/early-files.js):
the chip shows at once, the file is kept by the page (its bytes in IndexedDB before anything names
them), a reload or a killed browser brings the chip back, Python takes over exactly what the page
did, and a Send there carries the file into exactly one message, its bytes uploaded once.

As in test_render_cache.py, these pages block the service worker so that the test can hold
Python's bundle (/py/app.zip) back with a route: that is what "before Python is up" is here."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, Route, expect

from tests.e2e.conftest import playwright_config
from tests.e2e.contexts import Contexts
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, sign, wait_until
from tests.e2e.profiles import kill, reopened, signed_up_in_a_profile
from tests.e2e.test_attachments import attach, png
from tests.processes import Server

PASSWORD = "a long password"
TUS = {"Tus-Resumable": "1.0.0"}
DEMO_NOTE = "Demo model (on the server) does not read images: they are left out of what it is sent."


class Uploads:
    """What the page sends to /blobs/{sha256}: each PATCH's offset and length, per file."""

    def __init__(self, context: BrowserContext) -> None:
        self.patches: dict[str, list[tuple[int, int]]] = {}
        context.route("**/blobs/*", self._seen)

    def _seen(self, route: Route) -> None:
        if route.request.method == "PATCH":
            digest = route.request.url.rsplit("/", 1)[-1]
            body = route.request.post_data_buffer or b""
            self.patches.setdefault(digest, []).append((int(route.request.headers["upload-offset"]), len(body)))
        route.continue_()

    def sent(self, digest: str) -> int:
        return sum(length for _, length in self.patches.get(digest, []))

    def once(self, digest: str, size: int) -> bool:
        """Every byte of the file sent, none twice: chunks end to end from 0."""
        at = 0
        for offset, length in self.patches.get(digest, []):
            if offset != at:
                return False
            at += length
        return at == size


def _cached_screen(page: Page) -> None:
    """The render cache holds the chats' screen (saved a moment after Python drew it)."""
    page.wait_for_function(
        """() => {
          const account = localStorage.getItem('chat-render-current');
          const cache = account && JSON.parse(localStorage.getItem('chat-render:' + account) || 'null');
          return cache !== null && cache.html.includes('composer-text');
        }"""
    )


def _hold_python(context: BrowserContext) -> Callable[[Page], None]:
    """Python's bundle held back from now on; returns what lets it through and waits for Python."""
    held: list[Route] = []
    context.route("**/py/app.zip", lambda route: held.append(route))

    def release(page: Page) -> None:
        for route in held:
            route.continue_()
        context.unroute("**/py/app.zip")
        page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)

    return release


def _before_python(page: Page) -> None:
    assert page.evaluate("() => document.body.dataset.ready") is None, "Python is up already"


def _painted(page: Page) -> None:
    page.wait_for_function("() => performance.getEntriesByName('chat:painted').length > 0")


def _signed_up(contexts: Contexts, server: Server) -> Page:
    page = contexts.new(server.url, service_workers="block").new_page()
    open_app(page)
    sign(page, f"u{uuid.uuid4().hex[:10]}", PASSWORD, signup=True)
    new_chat(page)
    _cached_screen(page)
    return page


def _draft_files(page: Page) -> list[str]:
    names = page.evaluate("() => pyodide.runPython('\"\\\\n\".join(a.name for a in chat_client.store.draft_files(chat_client.selected))')")
    return [name for name in str(names).split("\n") if name]


def _image_shown(page: Page, where: str, name: str) -> bool:
    return bool(
        page.evaluate(
            "([where, name]) => [...document.querySelectorAll(where + ' img')].some(i => i.alt === name && i.complete && i.naturalWidth > 0)",
            [where, name],
        )
    )


def test_a_file_attached_before_python_shows_at_once_and_python_sends_it_once(contexts: Contexts, server: Server, load: str) -> None:
    picture = png(900, 600, seed=int(uuid.uuid4().int % 250))
    notes = b"notes attached before Python " + uuid.uuid4().hex.encode()
    page = _signed_up(contexts, server)
    uploads = Uploads(page.context)
    release = _hold_python(page.context)
    page.reload(wait_until="domcontentloaded")
    _painted(page)

    attach(page, {"name": "cat.png", "mimeType": "image/png", "buffer": picture}, {"name": "notes.txt", "mimeType": "text/plain", "buffer": notes})
    files = page.get_by_role("list", name="Attached files")
    expect(files).to_contain_text("cat.png")  # at once, from the picked file
    expect(files).to_contain_text("notes.txt")
    wait_until(page, lambda: _image_shown(page, "#composer-files", "cat.png"), "the chip shows the image")
    for name in ("cat.png", "notes.txt"):
        expect(page.get_by_role("button", name=f"Remove {name}")).to_be_visible()  # (kept: in the draft the page holds)
    attach(page, {"name": "cat.png", "mimeType": "image/png", "buffer": picture})  # the same file again: kept once
    expect(files).not_to_contain_text("Attaching…")  # (its chip was there as set_files returned)
    expect(files.get_by_role("listitem")).to_have_count(2)
    _before_python(page)

    release(page)
    for name in ("cat.png", "notes.txt"):  # taken over by Python: each once, in its draft
        expect(page.get_by_role("button", name=f"Remove {name}")).to_have_count(1)
    wait_until(page, lambda: _draft_files(page) == ["cat.png", "notes.txt"], lambda: f"Python's draft has {_draft_files(page)}")
    expect(files.get_by_role("listitem")).to_have_count(2)
    assert _image_shown(page, "#composer-files", "cat.png")

    box = page.get_by_role("textbox", name="Message")
    box.fill("with what I attached early")
    box.press("Enter")
    message = page.get_by_role("list", name="Messages").locator("li", has=page.get_by_text("with what I attached early", exact=True))
    expect(message.get_by_role("button", name="Open cat.png")).to_be_visible()
    expect(message).to_contain_text("notes.txt")
    expect(files.get_by_role("listitem")).to_have_count(0)
    expect(message.locator("[data-upload]")).to_have_count(0, timeout=60_000)  # uploaded
    for data in (picture, notes):
        digest = hashlib.sha256(data).hexdigest()
        wait_until(page, lambda: uploads.once(digest, len(data)), lambda: f"sent: {uploads.patches.get(digest)}")  # noqa: B023
        head = page.request.head(f"/blobs/{digest}", headers=TUS)
        assert head.status == 200 and head.headers["upload-offset"] == str(len(data))
    expect(message).to_have_count(1)
    assert _draft_files(page) == []
    page.context.close()


def test_a_send_with_a_file_before_python_makes_exactly_one_message(contexts: Contexts, server: Server, load: str) -> None:
    """Sent on the painted screen with a file, pressed again, and the page reloaded 0 ms after:
    the message shows with its file at once, and again after the reload; then another sent there
    at once after its file was picked (still being hashed). Once Python is up each is saved once,
    with its file, each file uploaded once."""
    picture = png(700, 500, seed=int(uuid.uuid4().int % 250))
    notes = b"a second file " + uuid.uuid4().hex.encode()
    page = _signed_up(contexts, server)
    uploads = Uploads(page.context)
    release = _hold_python(page.context)
    page.reload(wait_until="domcontentloaded")
    _painted(page)

    box = page.get_by_role("textbox", name="Message")
    files = page.get_by_role("list", name="Attached files")
    attach(page, {"name": "early.png", "mimeType": "image/png", "buffer": picture})
    expect(page.get_by_role("button", name="Remove early.png")).to_be_visible()
    box.fill("a picture sent before Python")
    box.press("Enter")
    messages = page.get_by_role("list", name="Messages")
    first = messages.locator("li", has=page.get_by_text("a picture sent before Python", exact=True))
    expect(first).to_contain_text("Saving on this device…")
    expect(first.get_by_role("button", name="Open early.png")).to_be_attached()
    expect(box).to_have_value("")
    expect(files.get_by_role("listitem")).to_have_count(0)
    box.press("Enter")  # (nothing left to send)
    _before_python(page)

    page.reload(wait_until="domcontentloaded")  # 0 ms after the press, still before Python
    _painted(page)
    expect(first).to_contain_text("Saving on this device…")
    expect(first.get_by_role("button", name="Open early.png")).to_be_attached()
    wait_until(page, lambda: _image_shown(page, "#messages", "early.png"), "the message shows the image after the reload")
    expect(files.get_by_role("listitem")).to_have_count(0)

    attach(page, {"name": "second.txt", "mimeType": "text/plain", "buffer": notes})
    box.fill("and a second one")
    box.press("Enter")  # (at once: its file may still be being hashed)
    second = messages.locator("li", has=page.get_by_text("and a second one", exact=True))
    expect(second).to_contain_text("Saving on this device…")
    expect(second).to_contain_text("second.txt")
    expect(files.get_by_role("listitem")).to_have_count(0)
    _before_python(page)

    release(page)
    for sent in (first, second):
        expect(sent).to_have_count(1)
        expect(sent).not_to_contain_text("Saving on this device…")
        expect(sent.locator("[data-upload]")).to_have_count(0, timeout=60_000)
    expect(first.get_by_role("button", name="Open early.png")).to_be_enabled()
    expect(second.get_by_role("link", name="Download second.txt")).to_be_visible()
    for data in (picture, notes):
        digest = hashlib.sha256(data).hexdigest()
        wait_until(page, lambda: uploads.once(digest, len(data)), lambda: f"sent: {uploads.patches.get(digest)}")  # noqa: B023
    expect(files.get_by_role("listitem")).to_have_count(0)
    assert _draft_files(page) == []

    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    for sent in (first, second):
        expect(sent).to_have_count(1)
    wait_until(page, lambda: _image_shown(page, "#messages", "early.png"), "the image is shown from this device")
    expect(files.get_by_role("listitem")).to_have_count(0)
    for data in (picture, notes):
        assert uploads.sent(hashlib.sha256(data).hexdigest()) == len(data)  # (nothing sent again)
    page.context.close()


def test_the_drafts_files_painted_from_the_cache_show_and_go_with_a_send_before_python(
    contexts: Contexts, server: Server, load: str
) -> None:
    """Files attached while Python was up are on the painted screen after a reload, their images
    shown from this device (the last page's object URLs died with it); one taken off there and
    the message sent there before Python carries exactly the other, once."""
    picture = png(800, 600, seed=int(uuid.uuid4().int % 250))
    page = _signed_up(contexts, server)
    uploads = Uploads(page.context)
    attach(page, {"name": "shown.png", "mimeType": "image/png", "buffer": picture}, {"name": "dropped.txt", "mimeType": "text/plain", "buffer": b"not sent"})
    expect(page.get_by_role("button", name="Remove dropped.txt")).to_be_visible()
    page.wait_for_function(  # (the render cache has both chips)
        """() => {
          const cache = JSON.parse(localStorage.getItem('chat-render:' + localStorage.getItem('chat-render-current')) || 'null');
          return cache !== null && cache.html.includes('Remove shown.png') && cache.html.includes('Remove dropped.txt');
        }"""
    )
    release = _hold_python(page.context)
    page.reload(wait_until="domcontentloaded")
    _painted(page)
    wait_until(page, lambda: _image_shown(page, "#composer-files", "shown.png"), "the painted chip shows the image")
    page.get_by_role("button", name="Remove dropped.txt").click()
    expect(page.get_by_role("button", name="Remove dropped.txt")).to_have_count(0)
    box = page.get_by_role("textbox", name="Message")
    box.fill("the painted file")
    box.press("Enter")
    sent = page.get_by_role("list", name="Messages").locator("li", has=page.get_by_text("the painted file", exact=True))
    expect(sent).to_contain_text("Saving on this device…")
    expect(sent.get_by_role("button", name="Open shown.png")).to_be_attached()
    expect(sent).not_to_contain_text("dropped.txt")
    expect(page.get_by_role("list", name="Attached files").get_by_role("listitem")).to_have_count(0)
    _before_python(page)

    release(page)
    expect(sent).to_have_count(1)
    expect(sent).not_to_contain_text("Saving on this device…")
    expect(sent.get_by_role("button", name="Open shown.png")).to_be_enabled()
    expect(sent).not_to_contain_text("dropped.txt")
    expect(page.get_by_role("list", name="Attached files").get_by_role("listitem")).to_have_count(0)
    wait_until(page, lambda: _draft_files(page) == [], lambda: f"Python's draft has {_draft_files(page)}")
    expect(sent.locator("[data-upload]")).to_have_count(0, timeout=60_000)
    digest = hashlib.sha256(picture).hexdigest()
    wait_until(page, lambda: uploads.once(digest, len(picture)), lambda: f"sent: {uploads.patches.get(digest)}")
    assert hashlib.sha256(b"not sent").hexdigest() not in uploads.patches
    page.context.close()


def _launch(playwright: Playwright, profile: Path, server: Server) -> BrowserContext:
    """The browser on its profile, its service worker blocked (the test holds Python back)."""
    return playwright.chromium.launch_persistent_context(
        str(profile), base_url=server.url, service_workers="block", **playwright_config.SUITE_LAUNCH_ARGS
    )


def test_a_file_attached_before_python_is_back_after_a_reload_and_a_killed_browser(
    playwright: Playwright, contexts: Contexts, server: Server, tmp_path: Path, load: str
) -> None:
    """Attached before Python, the page reloaded before Python: the chip is back at once, before
    Python. Another attached, and the whole browser SIGKILLed as soon as its chip offers Remove
    (the page says it is kept then): opened again, both are in the draft, each once. A file over
    the largest the server takes is refused on the chip, in words, before Python too, with the
    text kept."""
    profile = tmp_path / "profile"
    signed_up_in_a_profile(playwright, contexts, profile, server)
    context = _launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    _cached_screen(page)
    # (The service worker the sign-up registered would serve Python's bundle from its cache.)
    page.evaluate("async () => { for (const r of await navigator.serviceWorker.getRegistrations()) await r.unregister(); }")
    _hold_python(context)
    page.reload(wait_until="domcontentloaded")
    _painted(page)
    picture = png(640, 480, seed=int(uuid.uuid4().int % 250))
    attach(page, {"name": "kept.png", "mimeType": "image/png", "buffer": picture})
    remove = page.get_by_role("button", name="Remove kept.png")
    expect(remove).to_be_visible()

    page.reload(wait_until="domcontentloaded")
    _painted(page)
    expect(remove).to_be_visible()  # back, before Python
    wait_until(page, lambda: _image_shown(page, "#composer-files", "kept.png"), "the chip shows the image after the reload")
    expect(page.get_by_role("list", name="Attached files").get_by_role("listitem")).to_have_count(1)
    _before_python(page)

    # Over the limit: refused in words on the chip, before Python, and the text stays.
    box = page.get_by_role("textbox", name="Message")
    box.fill("the text stays")
    attach(page, {"name": "huge.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * (25 * 1024 * 1024)})
    expect(page.get_by_role("alert")).to_contain_text("huge.bin is 25 MB: the largest file the server takes is 20 MB.")
    expect(page.get_by_role("button", name="Remove huge.bin")).to_have_count(0)
    expect(box).to_have_value("the text stays")

    attach(page, {"name": "also.txt", "mimeType": "text/plain", "buffer": b"also kept " + uuid.uuid4().bytes})
    expect(page.get_by_role("button", name="Remove also.txt")).to_be_visible()
    _before_python(page)
    kill(profile, context)

    context, page = reopened(playwright, profile, server)
    for name in ("kept.png", "also.txt"):
        expect(page.get_by_role("button", name=f"Remove {name}")).to_have_count(1)
    wait_until(page, lambda: _draft_files(page) == ["kept.png", "also.txt"], lambda: f"Python's draft has {_draft_files(page)}")
    wait_until(page, lambda: _image_shown(page, "#composer-files", "kept.png"), "the chip shows the image")
    expect(page.get_by_role("list", name="Attached files").get_by_role("listitem")).to_have_count(2)
    context.close()


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose accounts may keep 300,000 bytes of files (--max-account-bytes)."""
    data = tmp_path_factory.mktemp("tight")
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log", max_account_bytes="300000")
    server.start()
    yield server
    server.stop()


def test_an_account_near_its_total_refuses_a_file_in_words_before_python_too_and_the_image_note_shows_there(
    contexts: Contexts, tight: Server, load: str
) -> None:
    """200,000 of the account's 300,000 bytes uploaded: the server says 100,000 are left
    (Upload-Account-Free), asked again once the upload is done; a file over that is refused on
    its chip, in words, before anything is sent, with the text kept; and so on the screen
    painted before Python, where the page also counts the files it attached itself. An image
    attached there while the chosen assistant does not read images gets Python's note, in
    Python's words, gone with the image or with No answer chosen."""
    page = _signed_up(contexts, tight)
    uploads = Uploads(page.context)
    box = page.get_by_role("textbox", name="Message")
    files = page.get_by_role("list", name="Attached files")
    messages = page.get_by_role("list", name="Messages")
    first = uuid.uuid4().bytes * 12_500  # 200,000 bytes
    attach(page, {"name": "first.bin", "mimeType": "application/octet-stream", "buffer": first})
    expect(page.get_by_role("button", name="Remove first.bin")).to_be_visible()
    box.fill("the first file")
    box.press("Enter")
    sent = messages.locator("li", has=page.get_by_text("the first file", exact=True))
    expect(sent.locator("[data-upload]")).to_have_count(0, timeout=60_000)  # uploaded
    wait_until(page, lambda: page.evaluate("() => localStorage.getItem('chat-account-room')") == "100000",
               lambda: f"the page was told {page.evaluate('() => localStorage.getItem(`chat-account-room`)')}")  # fmt: skip

    big = {"name": "big.bin", "mimeType": "application/octet-stream", "buffer": uuid.uuid4().bytes * 9375}  # 150,000 bytes
    over = "big.bin is 146 KB: this account has only 98 KB left on the server for files (counting those not uploaded yet)."
    box.fill("kept through a refusal")
    attach(page, big)
    expect(files.get_by_role("alert")).to_have_text(over)
    expect(page.get_by_role("button", name="Remove big.bin")).to_have_count(0)
    expect(box).to_have_value("kept through a refusal")

    release = _hold_python(page.context)
    page.reload(wait_until="domcontentloaded")
    _painted(page)
    box.fill("typed before Python")
    attach(page, big)
    expect(files.get_by_role("alert")).to_have_text(over)  # (the page's words: Python's)
    expect(page.get_by_role("button", name="Remove big.bin")).to_have_count(0)
    part = uuid.uuid4().bytes * 3750  # 60,000 bytes: taken, and counted
    attach(page, {"name": "part.bin", "mimeType": "application/octet-stream", "buffer": part})
    expect(page.get_by_role("button", name="Remove part.bin")).to_be_visible()
    attach(page, {"name": "more.bin", "mimeType": "application/octet-stream", "buffer": uuid.uuid4().bytes * 3750})
    expect(files.get_by_role("alert")).to_have_text(
        "more.bin is 59 KB: this account has only 39 KB left on the server for files (counting those not uploaded yet)."
    )
    expect(files.get_by_role("status")).to_have_count(0)  # (no image yet)
    picture = png(32, 24, seed=int(uuid.uuid4().int % 250))
    attach(page, {"name": "chart.png", "mimeType": "image/png", "buffer": picture})
    expect(files.get_by_role("status")).to_have_text(DEMO_NOTE)
    page.get_by_role("button", name="Remove chart.png").click()
    expect(files.get_by_role("status")).to_have_count(0)
    attach(page, {"name": "chart.png", "mimeType": "image/png", "buffer": picture})
    expect(files.get_by_role("status")).to_have_text(DEMO_NOTE)
    choice = page.locator("select[name=assistant]")
    choice.select_option("")  # No answer: nothing is left out
    expect(files.get_by_role("status")).to_have_count(0)
    choice.select_option("demo")
    expect(files.get_by_role("status")).to_have_text(DEMO_NOTE)
    expect(page.get_by_role("button", name="Remove chart.png")).to_be_visible()
    expect(box).to_have_value("typed before Python")
    _before_python(page)

    release(page)
    wait_until(page, lambda: _draft_files(page) == ["part.bin", "chart.png"], lambda: f"Python's draft has {_draft_files(page)}")
    expect(files.get_by_role("status")).to_have_text(DEMO_NOTE)  # (Python's own now, once)
    expect(box).to_have_value("typed before Python")
    box.press("Enter")
    sent = messages.locator("li", has=page.get_by_text("typed before Python", exact=True))
    expect(sent).to_contain_text("part.bin")
    for data in (part, picture):
        digest = hashlib.sha256(data).hexdigest()
        wait_until(page, lambda: uploads.once(digest, len(data)), lambda: f"sent: {uploads.patches.get(digest)}")  # noqa: B023
    expect(sent.locator("[data-upload]")).to_have_count(0, timeout=60_000)
    digests = {hashlib.sha256(data).hexdigest() for data in (first, part, picture)}
    assert set(uploads.patches) == digests  # (nothing refused was sent)
    page.context.close()
