"""The composer's text survives a reload, per chat."""

from __future__ import annotations

import uuid

from playwright.sync_api import Browser, expect

from tests.e2e.pages import open_app, sign
from tests.processes import Server


def test_a_draft_is_back_after_a_reload(browser: Browser, server: Server) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    open_app(page)
    sign(page, f"draft{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    page.click("[data-action=new-chat]")
    page.fill("textarea[name=text]", "something I have not sent yet")
    page.wait_for_timeout(1000)  # the draft is saved a moment after typing stops
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(page.locator("textarea[name=text]")).to_have_value("something I have not sent yet")

    page.click("textarea[name=text]")
    page.keyboard.press("Enter")  # sending it clears the draft
    expect(page.locator(".message", has_text="something I have not sent yet")).to_be_visible()
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    expect(page.locator("textarea[name=text]")).to_have_value("")
    context.close()
