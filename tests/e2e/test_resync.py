"""A device comes back after the log it left off at was compacted away: it replaces its state with
a snapshot (deleted messages gone, edits shown) and still delivers what it wrote offline."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import uuid
from typing import Any

import pytest
from playwright.sync_api import WebSocketRoute, expect

from server.config import ROOT
from tests.e2e.contexts import Contexts
from tests.e2e.pages import api, open_app, send, sign
from tests.processes import Server

PASSWORD = "a long password"


def test_a_device_behind_a_compacted_log_resyncs_by_replacing(contexts: Contexts, server: Server) -> None:
    username = f"resync{uuid.uuid4().hex[:8]}"
    context = contexts.new(server.url)
    page = context.new_page()
    sockets: list[WebSocketRoute] = []

    def proxy(ws: WebSocketRoute) -> None:  # every live socket goes through the test, to be cut
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket("**/sync/live*", proxy)
    open_app(page)
    sign(page, username, PASSWORD, signup=True)
    page.click("[data-action=new-chat]")
    for text in ("keep me", "edit me", "delete me"):
        send(page, text)
    expect(page.locator(".message")).to_have_count(3)
    expect(page.locator(".message.pending")).to_have_count(0)

    # The device drops off the network: offline, and its open socket cut.
    context.set_offline(True)
    for ws in sockets:
        ws.close(code=4000, reason="network gone")
    expect(page.locator("#status")).to_have_attribute("data-state", "offline")
    send(page, "written offline")
    expect(page.locator(".message.pending", has_text="written offline")).to_be_visible()

    # Meanwhile another device edits one message and deletes another...
    token = api(server.url, "POST", "/auth/login", {"username": username, "password": PASSWORD})["token"]
    messages = api(server.url, "GET", "/sync/state", token=token)["snapshot"]["messages"]
    by_text: dict[str, Any] = {m["content"]: m for m in messages}
    edited = {**by_text["edit me"], "content": "edited elsewhere"}
    events = [
        {"eventId": str(uuid.uuid4()), "type": "MessageEdited", "payload": edited, "createdAt": edited["createdAt"]},
        {
            "eventId": str(uuid.uuid4()),
            "type": "MessageDeleted",
            "payload": {"id": by_text["delete me"]["id"], "chatId": by_text["delete me"]["chatId"]},
            "createdAt": edited["createdAt"],
        },
    ]
    results = api(server.url, "POST", "/sync/events", {"events": events}, token=token)["results"]
    assert [r["status"] for r in results] == ["accepted", "accepted"]
    # ...and the server compacts everything older than now: once its clock, in milliseconds, has
    # passed those requests (the events' and the device's times), they are older.
    handled = int(time.time() * 1000)
    while int(time.time() * 1000) <= handled:
        page.wait_for_timeout(1)  # (not time.sleep: the socket's route must keep running)
    done = subprocess.run(
        [sys.executable, "-m", "server", "compact", "--database-url", server.database_url, "--retention-seconds", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    with pytest.raises(urllib.error.HTTPError) as expired:  # every old cursor has expired
        api(server.url, "GET", "/sync/updates?afterSeq=0", token=token)
    assert expired.value.code == 410

    # Back online: the device's cursor has expired, so it replaces its state with a snapshot.
    context.set_offline(False)
    expect(page.locator(".message", has_text="edited elsewhere")).to_be_visible(timeout=20_000)
    expect(page.locator(".message", has_text="delete me")).to_have_count(0)
    expect(page.locator(".message", has_text="edit me")).to_have_count(0)
    expect(page.locator(".message", has_text="written offline")).to_be_visible()
    expect(page.locator(".message.pending")).to_have_count(0, timeout=20_000)
    final = api(server.url, "GET", "/sync/state", token=token)["snapshot"]["messages"]
    assert sorted(m["content"] for m in final) == ["edited elsewhere", "keep me", "written offline"]
    context.close()
