"""Attachments in Chromium, against the real server: attached offline and shown at once, kept by
a reload, uploaded once when online, shown on another device and kept there for offline use;
pasted and dropped; refused over the limit with words, the text kept; sent and uploaded from a
page that draws no frames (a tab in the background); an upload cut by a killed
browser resumed from the server's offset; an image reaching a model that reads images as a
data-URL content part, and a model that does not named before Send; the same for "Model on this
device", which the page calls itself, with a PDF's text read in the page's worker (offline
too); Export
everything as a tar with the files, imported into another account, which then holds them."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import struct
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, Route, expect

from server.transfer import _read_tar
from tests.e2e.contexts import Contexts
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, send, sign, signed_up, wait_for_service_worker, wait_until
from tests.e2e.profiles import kill, launch, reopened, signed_up_in_a_profile
from tests.e2e.slow_proxy import SlowProxy
from tests.fake_upstream import FakeUpstream
from tests.processes import Server
from tests.server.test_runs_attachments import minimal_pdf

PASSWORD = "a long password"


def png(width: int, height: int, seed: int) -> bytes:
    """A real PNG (the browser decodes it), of one colour from ``seed``."""
    pixel = bytes([seed % 256, (seed * 7) % 256, (seed * 13) % 256])
    raw = b"".join(b"\x00" + pixel * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def bytes_received(server: Server) -> float:
    """The server's count of upload bytes stored (GET /metrics)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        found = re.search(r"^chat_blob_bytes_received_total (\S+)$", response.read().decode(), re.M)
    return float(found.group(1)) if found else 0.0


def attach(page: Page, *files: dict[str, object]) -> None:
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(files)  # type: ignore[arg-type]


def natural_width(page: Page, selector: str) -> int:
    return int(page.locator(selector).evaluate("img => img.complete ? img.naturalWidth : 0"))


def image_shown(page: Page, name: str) -> bool:
    return bool(
        page.evaluate(
            "name => [...document.querySelectorAll('#messages img')].some(i => i.alt === name && i.complete && i.naturalWidth > 0)",
            name,
        )
    )


def test_a_file_attached_offline_is_kept_uploaded_once_and_shown_on_another_device(contexts: Contexts, server: Server, load: str) -> None:
    username = f"files{uuid.uuid4().hex[:8]}"
    picture = png(1200, 900, seed=len(username) + int(uuid.uuid4().int % 200))
    notes = b"# notes\nsome text in a file\n" + uuid.uuid4().hex.encode()
    a_context = contexts.new(server.url)
    a = a_context.new_page()
    open_app(a)
    sign(a, username, PASSWORD, signup=True)
    wait_for_service_worker(a)
    new_chat(a)

    # Offline: attached, shown at once in the composer, kept by a reload.
    a_context.set_offline(True)
    attach(
        a,
        {"name": "cat.png", "mimeType": "image/png", "buffer": picture},
        {"name": "notes.md", "mimeType": "text/markdown", "buffer": notes},
    )
    for name in ("cat.png", "notes.md"):
        expect(a.get_by_role("button", name=f"Remove {name}")).to_be_visible()
    a.fill("textarea[name=text]", "look at these")
    a.reload()
    a.wait_for_selector("body[data-ready=true]", timeout=60_000)
    for name in ("cat.png", "notes.md"):
        expect(a.get_by_role("button", name=f"Remove {name}")).to_be_visible()
    expect(a.locator("textarea[name=text]")).to_have_value("look at these")

    # One taken off, then sent offline: the message shows the image, and waits to upload it.
    a.get_by_role("button", name="Remove notes.md").click()
    expect(a.get_by_role("button", name="Remove notes.md")).to_have_count(0)
    attach(a, {"name": "notes.md", "mimeType": "text/markdown", "buffer": notes})
    expect(a.get_by_role("button", name="Remove notes.md")).to_be_visible()
    before = bytes_received(server)
    a.locator("textarea[name=text]").press("Enter")
    message = a.locator(".message", has_text="look at these")
    expect(message.get_by_role("button", name="Open cat.png")).to_be_visible()
    wait_until(a, lambda: image_shown(a, "cat.png"), "the image is shown from this device")
    expect(message.get_by_role("link", name="Download notes.md")).to_be_visible()
    assert natural_width(a, "#messages img[alt='cat.png']") == 480  # its thumbnail, made once when kept
    expect(message.get_by_text("Waiting for the connection")).to_have_count(2)
    expect(a.get_by_role("button", name="Remove cat.png")).to_have_count(0)  # (the composer is clear)

    # Online: both uploaded, once.
    a_context.set_offline(False)
    expect(message.get_by_text("Waiting for the connection")).to_have_count(0, timeout=30_000)
    expect(message.locator("[data-upload]")).to_have_count(0, timeout=30_000)
    for data in (picture, notes):
        head = a.request.head(f"/blobs/{hashlib.sha256(data).hexdigest()}", headers={"Tus-Resumable": "1.0.0"})
        assert head.status == 200, head.status
        assert head.headers["upload-offset"] == head.headers["upload-length"] == str(len(data))
    assert bytes_received(server) - before == len(picture) + len(notes)

    # Another device: the image and the file, fetched once and kept for offline use.
    b_context = contexts.new(server.url)
    b = b_context.new_page()
    open_app(b)
    sign(b, username, PASSWORD, signup=False)
    wait_for_service_worker(b)
    shown = b.locator(".message", has_text="look at these")
    expect(shown.get_by_role("button", name="Open cat.png")).to_be_visible(timeout=30_000)
    wait_until(b, lambda: image_shown(b, "cat.png"), "the image is shown on the other device")
    expect(shown.get_by_role("link", name="Download notes.md")).to_be_visible()
    b_context.set_offline(True)
    b.reload()
    b.wait_for_selector("body[data-ready=true]", timeout=60_000)
    wait_until(b, lambda: image_shown(b, "cat.png"), "the image is shown offline after a reload")

    # Full size in a dialog; Escape closes it.
    b.locator(".message", has_text="look at these").get_by_role("button", name="Open cat.png").click()
    dialog = b.get_by_role("dialog", name="cat.png")
    expect(dialog).to_be_visible()
    assert natural_width(b, "#messages img[alt='cat.png']") == 480  # (made here too, when fetched)
    wait_until(b, lambda: natural_width(b, "#image-view-img") == 1200, "the dialog shows the image at full size")
    b.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert bytes_received(server) - before == len(picture) + len(notes)  # (nothing sent twice)
    a_context.close()
    b_context.close()


