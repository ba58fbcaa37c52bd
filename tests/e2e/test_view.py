"""How the page applies the View protocol (static/view.js), in Chromium, on the real DOM: the app's
page with the layout Python draws, view.js and idiomorph as the server serves them, and no Pyodide
(the tests call view.js the way webapp/browser.py's DomView does, with items made by
webapp/message_html.py), so they take a moment each.

What the client asks of the page is tested under CPython (tests/webapp, on a page that records
it); what the page then does with it is tested here: an unchanged item keeps its node, a changed
one is morphed in place, a stream patch replaces only the end of a streaming reply, the composer is
never replaced by a redraw, and the scroll follows the latest message only while the reader is
at the bottom."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from server.config import ROOT
from shared.models import Message
from tests.processes import Server
from webapp import message_html, ui
from webapp.markdown import StreamRenderer

T = "2026-11-30T12:00:00.000Z"
CHAT = "00000000-0000-7000-8000-000000000000"
TEST_PAGE = "/view-test"  # the app's page, with the chats drawn and view.js loaded instead of the app

START = """<script type="module">
import * as view from "/static/view.js";
view.wire();
globalThis.chatView = view;
document.getElementById("jump").addEventListener("click", () => view.jumpToLatest());  // (as app.js)
document.body.dataset.ready = "true";
</script>"""


def _test_page() -> str:
    """static/index.html with the layout Python draws after sign-in, and view.js for app.js."""
    html = (ROOT / "static" / "index.html").read_text()
    html = re.sub(
        r'<main id="root" class="root">.*?</main>',
        lambda _: f'<main id="root" class="root">{ui.layout("ann")}</main>',
        html,
        flags=re.DOTALL,
    )
    html, scripts = re.subn(
        r'\s*<script src="/static/paint.js"></script>\s*<script type="module" src="/static/app.js"></script>', lambda _: START, html
    )
    assert scripts == 1, "static/index.html loads paint.js, then app.js"
    return html


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Page]:
    context = browser.new_context(base_url=server.url, viewport={"width": 1000, "height": 700})
    shown = context.new_page()
    html = _test_page()
    shown.route(f"{server.url}{TEST_PAGE}", lambda route: route.fulfill(content_type="text/html", body=html))
    shown.goto(TEST_PAGE)
    shown.wait_for_selector("body[data-ready=true]")
    yield shown
    context.close()


def message(n: int, text: str, role: str = "user", status: str = "completed") -> Message:
    return Message(id=f"00000000-0000-7000-8000-{n:012d}", chat_id=CHAT, role=role, content=text,  # type: ignore[arg-type]
                   status=status, assistant_id="demo" if role == "assistant" else None, created_at=T)  # type: ignore[arg-type]  # fmt: skip


def item(row: Message, content_html: str | None = None) -> tuple[str, str]:
    return message_html.item_key(row.id), message_html.message_item(message_html.Item(message=row, content_html=content_html))


def patch(
    page: Page,
    order: list[str] | None,
    changed: dict[str, str],
    opened: bool = False,
    earlier: bool = False,
    streams: dict[str, tuple[int, str]] | None = None,
) -> None:
    """What webapp/browser.py's DomView.patch_messages sends."""
    body = {"order": order, "changed": changed, "opened": opened, "earlier": earlier, "streams": streams or {}}
    page.evaluate("(json) => chatView.patchMessages(json)", json.dumps(body))


def set_composer(page: Page, chat: str, text: str | None, note: str | None = None) -> None:
    page.evaluate("(json) => chatView.setComposer(json)", json.dumps({"chat": chat, "text": text, "note": note}))


def hold(page: Page, name: str, selector: str) -> None:
    """Keep the element now at ``selector`` as ``window.held[name]``."""
    page.evaluate("([name, selector]) => ((window.held ??= {})[name] = document.querySelector(selector))", [name, selector])


