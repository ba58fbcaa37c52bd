"""The chats in Chromium: titles, rename, delete on every device, the order by activity, search
offline, export and import, the phone layout and the keys of the composer."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import new_chat, open_app, send, sign, signed_up
from tests.processes import Server

PASSWORD = "a long password"


def chat_list(page: Page):  # type: ignore[no-untyped-def]
    return page.get_by_role("navigation", name="Chats")


def chat_titles(page: Page) -> list[str]:
    return [t.strip() for t in chat_list(page).locator("button .title").all_inner_texts()]


def messages(page: Page):  # type: ignore[no-untyped-def]
    return page.get_by_role("list", name="Messages").get_by_role("listitem")


def test_titles_rename_order_and_delete_on_every_device(contexts: Contexts, server: Server) -> None:
    page = signed_up(contexts, server)
    username = page.locator(".who").inner_text().split(" · ")[0]
    send(page, "What is the tallest mountain on Earth, and how tall is it exactly?\nSecond line")
    expect(page.get_by_role("heading", level=2)).to_have_text("What is the tallest mountain on Earth, and how…")
    new_chat(page)
    start = page.get_by_text("What’s on your mind?")  # a chat with no message yet says how to begin
    expect(start).to_be_visible()
    send(page, "Second topic")
    expect(page.get_by_role("heading", level=2)).to_have_text("Second topic")
    expect(start).to_be_hidden()
    assert chat_titles(page) == ["Second topic", "What is the tallest mountain on Earth, and how…"]

    chat_list(page).get_by_role("button", name=re.compile("tallest mountain")).click()
    expect(page.get_by_role("heading", level=2)).to_have_text("What is the tallest mountain on Earth, and how…")
    send(page, "And the second tallest?")
    expect(messages(page)).to_have_count(2)
    expect(chat_list(page).locator("button .title").first).to_have_text("What is the tallest mountain on Earth, and how…")

    page.get_by_role("button", name="Rename").click()
    title = page.get_by_role("textbox", name="Chat title")
    expect(title).to_be_focused()
    title.fill("Mountains")
    title.press("Enter")
    expect(page.get_by_role("heading", level=2)).to_have_text("Mountains")
    assert chat_titles(page) == ["Mountains", "Second topic"]

    other = contexts.new(server.url).new_page()
    open_app(other)
    sign(other, username, PASSWORD, signup=False)
    expect(chat_list(other).locator("button .title")).to_have_text(["Mountains", "Second topic"])

    chat_list(page).get_by_role("button", name=re.compile("Second topic")).click()
    expect(page.get_by_role("heading", level=2)).to_have_text("Second topic")
    page.get_by_role("button", name="Delete chat").click()
    dialog = page.get_by_role("alertdialog")
    expect(dialog).to_contain_text("Delete “Second topic” and its 1 message on every device?")
    dialog.get_by_role("button", name="Cancel").click()
    assert chat_titles(page) == ["Mountains", "Second topic"]
    page.get_by_role("button", name="Delete chat").click()
    page.get_by_role("alertdialog").get_by_role("button", name="Delete chat").click()
    expect(chat_list(page).locator("button .title")).to_have_text(["Mountains"])
    expect(page.get_by_role("heading", level=2)).to_have_text("Mountains")
    expect(chat_list(other).locator("button .title")).to_have_text(["Mountains"])  # gone there too, live
    other.context.close()
    page.context.close()


def test_search_works_offline_highlights_and_jumps_to_the_message(contexts: Contexts, server: Server) -> None:
    page = signed_up(contexts, server)
    send(page, "Where does the zebra crossing get its name?")
    for i in range(45):
        send(page, f"filler message number {i}")
    expect(messages(page)).to_have_count(46)
    new_chat(page)
    send(page, "Zebras are striped")
    page.context.set_offline(True)

    page.keyboard.press("Control+K")
    box = page.get_by_role("searchbox", name="Search")
    expect(box).to_be_focused()
    box.press_sequentially("zebr")
    results = page.get_by_role("list", name="Search results").get_by_role("button")
    expect(results).to_have_count(2)
    expect(results.first).to_contain_text("Zebras are striped")  # newest first
    expect(results.nth(1).locator("mark")).to_have_text("zebra")
    results.nth(1).click()

    found = page.get_by_role("list", name="Messages").get_by_role("listitem").filter(has_text="zebra crossing")
    expect(found).to_be_in_viewport()
    expect(found).to_be_focused()
    expect(page.get_by_role("heading", level=2)).to_have_text("Where does the zebra crossing get its name?")
    expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()

    box.fill("")
    box.press_sequentially("nothing matches this")
    expect(chat_list(page)).to_contain_text("Nothing found")
    box.press("Escape")
    expect(chat_list(page).locator("button .title")).to_have_count(2)
    page.context.close()


def test_export_as_markdown_and_json_and_an_import_twice_is_once(contexts: Contexts, server: Server, tmp_path: Path) -> None:
    page = signed_up(contexts, server)
    send(page, "# Plan\nBuy **milk**")
    send(page, "and bread")
    expect(messages(page)).to_have_count(2)
    with page.expect_download() as markdown:
        page.get_by_role("button", name="Export as Markdown").click()
    text = Path(markdown.value.path()).read_text()
    assert markdown.value.suggested_filename == "Plan.md"
    assert text.startswith("# Plan\n") and "## You · " in text and "Buy **milk**" in text and "and bread" in text

    page.get_by_text("Your data").click()
    with page.expect_download() as everything:
        page.get_by_role("button", name="Export everything").click()
    exported = json.loads(Path(everything.value.path()).read_text())
    assert exported["format"] == "chat-export" and len(exported["chats"]) == 1 and len(exported["messages"]) == 2
    assert {m["content"] for m in exported["messages"]} == {"# Plan\nBuy **milk**", "and bread"}
    file = tmp_path / "export.json"
    file.write_text(json.dumps(exported))

    other = signed_up(contexts, server)  # another account
    other.get_by_text("Your data").click()
    other.get_by_label("Import an export").set_input_files(file)
    expect(other.get_by_role("status").filter(has_text="Imported")).to_have_text(
        "Imported 1 chat and 2 messages (0 already on this device)."
    )
    expect(chat_list(other).locator("button .title")).to_have_text(["New chat", "Plan"])  # (Plan: older activity)

    def server_state() -> dict[str, list[str]]:
        state = other.request.get("/sync/state").json()["snapshot"]
        return {"chats": sorted(c["title"] for c in state["chats"]), "messages": sorted(m["id"] for m in state["messages"])}

    expect_ids = sorted(m["id"] for m in exported["messages"])
    other.wait_for_function("() => !document.querySelector('.marker.unsent')")  # all delivered
    assert server_state() == {"chats": ["New chat", "Plan"], "messages": expect_ids}
    other.get_by_label("Import an export").set_input_files(file)
    expect(other.get_by_role("status").filter(has_text="Imported")).to_have_text(
        "Imported 1 chat and 2 messages (3 already on this device)."
    )
    assert server_state() == {"chats": ["New chat", "Plan"], "messages": expect_ids}
    page.context.close()
    other.context.close()


def _no_horizontal_overflow(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width}px wide"  # type: ignore[index]


def _inside_viewport(page: Page, name: str) -> None:
    box = page.get_by_role("button", name=name, exact=True).bounding_box()
    viewport = page.viewport_size
    assert box is not None and viewport is not None
    assert box["x"] >= 0 and box["y"] >= 0, box
    assert box["x"] + box["width"] <= viewport["width"] and box["y"] + box["height"] <= viewport["height"], (box, viewport)
    assert box["height"] >= 44 and box["width"] >= 44, f"{name}: {box}"


def test_on_a_phone_the_chats_are_a_drawer_and_nothing_is_cut_off(contexts: Contexts, server: Server) -> None:
    for width, height in ((390, 844), (360, 740)):
        page = signed_up(contexts, server, viewport={"width": width, "height": height}, has_touch=True, is_mobile=True)
        page.get_by_role("textbox", name="Message").fill(
            "A long message with a long word " + "x" * 200 + "\n\n| a | b | c |\n|---|---|---|\n| " + "wide " * 40
            + "| 2 | 3 |\n\n```\n" + "code " * 60 + "\n```"
        )  # fmt: skip
        page.get_by_role("combobox", name="Answered by").select_option("")
        page.get_by_role("button", name="Send", exact=True).tap()
        expect(messages(page)).to_have_count(1)
        expect(page.get_by_role("navigation", name="Chats")).not_to_be_visible()  # the chat has the width
        chat = page.get_by_role("region", name=re.compile("A long message"))
        assert chat.bounding_box()["width"] == width  # type: ignore[index]
        _no_horizontal_overflow(page)
        _inside_viewport(page, "Send")
        _inside_viewport(page, "Chats")

        box = page.get_by_role("textbox", name="Message")
        box.fill("line\n" * 60)
        box.dispatch_event("input")
        height_now = box.bounding_box()["height"]  # type: ignore[index]
        assert height * 0.3 < height_now <= height / 2 + 1, height_now  # it grew, up to half the screen
        _inside_viewport(page, "Send")
        box.fill("")
        box.press("Enter")  # a touch screen: Enter is a new line
        expect(box).to_have_value("\n")
        expect(messages(page)).to_have_count(1)

        page.get_by_role("button", name="Chats").click()
        drawer = page.get_by_role("navigation", name="Chats")
        expect(drawer).to_be_visible()
        expect(page.get_by_role("button", name="Chats")).to_have_attribute("aria-expanded", "true")
        page.get_by_role("button", name="New chat", exact=True).first.click()
        expect(drawer).not_to_be_visible()  # a chat chosen: the drawer closes
        page.get_by_role("button", name="Chats").click()
        drawer.get_by_role("button", name=re.compile("A long message")).click()
        expect(drawer).not_to_be_visible()
        expect(messages(page)).to_have_count(1)
        _no_horizontal_overflow(page)
        page.context.close()


def test_an_enter_that_ends_a_composition_does_not_send(contexts: Contexts, server: Server) -> None:
    page = signed_up(contexts, server)
    box = page.get_by_role("textbox", name="Message")
    box.fill("にほんご")
    box.evaluate("b => b.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', isComposing: true, bubbles: true, cancelable: true}))")
    box.evaluate("b => b.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', keyCode: 229, bubbles: true, cancelable: true}))")
    page.wait_for_function("() => document.getElementById('composer-text').value === 'にほんご'")
    expect(messages(page)).to_have_count(0)
    box.press("Enter")  # a real Enter, after the composition: sends (once; an assistant's reply may follow)
    expect(messages(page).filter(has=page.get_by_text("にほんご", exact=True))).to_have_count(1)
    expect(box).to_have_value("")
    page.context.close()