# static/files.js's IndexedDB database, opened (made as files.js makes it, the first time).
_OPEN_FILES = """() => new Promise((resolve, reject) => {
  const opening = indexedDB.open("chat-attachments", 1);
  opening.onupgradeneeded = () => opening.result.createObjectStore("files");
  opening.onsuccess = () => resolve(opening.result);
  opening.onerror = () => reject(opening.error);
})"""
_KEEP_WITHOUT_THUMB = f"""async ([sha256, b64]) => {{
  const blob = new Blob([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], {{ type: "image/png" }});
  const db = await ({_OPEN_FILES})();
  const tx = db.transaction(["files"], "readwrite");
  tx.objectStore("files").put({{ blob, type: blob.type, thumb: null }}, sha256);
  await new Promise((resolve, reject) => {{ tx.oncomplete = resolve; tx.onerror = () => reject(tx.error); }});
  db.close();
}}"""
_SHOWN_AND_KEPT = f"""async (sha256) => {{
  const files = await import("/static/files.js");
  const img = new Image();
  img.src = await files.keptUrl(sha256);
  await img.decode();
  const db = await ({_OPEN_FILES})();
  const row = await new Promise((resolve) => {{ const get = db.transaction(["files"]).objectStore("files").get(sha256); get.onsuccess = () => resolve(get.result); }});
  db.close();
  return [img.naturalWidth, row.thumb instanceof Blob ? row.thumb.type : String(row.thumb)];
}}"""


def test_an_image_kept_before_its_thumbnail_was_made_is_given_it_when_next_shown(browser: Browser, server: Server) -> None:
    """The page went (a reload, a crash: a busy phone takes its time decoding) between keeping an
    image and adding its thumbnail: the next page to show the image makes the thumbnail then, and
    keeps it. A small image needs none, and that is kept too (it is not decoded again)."""
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/static/files.js")  # (the app's origin, without starting Python)
    big, small = png(1200, 900, seed=3), png(100, 80, seed=4)
    for data in (big, small):
        page.evaluate(_KEEP_WITHOUT_THUMB, [hashlib.sha256(data).hexdigest(), base64.b64encode(data).decode()])
    page.reload()
    assert page.evaluate(_SHOWN_AND_KEPT, hashlib.sha256(big).hexdigest()) == [480, "image/webp"]
    assert page.evaluate(_SHOWN_AND_KEPT, hashlib.sha256(small).hexdigest()) == [100, "false"]
    page.reload()  # (a new page's life: the kept thumbnail is what it shows)
    assert page.evaluate(_SHOWN_AND_KEPT, hashlib.sha256(big).hexdigest()) == [480, "image/webp"]
    context.close()