def same(page: Page, name: str, selector: str) -> bool:
    """The element at ``selector`` is the one held as ``name`` (the same DOM object), still in the page."""
    return bool(page.evaluate(
        "([name, selector]) => window.held[name].isConnected && document.querySelector(selector) === window.held[name]",
        [name, selector],
    ))  # fmt: skip


def ids(page: Page) -> list[str]:
    return list(page.evaluate("() => [...document.getElementById('messages').children].map((e) => e.id)"))


def at_bottom(page: Page) -> bool:
    return bool(page.evaluate("(s => s.scrollHeight - s.scrollTop - s.clientHeight <= 24)(document.getElementById('scroller'))"))


def test_an_unchanged_item_keeps_its_node_and_a_changed_one_is_morphed_in_place(page: Page) -> None:
    a, b, c = message(1, "first"), message(2, "A paragraph to select.\n\nAnd one to change."), message(3, "third")
    shown = [item(m) for m in (a, b, c)]
    patch(page, [k for k, _ in shown], dict(shown), opened=True)
    assert ids(page) == [f"m-{m.id}" for m in (a, b, c)]
    for m in (a, b, c):
        hold(page, m.id, f"#m-{m.id}")
    hold(page, "kept paragraph", f"#m-{b.id} .content p")
    # The reader has selected words of b's first paragraph, and b's Edit button has the focus.
    page.evaluate(
        """(id) => {
          const text = document.querySelector(`#m-${id} .content p`).firstChild;
          getSelection().setBaseAndExtent(text, 2, text, 11);
          document.querySelector(`#m-${id} [data-action=edit-message]`).focus();
        }""",
        b.id,
    )
    hold(page, "focused", f"#m-{b.id} [data-action=edit-message]")
    assert page.evaluate("() => getSelection().toString()") == "paragraph"

    changed_b = b.model_copy(update={"content": "A paragraph to select.\n\nAnd one changed."})
    key_b, html_b = item(changed_b)
    patch(page, ids(page), {key_b: html_b})  # a redraw: only b changed
    assert all(same(page, m.id, f"#m-{m.id}") for m in (a, b, c))  # every node kept, b's too
    expect(page.locator(f"#m-{b.id} .content p")).to_have_text(["A paragraph to select.", "And one changed."])
    assert same(page, "kept paragraph", f"#m-{b.id} .content p")  # morphed: what stayed is the same node
    assert same(page, "focused", f"#m-{b.id} [data-action=edit-message]")
    assert page.evaluate("() => document.activeElement === window.held.focused")
    assert page.evaluate("() => getSelection().toString()") == "paragraph"

    # A patch of a frame (no order): the items it names are morphed, the others left alone.
    key_a, html_a = item(a.model_copy(update={"content": "first, edited"}))
    patch(page, None, {key_a: html_a})
    assert all(same(page, m.id, f"#m-{m.id}") for m in (a, b, c)) and ids(page) == [f"m-{m.id}" for m in (a, b, c)]
    expect(page.locator(f"#m-{a.id} .content")).to_have_text("first, edited")
    assert page.evaluate("() => document.activeElement === window.held.focused")


