"""Attachments in Chromium, against the real server: attached offline and shown at once, kept by
a reload, uploaded once when online, shown on another device and kept there for offline use;
pasted and dropped; refused over the limit with words, the text kept."""

from __future__ import annotations

import hashlib
import re
import struct
import urllib.request
import uuid
import zlib

from playwright.sync_api import Page, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import new_chat, open_app, sign, wait_for_service_worker, wait_until
from tests.processes import Server

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


def image_shown(page: Page, name: str) -> bool:
    return bool(
        page.evaluate(
            "name => [...document.querySelectorAll('#messages img')].some(i => i.alt === name && i.complete && i.naturalWidth > 0)",
            name,
        )
    )


def test_a_file_attached_offline_is_kept_uploaded_once_and_shown_on_another_device(
    contexts: Contexts, server: Server, load: str
) -> None:
    username = f"files{uuid.uuid4().hex[:8]}"
    picture = png(64, 48, seed=len(username) + int(uuid.uuid4().int % 200))
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
    b.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert bytes_received(server) - before == len(picture) + len(notes)  # (nothing sent twice)
    a_context.close()
    b_context.close()


def test_a_pasted_or_dropped_file_is_attached_and_one_over_the_limit_is_refused_in_words(
    contexts: Contexts, server: Server
) -> None:
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
