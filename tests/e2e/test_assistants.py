"""A remote assistant's answer survives the network: the built-in demo model streams, the page's
connection is cut mid-answer (its WebSocket closed; the page reloaded offline), and the answer
appears in full, exactly once, here and on a second device. A question asked offline is answered
once the browser is back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, WebSocketRoute, expect

from shared.assistants import demo_answer
from tests.e2e.contexts import Contexts
from tests.e2e.pages import (
    BOOT_TIMEOUT,
    api,
    open_app,
    send,
    sign,
    wait_for_service_worker,
    wait_until,
)
from tests.fake_upstream import FakeUpstream, full_answer
from tests.processes import Server

PASSWORD = "a long password"


@pytest.fixture(scope="module")
def slow_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose demo model takes about 4 s over an answer: time to cut the network."""
    data = tmp_path_factory.mktemp("assistants")
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log", demo_seconds_per_word="0.05")
    server.start()
    yield server
    server.stop()


def expect_replies(page: Page, texts: list[str]) -> None:
    """Exactly these assistant replies, in this order, each complete."""
    expect(page.locator(".message.assistant .content")).to_have_text(texts, timeout=30_000)
    expect(page.locator(".message.assistant.completed")).to_have_count(len(texts))


def test_an_answer_cut_off_by_the_network_arrives_in_full_once(contexts: Contexts, slow_demo: Server, load: str) -> None:
    username = f"ask{uuid.uuid4().hex[:8]}"
    devices = [contexts.new(slow_demo.url) for _ in range(2)]
    a, b = (c.new_page() for c in devices)
    sockets: list[WebSocketRoute] = []
    cut = {"on": False, "refused": 0}

    def proxy(ws: WebSocketRoute) -> None:  # the page's live sockets go through the test
        if cut["on"]:
            cut["refused"] += 1
            ws.close(code=4000, reason="network gone")
            return
        ws.connect_to_server()
        sockets.append(ws)

    a.route_web_socket("**/sync/live*", proxy)
    open_app(a)
    sign(a, username, PASSWORD, signup=True)
    wait_for_service_worker(a)
    a.click("[data-action=new-chat]")
    open_app(b)
    sign(b, username, PASSWORD, signup=False)
    expected = demo_answer("What is new?", 1)

    # 1. The WebSocket is cut while the answer streams, and comes back.
    send(a, "What is new?", assistant="demo")
    streaming = a.locator(".message.assistant.streaming .content")
    expect(streaming).not_to_have_text("", timeout=20_000)
    cut["on"] = True
    for ws in sockets:
        ws.close(code=4000, reason="network gone")
    assert a.locator(".message.assistant.completed").count() == 0  # it was cut mid-answer
    wait_until(a, lambda: cut["refused"] >= 1, "the page never tried to reconnect", timeout=20)  # (and was refused)
    cut["on"] = False
    expect_replies(a, [expected])  # in full, once
    expect_replies(b, [expected])

    # 2. The page is reloaded offline mid-answer; back online, the answer is there in full.
    send(a, "And now?", assistant="demo")
    expect(a.locator(".message.assistant.streaming .content")).not_to_have_text("", timeout=20_000)
    devices[0].set_offline(True)
    cut["on"] = True
    for ws in sockets:
        ws.close(code=4000, reason="network gone")
    a.reload()
    a.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(a.locator(".message.assistant")).to_have_count(2)  # the second still as far as it got
    devices[0].set_offline(False)
    cut["on"] = False
    second = demo_answer("And now?", 2)
    expect_replies(a, [expected, second])
    expect_replies(b, [expected, second])

    # 3. Asked offline: the question and its request wait in the outbox, and run once back.
    devices[0].set_offline(True)
    cut["on"] = True
    for ws in sockets:
        ws.close(code=4000, reason="network gone")
    send(a, "Asked offline", assistant="demo")
    expect(a.locator(".message.assistant.queued.pending")).to_have_count(1)
    devices[0].set_offline(False)
    cut["on"] = False
    third = demo_answer("Asked offline", 3)
    expect_replies(a, [expected, second, third])
    token = api(slow_demo.url, "POST", "/auth/login", {"username": username, "password": PASSWORD})["token"]
    messages = api(slow_demo.url, "GET", "/sync/state", token=token)["snapshot"]["messages"]
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    assert sorted(answers) == sorted([expected, second, third])  # each asked once, answered once
    for context in devices:
        context.close()