def test_removed_items_go_and_new_ones_are_inserted_in_order(page: Page) -> None:
    a, b, c, x, y, z = (message(n, f"message {n}") for n in range(1, 7))
    items = dict(item(m) for m in (a, b, c, x, y, z))
    key = {m.id: message_html.item_key(m.id) for m in (a, b, c, x, y, z)}
    patch(page, [key[a.id], key[b.id], key[c.id]], {key[m.id]: items[key[m.id]] for m in (a, b, c)}, opened=True, earlier=True)
    expect(page.get_by_role("button", name="Show earlier messages")).to_be_visible()
    for m in (a, c):
        hold(page, m.id, f"#{key[m.id]}")

    patch(page, [key[a.id], key[c.id]], {})  # b deleted
    assert ids(page) == [key[a.id], key[c.id]]
    expect(page.get_by_role("button", name="Show earlier messages")).to_be_hidden()  # (earlier=False now)

    order = [key[x.id], key[a.id], key[y.id], key[c.id], key[z.id]]  # new ones before, between and after
    patch(page, order, {key[m.id]: items[key[m.id]] for m in (x, y, z)})
    assert ids(page) == order
    assert same(page, a.id, f"#{key[a.id]}") and same(page, c.id, f"#{key[c.id]}")
    expect(page.locator("#messages .content")).to_have_text([f"message {n}" for n in (4, 1, 5, 3, 6)])

    patch(page, [key[c.id], key[a.id]], {})  # reordered: the same nodes, moved
    assert ids(page) == [key[c.id], key[a.id]]
    assert same(page, a.id, f"#{key[a.id]}") and same(page, c.id, f"#{key[c.id]}")

    patch(page, [key[a.id]], {key[a.id]: items[key[a.id]]}, opened=True)  # a chat opened: drawn anew
    assert ids(page) == [key[a.id]] and not page.evaluate("(id) => window.held[id].isConnected", a.id)


def test_a_stream_patch_keeps_the_stable_blocks_and_replaces_only_the_end(page: Page) -> None:
    question = message(1, "Write a long answer")
    reply = message(2, "", role="assistant", status="streaming")
    renderer, text = StreamRenderer(), ""
    kept_before = 0
    for i in range(12):
        text += f"Paragraph {i} with **bold** words.\n\n" if i % 4 else f"```python\nx = {i}\n```\n\n"
        kept, tail = renderer.parts(text)
        if i == 0:
            key, html = item(reply, "".join(kept) + tail)
            patch(page, [item(question)[0], key], dict((item(question), (key, html))), opened=True)
            hold(page, "state", f"#{key} .state")
            hold(page, "question", f"#m-{question.id}")
        else:
            # As webapp/pane.py sends it: the blocks kept since the last frame, then the rest.
            page.evaluate("(key) => (window.blocks = [...document.querySelectorAll(`#${key} .content > *`)])", key)
            patch(page, None, {}, streams={key: (kept_before, "".join(kept[kept_before:]) + tail)})
            stayed = page.evaluate(
                "([key, n]) => window.blocks.slice(0, n).every((e, i) => e.isConnected && "
                "document.querySelector(`#${key} .content`).children[i] === e)",
                [key, kept_before],
            )
            assert stayed, f"frame {i}: the {kept_before} blocks kept are the same nodes"
        kept_before = len(kept)
        whole = page.evaluate(
            """([key, html]) => {
              const rendered = document.createElement("div");
              rendered.innerHTML = html;
              return document.querySelector(`#${key} .content`).innerHTML === rendered.innerHTML;
            }""",
            [key, renderer.render(text)],
        )
        assert whole, f"frame {i}: the page's content is the whole text rendered"
    assert kept_before >= 8  # (most blocks were kept: the patches carried only the end)
    # The rest of the item, and the other items, are not touched by a stream patch.
    assert same(page, "state", f"#{key} .state") and same(page, "question", f"#m-{question.id}")
    expect(page.locator(f"#{key} .state")).to_contain_text("Writing…")


