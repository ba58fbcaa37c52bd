"""Instructions, presets, Continue and follow-ups queued during an answer, in Chromium against the
real server and a fake OpenAI-compatible service (tests/fake_upstream.py): custom instructions set
on one device seen on another and in the next request; a preset chosen kept through a reload;
Continue after a Stop, after the browser was killed, and on a second device; three follow-ups
queued during an answer answered in order after the tab is closed, and shown on a device that
opens later."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Playwright, expect

from tests.e2e.contexts import Contexts
from tests.e2e.pages import BOOT_TIMEOUT, new_chat, open_app, send, sign
from tests.e2e.profiles import kill, reopened, signed_up_in_a_profile
from tests.fake_upstream import FakeUpstream, full_answer
from tests.processes import Server

PASSWORD = "a long password"
WORDS = 60  # an answer of the fake service: 60 words, about 3 s (time to press Stop, to kill the browser)


@pytest.fixture(scope="module")
def upstream() -> FakeUpstream:
    fake = FakeUpstream(delay=0.05, words=WORDS)
    fake.start_in_thread()
    return fake


@pytest.fixture(scope="module")
def steer_server(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("steering")
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log", assistants=upstream.config(), run_poll_seconds="0.2")
    server.start()
    yield server
    server.stop()


def device(contexts: Contexts, server: Server, username: str, signup: bool = False) -> Page:
    page = contexts.page(server.url)
    open_app(page)
    sign(page, username, PASSWORD, signup=signup)
    return page


def test_instructions_and_a_preset_reach_the_request_a_reload_and_another_device(
    contexts: Contexts, steer_server: Server, upstream: FakeUpstream
) -> None:
    username = f"st{uuid.uuid4().hex[:8]}"
    a = device(contexts, steer_server, username, signup=True)
    new_chat(a)
    a.get_by_role("button", name="Settings").click()
    dialog = a.get_by_role("dialog", name="Settings")
    field = dialog.get_by_role("textbox", name="Custom instructions")
    field.fill("Answer in French.")
    expect(dialog.get_by_text("17 / 4,000")).to_be_visible()  # (counted as it is typed)
    dialog.get_by_role("button", name="Save instructions").click()
    expect(dialog.get_by_role("status")).to_have_text("Custom instructions saved.")
    dialog.get_by_role("button", name="New preset").click()
    preset = dialog.get_by_role("form", name="Preset New preset")
    preset.get_by_role("textbox", name="Name").fill("Terse")
    preset.get_by_role("textbox", name="Instructions").fill("Be terse.")
    preset.get_by_role("spinbutton", name="Maximum answer length").fill("5")
    preset.get_by_role("button", name="Save preset").click()
    expect(dialog.get_by_role("form", name="Preset Terse")).to_be_visible()
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()

    # The chat keeps the preset chosen beside Send, through a reload.
    chooser = a.get_by_role("combobox", name="Answered by")
    chooser.select_option(label="Terse")
    # (Chosen, then durable: the chat's change is in memory at once, and in IndexedDB once its
    # flush resolves; a reload in between would find the choice before it.)
    a.wait_for_function(
        "() => pyodide.runPython('chat_client.store.chat(chat_client.selected).preset_id is not None and chat_client.store.all_durable()')"
    )
    a.reload()
    a.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(chooser.locator("option:checked")).to_have_text("Terse")

    # The next request carries every layer, in order, and the preset's length limit.
    asked = len(upstream.requests)
    box = a.get_by_role("textbox", name="Message")
    box.fill("Bonjour")
    box.press("Enter")
    reply = a.locator(".message.assistant").last
    expect(reply).to_have_attribute("data-state", "cut", timeout=30_000)
    request = upstream.requests[asked]
    assert request["messages"][0] == {"role": "system", "content": "Answer in French.\n\nBe terse."} and request["max_tokens"] == 5
    expect(reply.get_by_text("Cut at the length limit.")).to_be_visible()
    expect(reply.get_by_role("button", name="Continue")).to_be_visible()
    expect(reply.get_by_text("5 tokens")).to_be_visible()  # (the usage of its final event: "7 + 5 tokens")
    reply.get_by_role("button", name="Instructions used").click()
    expect(reply.get_by_text("Answer in French.")).to_be_visible()

    # Another device has them all: the settings, the preset, the chat's choice of it.
    b = device(contexts, steer_server, username)
    expect(b.get_by_role("combobox", name="Answered by").locator("option:checked")).to_have_text("Terse")
    b.get_by_role("button", name="Settings").click()
    expect(b.get_by_role("dialog", name="Settings").get_by_role("textbox", name="Custom instructions")).to_have_value("Answer in French.")
    b.context.close()
    a.context.close()


def test_continue_after_a_stop_after_a_kill_and_on_a_second_device(
    playwright: Playwright, contexts: Contexts, steer_server: Server, upstream: FakeUpstream, tmp_path: Path, load: str
) -> None:
    username = f"go{uuid.uuid4().hex[:8]}"
    profile = tmp_path / "profile"
    signed_up_in_a_profile(playwright, contexts, profile, steer_server, username)
    context, a = reopened(playwright, profile, steer_server)
    # The answer waits after its first word until it is stopped (a loaded run's Stop reached the
    # server once the 60 words, 3 s, had all gone: "Answer complete.").
    with upstream.held_from_thread():
        send(a, "Tell me everything", assistant="fake")
        reply = a.locator(".message.assistant").last
        expect(reply.locator(".content")).to_contain_text("word0", timeout=30_000)  # (some of it written)
        reply.get_by_role("button", name="Stop").click()
        expect(reply.get_by_text("Stopped.")).to_be_visible()
    expect(reply.locator(".content")).to_contain_text("word0")  # (what it had stays on screen)
    stopped = reply.locator(".content").inner_text()
    assert stopped and full_answer(WORDS).startswith(stopped) and stopped != full_answer(WORDS)
    reply.get_by_role("button", name="Continue").click()
    expect(reply).to_have_attribute("data-state", re.compile("queued|streaming"))
    kill(profile, context)  # the browser goes while the answer goes on: the server finishes it

    context, a = reopened(playwright, profile, steer_server)
    reply = a.locator(".message.assistant").last
    expect(reply).to_have_attribute("data-state", "completed", timeout=30_000)
    expect(reply.locator(".content")).to_have_text(full_answer(WORDS))  # the stopped text its start, byte for byte
    expect(a.locator(".message.assistant")).to_have_count(1)  # the same message

    # Stopped on one device (a follow-up queued meanwhile waits, and is cleared), continued from another.
    b = device(contexts, steer_server, username)
    with upstream.held_from_thread():  # (as above: the answer goes on once stopped)
        send(a, "And once more", assistant="fake")
        reply = a.locator(".message.assistant").last
        expect(reply.locator(".content")).to_contain_text("word0", timeout=30_000)
        send(a, "Then this", assistant="fake")
        expect(b.get_by_text("Queued: sent when the answer ends")).to_have_count(1)
        reply.get_by_role("button", name="Stop").click()
        on_b = b.locator(".message.assistant").last
        expect(on_b.get_by_text("Stopped.")).to_be_visible()
    expect(a.get_by_text("1 queued —")).to_be_visible()
    b.get_by_role("button", name="Clear").click()
    expect(a.get_by_text("Then this")).to_have_count(0)
    on_b.get_by_role("button", name="Continue").click()
    for page in (a, b):
        expect(page.locator(".message.assistant").last).to_have_attribute("data-state", "completed", timeout=30_000)
        expect(page.locator(".message.assistant").last.locator(".content")).to_have_text(full_answer(WORDS))
    b.context.close()
    context.close()


def test_follow_ups_queued_during_an_answer_are_answered_in_order_after_the_tab_closes(
    contexts: Contexts, steer_server: Server, upstream: FakeUpstream, load: str
) -> None:
    username = f"q{uuid.uuid4().hex[:8]}"
    a = device(contexts, steer_server, username, signup=True)
    new_chat(a)
    asked = len(upstream.requests)
    with upstream.held_from_thread():  # (the first answer waits after its first word while the rest are queued)
        send(a, "First question", assistant="fake")
        expect(a.locator(".message.assistant").last).to_have_attribute("data-state", "streaming", timeout=30_000)
        box = a.get_by_role("textbox", name="Message")
        questions = ["Question one", "Question two", "Question three"]
        for text in questions:
            box.fill(text)
            box.press("Enter")
        queued = a.get_by_text("Queued: sent when the answer ends")
        expect(queued).to_have_count(3)
        expect(a.locator(".message.user").last.get_by_role("button", name="Edit")).to_be_visible()
        expect(a.locator(".message.user").last.get_by_role("button", name="Remove")).to_be_visible()
        expect(a.get_by_role("button", name=re.compile("unsent"))).to_have_count(0)  # all on the server
        a.context.close()  # nobody is there when the answer ends

    b = device(contexts, steer_server, username)  # a device that opens later
    expect(b.locator(".message.assistant[data-state=completed]")).to_have_count(4, timeout=60_000)
    expect(b.locator(".message.user .content")).to_have_text(["First question", *questions])
    expect(b.get_by_text("Queued: sent when the answer ends")).to_have_count(0)
    asked_about = [r["messages"][-1]["content"] for r in upstream.requests[asked:]]
    assert asked_about == ["First question", *questions]  # each once, in order
    b.context.close()