def test_export_everything_carries_the_files_and_importing_it_elsewhere_restores_them(
    contexts: Contexts, server: Server, load: str, tmp_path: Path
) -> None:
    picture = png(640, 480, seed=int(uuid.uuid4().int % 250))
    notes = b"notes " + uuid.uuid4().hex.encode()
    page = signed_up(contexts, server)
    attach(page, {"name": "cat.png", "mimeType": "image/png", "buffer": picture}, {"name": "notes.txt", "mimeType": "text/plain", "buffer": notes})
    expect(page.get_by_role("button", name="Remove notes.txt")).to_be_visible()
    send(page, "with two files")
    expect(page.locator(".message", has_text="with two files").locator("[data-upload]")).to_have_count(0, timeout=30_000)

    page.get_by_text("Your data").click()
    with page.expect_download() as everything:
        page.get_by_role("button", name="Export everything").click()
    assert everything.value.suggested_filename.endswith(".tar")
    raw = Path(everything.value.path()).read_bytes()
    text, files = _read_tar(raw)  # (the format `python -m server import` reads)
    assert files == {hashlib.sha256(picture).hexdigest(): picture, hashlib.sha256(notes).hexdigest(): notes}
    assert {m["content"] for m in json.loads(text)["messages"]} == {"with two files"}
    expect(page.get_by_role("status").filter(has_text="Exported")).to_have_text("Exported with 2 files.")
    tar = tmp_path / "chats.tar"
    tar.write_bytes(raw)

    other = signed_up(contexts, server)  # another account
    before = bytes_received(server)
    other.get_by_text("Your data").click()
    other.get_by_label("Import an export").set_input_files(tar)
    expect(other.get_by_role("status").filter(has_text="Imported")).to_have_text(
        "Imported 1 chat and 1 messages, 2 files (0 already on this device)."
    )
    other.locator(".chat-item", has_text="with two files").click()
    message = other.locator(".message", has_text="with two files")
    wait_until(other, lambda: image_shown(other, "cat.png"), "the imported image is shown from this device")
    expect(message.locator("[data-upload]")).to_have_count(0, timeout=30_000)  # uploaded: the account holds them
    for data in (picture, notes):
        got = other.request.get(f"/blobs/{hashlib.sha256(data).hexdigest()}")
        assert got.status == 200 and got.body() == data
    assert bytes_received(server) - before == len(picture) + len(notes)  # (each sent once by this account)
    page.context.close()
    other.context.close()