def test_the_composer_is_not_replaced_by_a_redraw_and_keeps_what_is_typed_and_its_cursor(page: Page) -> None:
    set_composer(page, "chat-1", "a draft")
    box = page.get_by_role("textbox", name="Message")
    expect(box).to_have_value("a draft")
    hold(page, "box", "#composer-text")
    box.click()
    box.press("End")
    box.press_sequentially(", typed on")
    box.evaluate("(box) => box.setSelectionRange(2, 7)")  # "draft" selected

    # Everything is drawn again: the messages (the chat opened anew), the chat list, the composer
    # set again with the draft as the database had it before the last keys were saved.
    patch(page, [item(message(1, "hello"))[0]], dict([item(message(1, "hello"))]), opened=True)
    page.evaluate("() => chatView.morph('chat-list', '<p>other chats</p>')")
    set_composer(page, "chat-1", "a draft")
    assert same(page, "box", "#composer-text")
    expect(box).to_have_value("a draft, typed on")
    expect(box).to_be_focused()
    assert box.evaluate("(box) => [box.selectionStart, box.selectionEnd]") == [2, 7]

    # Editing a message shows its text and a note; another chat's draft replaces the text.
    set_composer(page, "chat-1", "the message", note="Send saves the change.")
    expect(box).to_have_value("the message")
    expect(page.locator("#composer-note")).to_have_text("Send saves the change.")
    expect(page.locator("#assistant-choice")).to_be_hidden()
    set_composer(page, "chat-2", "")
    expect(box).to_have_value("")
    expect(page.locator("#composer-note")).to_be_hidden()
    assert same(page, "box", "#composer-text")


def test_a_message_not_taken_goes_back_before_what_was_typed_since(page: Page) -> None:
    """A message the app refused after the page had drawn it (a chat's queue full): its text back
    in the composer before what was typed since, kept as the draft; another chat's draft gets it
    in the same way, kept by the page as if typed there."""
    set_composer(page, "chat-1", "")
    box = page.get_by_role("textbox", name="Message")
    box.press_sequentially("typed since")
    page.evaluate("() => chatView.putBack('chat-1', 'the message sent', '')")
    expect(box).to_have_value("the message sent\ntyped since")
    page.evaluate("() => chatView.putBack('chat-1', 'the message sent', '')")  # (given back once)
    expect(box).to_have_value("the message sent\ntyped since")
    page.evaluate("() => { window.inputs = []; document.addEventListener('input', (e) => inputs.push(e.target.value)); }")
    page.evaluate("() => chatView.putBack('chat-1', 'and another', '')")
    assert page.evaluate("() => inputs") == ["and another\nthe message sent\ntyped since"]  # (app.js keeps it as typed)

    page.evaluate("() => chatView.putBack('chat-2', 'sent in chat 2', 'its draft')")
    expect(box).to_have_value("and another\nthe message sent\ntyped since")
    kept = page.evaluate("() => localStorage.getItem('chat-draft:chat-2')")
    assert kept is None or json.loads(kept)["text"] == "sent in chat 2\nits draft"  # (gone once IndexedDB has it)
    page.wait_for_function("() => document.body.dataset.drafts === 'saved'")
    drafts = page.evaluate("""() => new Promise((resolve) => {
      indexedDB.open('chat-pending').onsuccess = (e) => {
        const req = e.target.result.transaction('drafts').objectStore('drafts').get('chat-2');
        req.onsuccess = () => resolve(req.result.text);
      };
    })""")
    assert drafts == "sent in chat 2\nits draft"


def _top(page: Page, key: str) -> float:
    return float(page.evaluate("(key) => document.getElementById(key).getBoundingClientRect().top", key))


