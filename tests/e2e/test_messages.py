"""The message pane in Chromium: Markdown and code (and nothing hostile getting through), nodes
that stay while a chat changes, scrolling like a chat, branches, and every control clicked."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Route, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import (
    BOOT_TIMEOUT,
    at_bottom,
    open_app,
    send,
    sign,
    sign_up,
    signed_up,
    wait_for_service_worker,
    wait_until,
)
from tests.fake_upstream import FakeUpstream
from tests.processes import Server

PASSWORD = "a long password"

MARKDOWN_ANSWER = """Answer {n}: some **bold** text and a [link](https://example.com/docs).

| Language | Typing |
|---|---|
| Python | dynamic |
| Rust | static |

- first
- second

```python
def double(x):
    return 2 * x
```

Hostile: <script>window.pwned = "script"</script> <img src=x onerror="window.pwned = 'img'">
[do not click](javascript:window.pwned='link') <iframe src="about:blank"></iframe> <!-- a comment -->
"""


@pytest.fixture(scope="module")
def upstream() -> FakeUpstream:
    fake = FakeUpstream(delay=0.005, text=MARKDOWN_ANSWER)
    fake.start_in_thread()
    return fake


@pytest.fixture(scope="module")
def markdown_server(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("markdown")
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log", assistants=upstream.config())
    server.start()
    yield server
    server.stop()


def test_markdown_and_code_render_and_nothing_hostile_runs(contexts: Contexts, markdown_server: Server) -> None:
    page = signed_up(contexts, markdown_server, permissions=["clipboard-read", "clipboard-write"])
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    send(page, "Show me *everything*", assistant="fake")
    reply = page.locator(".message.assistant.completed")
    expect(reply).to_have_count(1, timeout=30_000)

    expect(page.locator(".message.user em")).to_have_text("everything")  # a user's Markdown too
    expect(reply.locator("strong")).to_have_text("bold")
    expect(reply.locator("table th")).to_have_text(["Language", "Typing"])
    expect(reply.locator("ul > li")).to_have_text(["first", "second"])
    code = reply.locator("pre code")
    expect(code.locator("span.k").first).to_have_text("def")  # highlighted by Pygments
    expect(reply.locator(".code .lang")).to_have_text("python")
    link = reply.get_by_role("link", name="link")
    expect(link).to_have_attribute("href", "https://example.com/docs")
    expect(link).to_have_attribute("rel", "noopener noreferrer")

    # The hostile parts are text: no element, no script run, no link to follow.
    messages = page.locator("#messages")
    for tag in ("script", "img", "iframe"):
        expect(messages.locator(tag)).to_have_count(0)
    expect(messages.locator("a[href^='javascript']")).to_have_count(0)
    expect(reply).to_contain_text("<script>window.pwned")
    comments = page.evaluate(
        "(() => { const w = document.createTreeWalker(document.getElementById('messages'), NodeFilter.SHOW_COMMENT);"
        " let n = 0; while (w.nextNode()) n++; return n; })()"
    )
    before = page.url
    reply.get_by_text("[do not click](javascript:").click()

    # Copy: the code of a block; a whole message as its Markdown.
    reply.locator(".code").get_by_role("button", name="Copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == "def double(x):\n    return 2 * x\n"
    reply.get_by_role("button", name="Copy", exact=True).last.click()
    assert page.evaluate("navigator.clipboard.readText()").startswith("Answer 1: some **bold** text")
    # The clicks after it have been handled: a link followed on that click would have been by now.
    assert comments == 0 and page.url == before
    assert page.evaluate("window.pwned") is None and dialogs == []
    page.context.close()


# Records the message items taken off the list and not back by the end of the same batch of DOM
# changes (so off the screen at the next frame).
VANISHED = """() => {
  window.vanished = [];
  new MutationObserver((records) => {
    for (const record of records) {
      for (const node of record.removedNodes) if (node.id && !document.getElementById(node.id)) window.vanished.push(node.id);
    }
  }).observe(document.getElementById("messages"), { childList: true });
}"""


def test_nodes_stay_while_the_chat_changes_and_the_view_follows_like_a_chat(contexts: Contexts, server: Server) -> None:
    slow = FakeUpstream(delay=0.03, words=400)
    slow.start_in_thread()
    data_server = Server(server.database_url.replace("chat.db", f"follow-{uuid.uuid4().hex[:6]}.db"),
                         server.log, assistants=slow.config())  # fmt: skip
    data_server.start()
    try:
        page = contexts.new(data_server.url, viewport={"width": 1000, "height": 700}).new_page()
        deltas = {"count": 0}
        page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: deltas.update(
            count=deltas["count"] + ('"type":"delta"' in str(frame).replace(" ", "")))))
        sign_up(page)

        def wait_for_deltas(count: int, at_the_bottom: bool = False) -> None:
            def arrived() -> bool:
                assert not at_the_bottom or at_bottom(page), "a reader at the bottom stays at the bottom"
                return deltas["count"] >= count

            wait_until(page, arrived, lambda: f"{deltas['count']} deltas arrived, not {count}")

        # A message sent is drawn by the page at once, and Python's drawing of it, a frame or two
        # later, morphs that node: it is never off the screen in between (each mutation's batch
        # is looked at before the next frame is drawn).
        page.evaluate(VANISHED)
        for i in range(12):
            send(page, f"Message {i}\n\nwith a second paragraph, to take some room on the screen.")
        expect(page.locator(".message.user")).to_have_count(12)
        first = page.locator(".message.user").first.element_handle()
        assert at_bottom(page)  # a chat is read from its latest message

        send(page, "One more")
        expect(page.locator(".message.user")).to_have_count(13)
        expect(page.locator("[data-sending]")).to_have_count(0)  # (all drawn by Python)
        assert first.evaluate("node => node.isConnected && document.getElementById(node.id) === node")
        assert page.evaluate("window.vanished") == []

        send(page, "A long answer, please", assistant="fake")
        streaming = page.locator(".message.assistant.streaming")
        expect(streaming).to_have_count(1, timeout=20_000)
        wait_for_deltas(50, at_the_bottom=True)
        reply = streaming.element_handle()
        assert first.evaluate("node => node.isConnected && document.getElementById(node.id) === node")
        assert reply.evaluate("node => node.isConnected")

        # The reader scrolls up: nothing moves while the answer grows; Jump to latest brings them back.
        page.mouse.move(500, 300)
        page.mouse.wheel(0, -1500)
        expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()
        seen = page.locator(".message.user").nth(10)
        top = seen.bounding_box()
        wait_for_deltas(deltas["count"] + 20)
        assert seen.bounding_box() == top and not at_bottom(page)
        page.get_by_role("button", name="Jump to latest").click()
        assert at_bottom(page)
        expect(page.get_by_role("button", name="Jump to latest")).to_be_hidden()
        wait_for_deltas(deltas["count"] + 10, at_the_bottom=True)  # and it follows again as the answer grows
        assert reply.evaluate("node => node.isConnected && document.getElementById(node.id) === node")
        page.context.close()
    finally:
        data_server.stop()


def test_branches_regenerate_switch_survive_a_reload_offline_and_edits_branch(
    contexts: Contexts, markdown_server: Server, upstream: FakeUpstream
) -> None:
    page = signed_up(contexts, markdown_server)
    wait_for_service_worker(page)
    reply = page.locator(".message.assistant")

    def answered(n: int) -> None:
        expect(reply.filter(has_text=f"Answer {n}:")).to_have_count(1, timeout=30_000)
        expect(page.locator(".message.assistant.completed")).to_have_count(page.locator(".message.assistant").count())

    # (Counted before the send: read after it, the answer may have been asked for already, as it
    # was once with the machine loaded, and the number expected is one too many.)
    first = upstream.calls + 1
    send(page, "Question one", assistant="fake")
    answered(first)
    # Regenerate (from the keyboard): a second answer beside the first, shown.
    page.get_by_role("button", name="Regenerate").focus()
    page.keyboard.press("Enter")
    answered(first + 1)
    expect(reply).to_have_count(1)
    expect(reply.locator(".count")).to_have_text("2 / 2")
    page.get_by_role("button", name="Previous branch").click()
    expect(reply.locator(".count")).to_have_text("1 / 2")
    expect(reply).to_contain_text(f"Answer {first}:")

    # The branch shown is kept on the device: reloaded offline, the same one.
    page.context.set_offline(True)
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(reply.locator(".count")).to_have_text("1 / 2")
    expect(reply).to_contain_text(f"Answer {first}:")
    page.context.set_offline(False)
    expect(page.locator("#status")).to_have_text("Online", timeout=20_000)

    # The next question follows the branch shown, and the model is sent that path only.
    send(page, "Question two", assistant="fake")
    answered(first + 2)
    sent = [(m["role"], m["content"].split(":")[0]) for m in upstream.requests[-1]["messages"]]
    assert sent == [("user", "Question one"), ("assistant", f"Answer {first}"), ("user", "Question two")]

    # Editing an answered question: a new question beside it, asked again; the old one stays.
    page.locator(".message.user", has_text="Question two").get_by_role("button", name="Edit").click()
    expect(page.locator("#composer-note")).to_contain_text("new branch")
    expect(page.get_by_role("textbox", name="Message")).to_have_value("Question two")
    page.get_by_role("textbox", name="Message").fill("Question two, better")
    page.get_by_role("textbox", name="Message").press("Enter")
    answered(first + 3)
    question = page.locator(".message.user").last
    expect(question).to_contain_text("Question two, better")
    expect(question.locator(".count")).to_have_text("2 / 2")
    sent = [(m["role"], m["content"].split(":")[0]) for m in upstream.requests[-1]["messages"]]
    assert sent == [("user", "Question one"), ("assistant", f"Answer {first}"), ("user", "Question two, better")]
    question.get_by_role("button", name="Previous branch").click()
    expect(page.locator(".message.user").last.locator(".content")).to_have_text("Question two")
    expect(reply.last).to_contain_text(f"Answer {first + 2}:")
    page.context.close()


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Refuses messages over 60 characters; its demo model takes a few seconds over an answer."""
    data = tmp_path_factory.mktemp("strict")
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log", max_content_chars="60",
                    demo_seconds_per_word="0.1")  # fmt: skip
    server.start()
    yield server
    server.stop()


