"""Two tabs of one browser: one owns the database at a time; taking over loses nothing."""

from __future__ import annotations

import uuid

from playwright.sync_api import expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import open_app, send, sign
from tests.processes import Server


def test_the_second_tab_offers_to_take_over_and_nothing_is_lost(contexts: Contexts, server: Server) -> None:
    context = contexts.new(server.url)
    first = context.new_page()
    open_app(first)
    sign(first, f"tabs{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    first.click("[data-action=new-chat]")
    send(first, "written in the first tab")
    expect(first.locator(".message", has_text="written in the first tab")).to_be_visible()

    second = context.new_page()
    second.goto("/")
    expect(second.locator(".elsewhere")).to_contain_text("open in another tab")
    second.click("#use-here")
    second.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(second.locator(".message", has_text="written in the first tab")).to_be_visible()

    # The first tab gave the database up: it says so, and writes nothing more.
    expect(first.locator(".elsewhere")).to_contain_text("open in another tab")
    send(second, "written in the second tab")
    expect(second.locator(".message", has_text="written in the second tab")).to_be_visible()

    # And back: the first tab takes over and has everything both tabs wrote.
    first.click("#use-here")
    first.wait_for_selector("body[data-ready=true]", timeout=60_000)
    for text in ("written in the first tab", "written in the second tab"):
        expect(first.locator(".message", has_text=text)).to_be_visible()
    expect(second.locator(".elsewhere")).to_be_visible()
    context.close()