def test_the_scroll_follows_the_latest_only_at_the_bottom_and_jump_to_latest_brings_it_back(page: Page) -> None:
    rows = [message(n, f"Message {n}\n\nwith a second paragraph, to take some room on the screen.") for n in range(1, 31)]
    shown = [item(m) for m in rows]
    patch(page, [k for k, _ in shown], dict(shown), opened=True)
    assert at_bottom(page)  # a chat opens at its latest message
    jump = page.get_by_role("button", name="Jump to latest")
    expect(jump).to_be_hidden()

    # At the bottom: a new message, and a streaming reply growing, keep the reader there.
    reply = message(31, "", role="assistant", status="streaming")
    renderer, text = StreamRenderer(), "Words"
    key, html = item(reply, renderer.render(text))
    shown.append((key, html))
    patch(page, [k for k, _ in shown], {key: html})
    assert at_bottom(page)
    for i in range(5):
        text += f"\n\nMore words, paragraph {i}."
        patch(page, None, {}, streams={key: (0, renderer.render(text))})
        assert at_bottom(page), "a reader at the bottom stays at the bottom"

    # The reader scrolls up: nothing they see moves as the reply grows and messages arrive.
    box = page.locator("#scroller").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -800)
    expect(jump).to_be_visible()
    page.wait_for_function("() => document.getElementById('scroller').scrollTop > 0")  # (the wheel's scroll is over)
    seen = shown[20][0]
    top, scrolled = _top(page, seen), page.evaluate("() => document.getElementById('scroller').scrollTop")
    for i in range(5):
        text += f"\n\nYet more words, paragraph {i}."
        patch(page, None, {}, streams={key: (0, renderer.render(text))})
    later = item(message(32, "A message from another device"))
    shown.append(later)
    patch(page, [k for k, _ in shown], dict([later]))
    assert _top(page, seen) == top and not at_bottom(page)
    assert page.evaluate("() => document.getElementById('scroller').scrollTop") == scrolled
    expect(jump).to_be_visible()

    # Jump to latest: at the bottom, and following again.
    jump.click()
    assert at_bottom(page)
    expect(jump).to_be_hidden()
    text += "\n\nThe last paragraph."
    patch(page, None, {}, streams={key: (0, renderer.render(text))})
    assert at_bottom(page)


def test_the_painted_render_cache_is_taken_over_once_and_only_for_its_account_and_layout(page: Page) -> None:
    painted = "(chat) => (globalThis.chatPainted = {account: 'u1', layout: 'L1', chat, text: ''})"
    cached = "([account, layout]) => chatView.cached(account, layout) ?? null"
    page.evaluate(painted, "chat-1")
    assert page.evaluate(cached, ["u1", "L1"]) == "chat-1"
    assert page.evaluate(cached, ["u1", "L1"]) is None  # once: a later start draws anew
    for account, layout in (("u2", "L1"), ("u1", "L2")):
        page.evaluate(painted, "chat-1")
        assert page.evaluate(cached, [account, layout]) is None


def test_a_sent_message_drawn_by_the_page_stays_until_python_has_it_then_is_morphed_or_goes(page: Page) -> None:
    """The page draws a message as it is sent (showSending) and keeps that drawing through Python's
    redraws until Python has the message (sendingTaken). Then Python's next drawing morphs that node
    in place; or, should the message not be drawn under its id by then (refused by the server
    before Python first drew it: drawn under its event's id), the page's drawing goes."""
    a = message(1, "first")
    patch(page, [item(a)[0]], dict([item(a)]), opened=True)
    set_composer(page, CHAT, "")
    kept, refused = message(2, "kept"), message(3, "refused")
    for row in (kept, refused):
        page.evaluate("(send) => chatView.showSending(send)", {"id": row.id, "chat": CHAT, "text": row.content})
    hold(page, "kept", f"#m-{kept.id}")
    patch(page, [item(a)[0]], {})  # (Python has neither yet)
    assert ids(page) == [f"m-{m.id}" for m in (a, kept, refused)]

    for row in (kept, refused):
        page.evaluate("(id) => chatView.sendingTaken(id)", row.id)
    assert ids(page) == [f"m-{m.id}" for m in (a, kept, refused)]  # (on screen until the next drawing)
    patch(
        page,
        [item(a)[0], item(kept)[0], "r-refused-event"],
        {item(kept)[0]: item(kept)[1], "r-refused-event": "<li id='r-refused-event' class='message user'>refused</li>"},
    )
    assert ids(page) == [f"m-{a.id}", f"m-{kept.id}", "r-refused-event"]
    assert same(page, "kept", f"#m-{kept.id}")  # morphed in place, never off the screen
    assert page.evaluate("(id) => document.getElementById(`m-${id}`).hasAttribute('data-sending')", kept.id) is False