def test_a_refused_message_stays_with_its_reason_until_resent_or_discarded(contexts: Contexts, strict_server: Server) -> None:
    page = signed_up(contexts, strict_server)
    too_long = "This question is much longer than the sixty characters this server takes."
    send(page, too_long, assistant="demo")
    refused = page.locator(".message[data-state=rejected]")
    expect(refused).to_have_count(1, timeout=20_000)
    expect(refused).to_contain_text(too_long)
    expect(refused).to_contain_text("Not accepted: the message is longer than 60 characters")
    refused.get_by_role("button", name="Edit and resend").click()
    box = page.get_by_role("textbox", name="Message")
    expect(box).to_have_value(too_long)
    box.fill("A short question.")
    box.press("Enter")
    expect(refused).to_have_count(0)
    delivered = page.locator(".message.user", has_text="A short question.")
    expect(delivered).not_to_contain_class("pending", timeout=20_000)
    expect(page.locator(".message.assistant")).to_have_count(1)  # asked of the same assistant

    send(page, too_long + " Again.")
    expect(refused).to_have_count(1, timeout=20_000)
    refused.get_by_role("button", name="Discard").click()
    expect(refused).to_have_count(0)
    expect(page.locator(".message.user")).to_have_count(1)
    page.context.close()


def test_stop_retry_edit_delete_and_copy_in_the_browser(contexts: Contexts, strict_server: Server) -> None:
    page = signed_up(contexts, strict_server, permissions=["clipboard-read", "clipboard-write"])
    send(page, "Tell me a story", assistant="demo")
    reply = page.locator(".message.assistant")
    expect(reply.locator(".content")).not_to_have_text("", timeout=20_000)
    reply.get_by_role("button", name="Stop").click()
    expect(reply).to_have_attribute("data-state", "cancelled", timeout=20_000)
    expect(reply).to_contain_text("Stopped.")
    reply.get_by_role("button", name="Retry").click()
    expect(reply.locator(".count")).to_have_text("2 / 2", timeout=20_000)
    expect(reply).to_have_attribute("data-state", "completed", timeout=60_000)

    question = page.locator(".message.user")
    question.get_by_role("button", name="Copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == "Tell me a story"

    send(page, "a typo here")
    typo = page.locator(".message.user", has_text="a typo here")
    expect(typo).not_to_contain_class("pending", timeout=20_000)
    typo.get_by_role("button", name="Edit").click()
    expect(page.locator("#composer-note")).to_contain_text("Send saves the change")  # no answer: in place
    page.get_by_role("textbox", name="Message").fill("no typo here")
    page.get_by_role("textbox", name="Message").press("Enter")
    expect(page.locator(".message.user").last.locator(".content")).to_have_text("no typo here")
    page.locator(".message.user").last.get_by_role("button", name="Delete").click()
    expect(page.locator(".message.user")).to_have_count(1)
    page.context.close()


def test_text_typed_while_the_assistants_arrive_stays_in_the_composer(contexts: Contexts, server: Server) -> None:
    context = contexts.new(server.url)
    page = context.new_page()
    held: list[Route] = []
    page.route("**/assistants", lambda route: held.append(route))
    open_app(page)
    sign(page, f"t{uuid.uuid4().hex[:10]}", PASSWORD, signup=True)
    box = page.get_by_role("textbox", name="Message")
    box.fill("typed right after signing in")
    wait_until(page, lambda: held, "the app asks the server for its assistants", timeout=10)
    listed = [{"id": "demo", "name": "Demo", "kind": "remote", "model": "demo"},
              {"id": "big", "name": "A big model", "kind": "remote", "model": "big"}]  # fmt: skip
    page.wait_for_function(  # what was typed is saved (the draft of no chat yet)
        "() => pyodide.runPython(\"chat_client.store.draft('')\") === 'typed right after signing in'")
    # The last keys, their save still under way as the list arrives; "right" selected.
    box.evaluate("box => { box.value += ', and more'; box.setSelectionRange(6, 11); }")
    for route in held:
        route.fulfill(json=listed)
    expect(page.locator("select[name=assistant] option[value=big]")).to_have_text("A big model")
    expect(box).to_have_value("typed right after signing in, and more")
    expect(box).to_be_focused()
    assert box.evaluate("box => [box.selectionStart, box.selectionEnd]") == [6, 11]
    context.close()