def test_the_local_assistant_answers_with_a_tool_while_offline(contexts: Contexts, server: Server) -> None:
    context = contexts.new(server.url)
    page = context.new_page()
    page.route_web_socket("**/sync/live*", lambda ws: ws.close(code=4000, reason="no socket in this test"))
    open_app(page)
    sign(page, f"tools{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    wait_for_service_worker(page)
    page.click("[data-action=new-chat]")
    context.set_offline(True)
    send(page, "python: print(sum(range(10)))", assistant="local-tools")  # Python, run in Pyodide
    expect(page.locator(".message.tool_call .content")).to_have_text("Calls the python: print(sum(range(10)))")
    expect(page.locator(".message.tool_result .content")).to_have_text("45", timeout=30_000)  # a worker starts
    expect(page.locator(".message.assistant .content p")).to_have_text("I ran it. Output:")
    expect(page.locator(".message.assistant .content pre")).to_have_text("45")  # shown as it is
    expect(page.locator(".message.pending")).to_have_count(4)  # saved here, waiting for the network
    send(page, "2^8 + 1", assistant="local-tools")
    expect(page.locator(".message.assistant .content").last).to_have_text("2^8 + 1 = 257")
    # A snippet that never ends is stopped (its worker ended), the page goes on, the next one runs.
    stopped = page.evaluate("chatHost.runPython('while True: pass', 2).then(() => 'finished', (e) => e.message)")
    assert stopped == "stopped after 2 s without finishing"
    # The next one starts a worker afresh: its start is not counted in the snippet's time (a
    # loaded machine's start took over 20 s, and a first snippet was stopped for it).
    output, took = page.evaluate(
        "(async () => { const t = performance.now(); return [await chatHost.runPython('print(6 * 7)', 0.3), performance.now() - t]; })()"
    )
    assert output == "42" and took > 300, took  # (stopped after 0.3 s, had the start counted)
    failing = page.evaluate("chatHost.runPython('1 / 0', 30).then(() => 'finished', (e) => e.message)")
    assert failing == "ZeroDivisionError: division by zero"

    context.set_offline(False)
    expect(page.locator(".message.pending")).to_have_count(0, timeout=20_000)
    token = api(server.url, "POST", "/auth/login", {"username": page.locator(".who").inner_text().split(" ")[0],
                                                    "password": PASSWORD})["token"]
    stored = api(server.url, "GET", "/sync/state", token=token)["snapshot"]["messages"]
    assert sorted(m["role"] for m in stored) == sorted(["user", "tool_call", "tool_result", "assistant"] * 2)
    context.close()


def test_a_model_on_this_device_streams_into_the_chat(contexts: Contexts, server: Server) -> None:
    upstream = FakeUpstream(delay=0.05, words=40)
    upstream.start_in_thread()
    context = contexts.new(server.url)
    page = context.new_page()
    open_app(page)
    sign(page, f"device{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    page.click("[data-action=new-chat]")
    page.get_by_text("Model on this device").click()
    page.get_by_role("textbox", name="Base URL").fill(upstream.base_url)
    page.get_by_role("textbox", name="Model", exact=True).fill("fake-1")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("select[name=assistant] option[value=on-device]")).to_have_text("On this device: fake-1")

    send(page, "Hello, model", assistant="on-device")  # fetched from the page, streamed
    expect(page.locator(".message.assistant.streaming .content")).not_to_have_text("", timeout=10_000)
    expect(page.locator(".message.assistant.completed .content")).to_have_text(full_answer(40), timeout=20_000)
    assert upstream.requests[0]["messages"] == [{"role": "user", "content": "Hello, model"}]
    expect(page.locator(".message.pending")).to_have_count(0, timeout=20_000)  # and sent like any message

    # A text file goes to it as text with its name, as the server's runs send it (shared/prompt.py).
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files({"name": "notes.md", "mimeType": "text/markdown", "buffer": b"# Notes\nthe password is swordfish\n"})
    expect(page.get_by_role("button", name="Remove notes.md")).to_be_visible()
    send(page, "What is in my notes?", assistant="on-device")
    expect(page.locator(".message.assistant.completed")).to_have_count(2, timeout=20_000)
    asked = upstream.requests[1]["messages"][-1]
    assert asked["role"] == "user" and asked["content"].startswith("What is in my notes?")
    assert 'The attached file "notes.md":\n```\n# Notes\nthe password is swordfish\n\n```' in asked["content"]
    context.close()


def test_the_assistant_chosen_stays_chosen_after_sending(contexts: Contexts, server: Server) -> None:
    context = contexts.new(server.url)
    page = context.new_page()
    open_app(page)
    sign(page, f"choice{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    page.click("[data-action=new-chat]")
    send(page, "1 + 1", assistant="local-tools")
    expect(page.locator(".message.assistant .content")).to_have_text("1 + 1 = 2")
    expect(page.locator("textarea[name=text]")).to_have_value("")
    expect(page.locator("select[name=assistant]")).to_have_value("local-tools")
    page.reload()
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(page.locator("select[name=assistant]")).to_have_value("local-tools")
    context.close()