def test_a_pasted_or_dropped_file_is_attached_one_over_the_limit_is_refused_in_words_and_a_hidden_page_uploads(contexts: Contexts, server: Server) -> None:
    page = contexts.page(server.url)
    open_app(page)
    sign(page, f"paste{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    new_chat(page)
    box = page.locator("textarea[name=text]")
    box.fill("the text stays")
    # Pasted into the composer, and dropped on the chat: a File in a DataTransfer, as a person's.
    box.evaluate(
        """box => {
          const data = new DataTransfer();
          data.items.add(new File(["pasted bytes"], "pasted.txt", { type: "text/plain" }));
          box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(page.get_by_role("button", name="Remove pasted.txt")).to_be_visible()
    page.locator("#messages").evaluate(
        """list => {
          const data = new DataTransfer();
          data.items.add(new File(["dropped bytes"], "dropped.txt", { type: "text/plain" }));
          list.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(page.get_by_role("button", name="Remove dropped.txt")).to_be_visible()
    attach(page, {"name": "huge.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * (25 * 1024 * 1024)})
    expect(page.get_by_role("alert")).to_contain_text("huge.bin is 25 MB: the largest file the server takes is 20 MB.")
    expect(page.get_by_role("button", name="Remove huge.bin")).to_have_count(0)
    expect(box).to_have_value("the text stays")

    # Sent from a page that draws no frames (a tab in the background): the message is drawn and
    # its files uploaded all the same (what waits for a frame goes on a moment later).
    page.evaluate("() => { window.requestAnimationFrame = () => 0; }")
    box.press("Enter")
    message = page.locator(".message", has_text="the text stays")
    expect(message.get_by_role("link", name="Download pasted.txt")).to_be_visible()
    expect(message.locator("[data-upload]")).to_have_count(0, timeout=30_000)
    for data in (b"pasted bytes", b"dropped bytes"):
        head = page.request.head(f"/blobs/{hashlib.sha256(data).hexdigest()}", headers={"Tus-Resumable": "1.0.0"})
        assert head.status == 200 and head.headers["upload-offset"] == str(len(data)), (head.status, head.headers)


@pytest.fixture(scope="module")
def upstream() -> FakeUpstream:
    fake = FakeUpstream(delay=0.01, words=5)
    fake.start_in_thread()
    return fake


@pytest.fixture(scope="module")
def seeing(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with two assistants on the fake upstream, one reads images, one does not; and
    files of at most 5 MB."""
    data = tmp_path_factory.mktemp("seeing")
    common = {"provider": "openai", "baseUrl": upstream.base_url, "model": "fake-1"}
    assistants = [{"id": "blind", "name": "Text model", **common}, {"id": "eyes", "name": "Vision model", "vision": True, **common}]
    server = Server(
        f"sqlite:///{data / 'chat.db'}", data / "server.log", assistants=json.dumps(assistants), max_file_bytes=str(5 * 1024 * 1024)
    )
    server.start()
    yield server
    server.stop()


def test_an_image_reaches_a_model_that_reads_images_as_its_bytes_and_what_does_not_is_said_before_send(
    contexts: Contexts, seeing: Server, upstream: FakeUpstream
) -> None:
    page = contexts.page(seeing.url)
    open_app(page)
    sign(page, f"eyes{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    new_chat(page)
    picture = png(32, 24, seed=int(uuid.uuid4().int % 250))
    choice = page.locator("select[name=assistant]")
    expect(choice.locator("option", has_text="Vision model")).to_have_count(1, timeout=30_000)  # (the server's list is in)
    choice.select_option("blind")
    attach(page, {"name": "chart.png", "mimeType": "image/png", "buffer": picture})
    expect(page.get_by_role("button", name="Remove chart.png")).to_be_visible()
    files = page.get_by_role("list", name="Attached files")
    expect(files.get_by_role("status")).to_have_text("Text model does not read images: they are left out of what it is sent.")
    choice.select_option("eyes")
    expect(files.get_by_role("status")).to_have_count(0)
    attach(page, {"name": "film.bin", "mimeType": "application/octet-stream", "buffer": bytes(6 * 1024 * 1024)})
    expect(files.get_by_role("alert")).to_have_text("film.bin is 6.0 MB: the largest file the server takes is 5.0 MB.")

    asked = len(upstream.requests)
    send(page, "What does this chart say?", assistant="eyes")
    expect(page.locator(".message.assistant.completed")).to_have_count(1, timeout=30_000)
    assert len(upstream.requests) == asked + 1
    [question] = [m for m in upstream.requests[-1]["messages"] if m["role"] == "user"]
    text, image = question["content"]
    assert text == {"type": "text", "text": "What does this chart say?"}
    assert image == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(picture).decode()}}
    page.context.close()


def test_a_model_on_this_device_that_reads_images_is_sent_them_and_a_pdfs_text_by_the_page(
    contexts: Contexts, server: Server, upstream: FakeUpstream, load: str
) -> None:
    """The page builds the request from the files in its IndexedDB: the image as a data-URL
    content part of the type its bytes say (a PNG named and typed as a JPEG goes as a PNG), with
    exactly its bytes, on the next turn too; the PDF as the text pypdf reads, which the page's
    Python did not load at start. Before "Reads images" is ticked, the composer says it reads none."""
    page = contexts.page(server.url)
    open_app(page)
    sign(page, f"ondevice{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    new_chat(page)
    page.get_by_text("Model on this device").click()
    page.get_by_role("textbox", name="Base URL").fill(upstream.base_url)
    page.get_by_role("textbox", name="Model", exact=True).fill("fake-1")
    page.get_by_role("button", name="Save").click()
    choice = page.locator("select[name=assistant]")
    expect(choice.locator("option[value=on-device]")).to_have_text("On this device: fake-1")
    choice.select_option("on-device")
    picture = png(40, 30, seed=int(uuid.uuid4().int % 250))
    attach(page, {"name": "chart.jpg", "mimeType": "image/jpeg", "buffer": picture})
    files = page.get_by_role("list", name="Attached files")
    expect(files.get_by_role("status")).to_have_text("On this device: fake-1 does not read images: they are left out of what it is sent.")
    page.get_by_role("checkbox", name="Reads images").check()
    page.get_by_role("button", name="Save").click()
    expect(files.get_by_role("status")).to_have_count(0)
    attach(page, {"name": "report.pdf", "mimeType": "application/pdf", "buffer": minimal_pdf("Quarterly figures")})
    expect(page.get_by_role("button", name="Remove report.pdf")).to_be_visible()
    assert "pypdf" not in page.evaluate("Object.keys(pyodide.loadedPackages)")  # (not loaded at start)

    asked = len(upstream.requests)
    send(page, "What do these say?", assistant="on-device")
    expect(page.locator(".message.assistant.completed")).to_have_count(1, timeout=60_000)
    assert len(upstream.requests) == asked + 1
    [question] = [m for m in upstream.requests[-1]["messages"] if m["role"] == "user"]
    text, image = question["content"]
    assert text == {"type": "text", "text": 'What do these say?\n\nThe attached file "report.pdf":\n```\nQuarterly figures\n```'}
    assert image == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(picture).decode()}}
    assert base64.b64decode(image["image_url"]["url"].split(",", 1)[1]) == picture

    send(page, "And the second page?", assistant="on-device")
    expect(page.locator(".message.assistant.completed")).to_have_count(2, timeout=60_000)
    first, second = [m for m in upstream.requests[-1]["messages"] if m["role"] == "user"]
    assert first["content"] == question["content"]  # the earlier turn's image and text, built again
    assert second["content"] == "And the second page?"
    page.context.close()


def test_a_pdfs_text_is_read_in_the_page_with_no_network(contexts: Contexts, server: Server) -> None:
    """pypdf, which the page's start does not load, is precached by the service worker: the
    first PDF read offline (after a reload, a new worker) still has its text."""
    page = signed_up(contexts, server)
    wait_for_service_worker(page)
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    page.context.set_offline(True)
    read = "async (bytes) => await chatHost.readPdf(new Uint8Array(bytes), 60)"
    assert page.evaluate(read, list(minimal_pdf("Offline figures"))) == "Offline figures"
    assert page.evaluate(read, list(b"%PDF-1.4 broken")) == ""  # (no text: the page leaves it out with a note)
    page.context.close()


def test_an_upload_cut_by_a_killed_browser_resumes_from_the_servers_offset(
    playwright: Playwright, contexts: Contexts, server: Server, tmp_path: Path, load: str
) -> None:
    """Killed with about half of a 10 MB file on the server (the file goes in one request, over
    an uplink slowed to 1 MB/s by a proxy, and the server stores its body as it comes), the
    browser opened again goes on from the server's offset: the person does not pick the file
    again, and no byte the server had is sent twice."""
    with SlowProxy(server.port) as proxy:
        via = copy.copy(server)
        via.url = proxy.url  # (the browser's origin: the proxy's)
        profile = tmp_path / "profile"
        signed_up_in_a_profile(playwright, contexts, profile, via)
        context, page = reopened(playwright, profile, via)
        page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
        data = os.urandom(10 * 1024 * 1024)
        digest = hashlib.sha256(data).hexdigest()
        before = bytes_received(server)
        attach(page, {"name": "video.bin", "mimeType": "application/octet-stream", "buffer": data})
        expect(page.get_by_role("button", name="Remove video.bin")).to_be_visible(timeout=30_000)
        proxy.rate = 1_000_000
        page.locator("textarea[name=text]").fill("the whole video")
        page.locator("textarea[name=text]").press("Enter")
        # Its progress as the request goes (the browser's upload events), before the server has it.
        uploading = page.locator(".message", has_text="the whole video").get_by_text(re.compile(r"Uploading [1-9]\d*%"))
        expect(uploading).to_be_visible(timeout=30_000)
        wait_until(page, lambda: bytes_received(server) - before >= len(data) * 0.4, "about half the file on the server", timeout=60)
        proxy.hold()  # (the machine goes down with its network: nothing of what it sent arrives later)
        kill(profile, context)
        proxy.cut()
        wait_until(None, lambda: proxy.connections == 0, "the browser's connections cut", timeout=30)
        half = bytes_received(server) - before
        assert len(data) * 0.4 <= half < len(data) * 0.6, half
        proxy.rate = None

        context = launch(playwright, profile, via)
        resumed: list[int] = []

        def recorded(route: Route) -> None:
            if route.request.method == "PATCH":
                resumed.append(int(route.request.headers["upload-offset"]))
            route.continue_()

        context.route(f"**/blobs/{digest}", recorded)  # (before the page opens: it uploads at once)
        page = context.pages[0] if context.pages else context.new_page()
        open_app(page)
        message = page.locator(".message", has_text="the whole video")
        expect(message.get_by_role("link", name="Download video.bin")).to_be_visible(timeout=BOOT_TIMEOUT)
        expect(message.locator("[data-upload]")).to_have_count(0, timeout=60_000)
        assert len(resumed) == 1 and resumed[0] >= half, (resumed, half)  # from the server's offset, in one request
        assert bytes_received(server) - before == len(data)  # every byte once
        stored = page.request.get(f"/blobs/{digest}")
        assert stored.status == 200 and hashlib.sha256(stored.body()).hexdigest() == digest
        context.close()
