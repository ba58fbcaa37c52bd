"""Sessions in Chromium: a session that ends keeps the chats on screen and writable, and the same
user signs in again without a reload; another user on the same browser never sees the first
one's chats, and the server never gets the first one's unsent changes under the second's
session; Sign out ends the session on the server."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import Page, Request, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import open_app, send, signed_up
from tests.processes import Server

PASSWORD = "a long password"
UNSENT = re.compile("Saved on this device, not sent yet|Not sent yet: the server could not be reached")


def username_of(page: Page) -> str:
    return page.locator(".who").inner_text().split(" · ")[0]


def server_contents(page: Page) -> str:
    """Everything the server holds for the page's session, as text."""
    return page.request.get("/sync/state").text()


def test_an_ended_session_keeps_the_chats_and_signing_in_again_sends_what_was_written(
    contexts: Contexts, server: Server, load: str
) -> None:
    page = signed_up(contexts, server)
    send(page, "before the session ended")
    expect(page.get_by_text("Sent.", exact=True)).to_have_count(1)
    username = username_of(page)
    page.context.clear_cookies()
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    banner = page.get_by_role("form", name="Your session has ended. Your chats stay here, and what you write is sent once you sign in again.")
    expect(banner).to_be_visible()
    expect(page.get_by_role("list", name="Messages")).to_contain_text("before the session ended")  # still shown
    send(page, "written while signed out")
    expect(page.get_by_role("list", name="Messages")).to_contain_text("Saved on this device, not sent yet")
    page.evaluate("window.sameDocument = true")

    expect(banner.get_by_role("textbox", name="Username")).to_have_value(username)
    banner.get_by_label("Password").fill(PASSWORD)
    banner.get_by_role("button", name="Sign in").click()
    expect(banner).to_have_count(0)
    expect(page.get_by_text("Sent.", exact=True)).to_have_count(2)  # delivered
    assert page.evaluate("window.sameDocument") is True  # no reload
    assert "written while signed out" in server_contents(page)
    page.context.close()


def test_another_user_never_sees_nor_sends_the_first_users_unsent_changes(contexts: Contexts, server: Server) -> None:
    first = signed_up(contexts, server)
    send(first, "a chat of the first user")
    expect(first.get_by_text("Sent.", exact=True)).to_have_count(1)
    context = first.context
    context.set_offline(True)
    send(first, "unsent words of the first user")
    # Unsent: kept, or kept and tried (the push that found no network may come before the next
    # frame draws the message, which then never shows the first of the two).
    expect(first.get_by_role("list", name="Messages")).to_contain_text(UNSENT)
    context.clear_cookies()  # the session ends while offline
    context.set_offline(False)
    first.evaluate("window.dispatchEvent(new Event('online'))")
    banner = first.get_by_role("form", name="Your session has ended. Your chats stay here, and what you write is sent once you sign in again.")
    expect(banner).to_be_visible()

    second = signed_up(contexts, server)  # (in a context of its own: the second account exists)
    second_name = username_of(second)
    # ...with its chat on the server before that browser closes (its outbox empty).
    second.wait_for_function("() => pyodide.runPython('chat_client.store.pending_count()') === 0")
    second.context.close()
    banner.get_by_role("textbox", name="Username").fill(second_name)
    banner.get_by_label("Password").fill(PASSWORD)
    pushed: list[str] = []  # what the page pushes from the moment another user signs in

    def record(request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/sync/events"):
            pushed.append(request.post_data or "")

    first.on("request", record)
    banner.get_by_role("button", name="Sign in").click()
    question = first.get_by_role("alertdialog")
    expect(question).to_contain_text("has 1 change on this device that did not reach the server yet")
    question.get_by_role("button", name=f"Remove them and sign in as {second_name}").click()

    expect(first.locator(".who")).to_contain_text(second_name)
    expect(first.get_by_role("navigation", name="Chats")).to_contain_text("New chat")
    expect(first.get_by_role("navigation", name="Chats")).not_to_contain_text("a chat of the first user")
    first.reload()
    first.wait_for_selector("body[data-ready=true]")
    expect(first.get_by_role("status").filter(has_text="Online")).to_be_visible()
    assert "first user" not in first.locator("#root").inner_text()
    assert "first user" not in server_contents(first)
    assert not any("unsent words" in body for body in pushed)
    context.close()


def test_sign_out_ends_the_session_on_the_server_and_can_remove_this_devices_copy(contexts: Contexts, server: Server) -> None:
    page = signed_up(contexts, server)
    send(page, "kept or removed")
    expect(page.get_by_text("Sent.", exact=True)).to_have_count(1)
    cookie = next(c for c in page.context.cookies() if c["name"] == "chat_session")
    page.get_by_role("button", name="Sign out").click()
    dialog = page.get_by_role("dialog", name="Sign out")
    dialog.get_by_label("Also remove this device's copy of the chats").check()
    dialog.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("status").filter(has_text="Signed out")).to_contain_text("The copy on this device was removed.")

    request = urllib.request.Request(server.url + "/sync/updates?afterSeq=0", headers={"Cookie": f"chat_session={cookie['value']}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401  # the old cookie stopped working
    page.reload()
    open_app(page)
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert "kept or removed" not in page.content()
    page.context.close()
