"""The walking skeleton, end to end: a message typed offline in one browser reaches another.

Real server (Hypercorn, SQLite) started on a free port, Debian's Chromium, two browser contexts
signed in to one account.
"""

from __future__ import annotations

import uuid
from collections import Counter
from urllib.parse import urlsplit

from playwright.sync_api import expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import api, open_app, send, sign, wait_for_service_worker
from tests.processes import Server

PASSWORD = "a long password"


def test_a_message_typed_offline_reaches_the_other_browser(contexts: Contexts, server: Server, load: str) -> None:
    username = f"user{uuid.uuid4().hex[:8]}"
    devices = [contexts.new(server.url) for _ in range(2)]
    origins: set[str] = set()
    for context in devices:
        context.on("request", lambda r: origins.add(urlsplit(r.url).netloc))
        context.on("websocket", lambda ws: origins.add(urlsplit(ws.url).netloc))
    a, b = (c.new_page() for c in devices)
    for page in (a, b):
        page.on("websocket", lambda ws: origins.add(urlsplit(ws.url).netloc))

    open_app(a)
    sign(a, username, PASSWORD, signup=True)
    wait_for_service_worker(a)
    a.click("[data-action=new-chat]")

    open_app(b)
    sign(b, username, PASSWORD, signup=False)
    expect(b.locator(".chat-item")).to_have_count(1)

    # A sends, B shows it live.
    send(a, "hello from A")
    expect(b.locator(".message", has_text="hello from A")).to_be_visible()
    expect(b.locator("#status")).to_have_attribute("data-state", "online")

    # A goes offline, starts a new chat and writes two messages: saved and shown at once,
    # marked pending (each says it is saved once it is durable: a reload before that could find
    # it missing, its text back in the box as the draft if that was saved).
    devices[0].set_offline(True)
    a.click("[data-action=new-chat]")
    expect(a.locator(".chat-item.pending")).to_have_count(1)
    send(a, "offline one")
    send(a, "offline two")
    for text in ("offline one", "offline two"):
        expect(a.locator(".message.pending", has_text=text)).to_be_visible()
        expect(a.locator(".message.pending", has_text=text)).not_to_have_attribute("data-state", "saving")
    expect(a.locator("#status")).to_have_attribute("data-state", "offline")

    # Reloaded while still offline: the service worker opens the app, the messages are there.
    a.reload()
    a.wait_for_selector("body[data-ready=true]", timeout=60_000)
    for text in ("offline one", "offline two"):
        expect(a.locator(".message.pending", has_text=text)).to_be_visible()
    expect(b.locator(".message", has_text="offline one")).to_have_count(0)

    # Back online: both reach the server once, and B shows them, live, in the new chat.
    devices[0].set_offline(False)
    expect(b.locator(".chat-item")).to_have_count(2, timeout=20_000)
    b.click(".chat-item >> nth=0")  # the newest chat comes first
    for text in ("offline one", "offline two"):
        expect(b.locator(".message", has_text=text)).to_be_visible(timeout=20_000)
    expect(a.locator(".message.pending")).to_have_count(0, timeout=20_000)
    assert_delivered_once(server, username, ["hello from A", "offline one", "offline two"])
    expect(b.locator(".message")).to_have_count(2)  # the new chat holds the two offline ones

    # Nothing went anywhere but our own origin.
    assert origins == {urlsplit(server.url).netloc}, origins
    for context in devices:
        context.close()


def assert_delivered_once(server: Server, username: str, texts: list[str]) -> None:
    token = api(server.url, "POST", "/auth/login", {"username": username, "password": PASSWORD})["token"]
    events = api(server.url, "GET", "/sync/updates?afterSeq=0", token=token)["events"]
    sent = Counter(e["payload"]["content"] for e in events if e["type"] == "MessageAppended")
    assert sent == Counter(texts), sent


