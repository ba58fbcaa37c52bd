"""What a person does with instructions, presets, Continue and queued follow-ups, through the client
(webapp/app.py, webapp/steering.py, webapp/chats.py, webapp/pane.py) under CPython on an in-memory
page, offline (every change waits in the outbox, as the events the server takes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from shared.assistants import DEFAULT_SAMPLING, Piece, Sampling, Turn, Usage
from shared.continuation import GO_ON
from shared.followups import MAX_QUEUED
from shared.models import EventType, Message, Preset, QueuedSend, RunContinue, RunRequest
from tests.webapp.test_client import EchoModel, signed_in
from webapp.app import Client
from webapp.assistants import DEVICE_MODEL_ID, LOCAL_TOOLS_ID


def sent(client: Client, kind: EventType) -> list[object]:
    return [p.event.payload for p in client.store.outbox() if p.event.type is kind]


async def a_preset(client: Client, **fields: str) -> Preset:
    if not any(p.name == "New preset" for p in client.store.presets()):
        await client.dispatch("new-preset", {})
    made = next(p for p in client.store.presets() if p.name == "New preset")
    await client.dispatch("save-preset", {"id": made.id, "name": "Terse", "presetAssistant": "", "instructions": "Be terse.",
                                          "temperature": "", "maxTokens": "", **fields})  # fmt: skip
    preset = client.store.preset(made.id)
    assert preset is not None
    return preset


async def test_settings_save_instructions_and_presets_as_events(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    assert 'data-action="open-settings"' in page.regions["root"] and '<dialog class="settings-dialog" id="settings"' in page.regions["root"]
    await client.dispatch("open-settings", {})
    assert page.dialog == "settings"
    body = page.regions["settings-body"]
    assert 'for="custom-instructions">Custom instructions</label>' in body and 'maxlength="4000"' in body and "0 / 4,000" in body
    await client.dispatch("save-instructions", {"instructions": "Answer in French."})
    assert len(sent(client, EventType.SETTINGS_UPDATED)) == 1
    assert client.store.settings() is not None and client.store.settings().instructions == "Answer in French."  # type: ignore[union-attr]
    assert "17 / 4,000" in page.regions["settings-body"] and "Custom instructions saved." in page.regions["settings-body"]
    await client.dispatch("save-instructions", {"instructions": "x" * 4001})  # (the field's maxlength stops it first)
    assert "at most 4,000 characters" in page.regions["settings-body"]

    await client.dispatch("new-preset", {})
    assert 'aria-label="Preset New preset"' in page.regions["settings-body"] and page.focused.endswith("input[name=name]")
    preset = await a_preset(client, temperature="0.3", maxTokens="120", default="on")
    assert (preset.name, preset.instructions, preset.temperature, preset.max_tokens) == ("Terse", "Be terse.", 0.3, 120)
    assert client.store.settings().default_preset_id == preset.id  # type: ignore[union-attr]
    assert 'name="default" checked' in page.regions["settings-body"]
    # Presets are chosen beside Send, under the assistants.
    assert f'<optgroup label="Presets"><option value="preset:{preset.id}">Terse</option></optgroup>' in page.regions["assistant-choice"]
    await client.dispatch("save-preset", {"id": preset.id, "name": "Terse", "temperature": "7"})
    assert "Not saved: the temperature" in page.regions["settings-body"]
    await client.dispatch("save-preset", {"id": preset.id, "name": "Very terse", "instructions": "Be terse.", "temperature": "0.3",
                                          "maxTokens": "120", "default": "on"})  # fmt: skip
    assert [p.name for p in client.store.presets()] == ["Very terse"] and 'aria-label="Preset Very terse"' in page.regions["settings-body"]
    await client.dispatch("delete-preset", {"id": preset.id})
    assert client.store.presets() == [] and client.store.settings().default_preset_id is None  # type: ignore[union-attr]
    assert "Presets" not in page.regions["assistant-choice"]
    # Offline, all of it waits in the outbox (coalesced: a preset made and deleted unsent is nothing).
    assert [p.event.type for p in client.store.outbox() if p.event.type.startswith(("Settings", "Preset"))] == ["SettingsUpdated"]


async def test_a_chat_s_instructions_and_preset_are_the_chat_s(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    chat = client.selected or ""
    await client.dispatch("chat-instructions", {"id": chat})
    assert 'aria-label="Chat instructions"' in page.regions["chat-head"] and page.focused == "#chat-instructions-text"
    await client.dispatch("save-chat-instructions", {"id": chat, "instructions": "We are planning a trip to Lyon."})
    assert client.store.chat(chat).instructions == "We are planning a trip to Lyon."  # type: ignore[union-attr]
    assert '<p class="chat-instructions"' in page.regions["chat-head"] and "Instructions: We are planning a trip to Lyon." in page.regions["chat-head"]
    await client.dispatch("chat-instructions", {"id": chat})
    await client.dispatch("cancel-chat-instructions", {})
    assert "Instructions: We are planning" in page.regions["chat-head"]
    await client.dispatch("save-chat-instructions", {"id": chat, "instructions": "  "})  # blank: none
    assert client.store.chat(chat).instructions is None and "chat-instructions" not in page.regions["chat-head"].replace(  # type: ignore[union-attr]
        'data-action="chat-instructions"', "")

    preset = await a_preset(client, default="on")
    await client.dispatch("choose-assistant", {"assistant": f"preset:{preset.id}"})
    assert client.store.chat(chat).preset_id == preset.id  # type: ignore[union-attr]
    assert f'<option value="preset:{preset.id}" selected>' in page.regions["assistant-choice"]
    await client.dispatch("new-chat", {})  # takes the default preset
    assert client.store.chat(client.selected or "").preset_id == preset.id  # type: ignore[union-attr]
    await client.dispatch("choose-assistant", {"assistant": "demo"})  # an assistant: the chat's preset goes
    assert client.store.chat(client.selected or "").preset_id is None  # type: ignore[union-attr]
    assert '<option value="demo" selected>' in page.regions["assistant-choice"]
    await client.dispatch("select-chat", {"id": chat})  # each chat shows its own
    assert f'<option value="preset:{preset.id}" selected>' in page.regions["assistant-choice"]
    # A preset's answer is asked of the server with the preset named (the server makes the system message).
    await client.dispatch("send", {"text": "hello", "assistant": f"preset:{preset.id}"})
    [request] = sent(client, EventType.ASSISTANT_RUN_REQUESTED)
    assert isinstance(request, RunRequest) and (request.assistant_id, request.preset_id, request.instructions) == ("demo", preset.id, None)


class CutModel:
    """A model on this device that writes ``words`` words a call (cut at ``max_tokens``, as a real
    one is), repeating its answer from the start when asked to go on (the repeat is trimmed)."""

    def __init__(self, words: int = 8) -> None:
        self.words = [f"w{i}" for i in range(words)]
        self.asked: list[tuple[list[Turn], Sampling]] = []

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        self.asked.append((turns, sampling))
        words = self.words if sampling.max_tokens is None else self.words[: sampling.max_tokens]
        for i, word in enumerate(words):
            yield Piece(text=word if i == 0 else " " + word)
        yield Piece(finish_reason="length" if len(words) < len(self.words) else "stop")
        yield Piece(usage=Usage(3, len(words)))


async def test_a_model_on_this_device_is_given_the_system_message_records_it_and_continues(tmp_path: Path) -> None:
    model = CutModel()
    client, page = await signed_in(tmp_path, model)  # type: ignore[arg-type]
    chat = client.selected or ""
    await client.dispatch("save-instructions", {"instructions": "Answer in French."})
    preset = await a_preset(client, maxTokens="3", temperature="0.5", presetAssistant=DEVICE_MODEL_ID)
    await client.dispatch("save-chat-instructions", {"id": chat, "instructions": "About Lyon."})
    await client.dispatch("send", {"text": "hello", "assistant": f"preset:{preset.id}"})
    system = "Answer in French.\n\nBe terse.\n\nAbout Lyon."
    turns, sampling = model.asked[0]
    assert turns[0] == Turn("system", system) and sampling == Sampling(0.5, 3)
    [reply] = [m for m in client.store.messages(chat) if m.role == "assistant"]
    assert (reply.content, reply.instructions, reply.preset_id, reply.finish_reason) == ("w0 w1 w2", system, preset.id, "length")
    assert reply.usage is not None and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 3)
    page.paint()
    html = page.item(reply.id)
    assert "Cut at the length limit." in html and 'data-action="continue-run"' in html and "3 + 3 tokens" in html
    assert ">Instructions used</button>" in html and 'aria-expanded="false"' in html and "About Lyon" not in html
    await client.dispatch("show-instructions", {"id": reply.id})
    assert 'aria-expanded="true"' in page.item(reply.id) and "Answer in French.\n\nBe terse.\n\nAbout Lyon.</pre>" in page.item(reply.id)

    # Continue: the same message, written on from where it ended, its text so far its start.
    await client.dispatch("save-preset", {"id": preset.id, "name": "Terse", "presetAssistant": DEVICE_MODEL_ID, "instructions": "Be terse."})
    await client.dispatch("continue-run", {"id": reply.id})
    turns, _ = model.asked[1]
    assert turns[0] == Turn("system", system) and turns[-2:] == [Turn("assistant", "w0 w1 w2"), Turn("user", GO_ON)]
    done = client.store.message(reply.id)
    assert done is not None and done.content == "w0 w1 w2 w3 w4 w5 w6 w7" and (done.status, done.finish_reason) == ("completed", "stop")
    assert done.usage is not None and done.usage.completion_tokens == 3 + 8  # (the cost added up)
    [reopen] = sent(client, EventType.ASSISTANT_RUN_CONTINUED)
    assert isinstance(reopen, RunContinue) and reopen.message_id == reply.id

    # Regenerate: the same instructions, whatever the settings say now.
    await client.dispatch("save-instructions", {"instructions": "Changed since."})
    await client.dispatch("regenerate", {"id": reply.id})
    assert model.asked[2][0][0] == Turn("system", system)
    # An answer with none of them set is given no system message.
    await client.dispatch("save-instructions", {"instructions": ""})
    await client.dispatch("save-chat-instructions", {"id": chat, "instructions": ""})
    await client.dispatch("send", {"text": "plain", "assistant": DEVICE_MODEL_ID})
    assert model.asked[-1][0][0].role == "user"


async def test_a_stopped_answer_of_the_server_offers_continue(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "hello", "assistant": "demo"})
    [request] = sent(client, EventType.ASSISTANT_RUN_REQUESTED)
    assert isinstance(request, RunRequest)
    await client.dispatch("stop-run", {"id": request.message_id})
    page.paint()
    html = page.item(request.message_id)
    assert "Stopped." in html and ">Continue<" in html and ">Retry<" in html
    await client.dispatch("continue-run", {"id": request.message_id})
    [go_on] = sent(client, EventType.ASSISTANT_RUN_CONTINUED)
    assert isinstance(go_on, RunContinue) and (go_on.message_id, go_on.assistant_id) == (request.message_id, "demo")
    reopened = client.store.message(request.message_id)
    page.paint()
    assert reopened is not None and reopened.status == "queued" and ">Stop<" in page.item(request.message_id)


async def test_sending_during_an_answer_queues_in_order_and_a_stop_pauses_the_queue(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    chat = client.selected or ""
    await client.dispatch("send", {"text": "first", "assistant": "demo"})
    [request] = sent(client, EventType.ASSISTANT_RUN_REQUESTED)
    assert isinstance(request, RunRequest)
    for i in range(MAX_QUEUED):
        await client.dispatch("send", {"text": f"then {i}", "assistant": "demo"})
    queued = client.store.queued(chat)
    assert [m.content for m in queued] == [f"then {i}" for i in range(MAX_QUEUED)]
    assert all((m.status, m.assistant_id) == ("queued", "demo") for m in queued)
    assert len(sent(client, EventType.ASSISTANT_RUN_REQUESTED)) == 1  # (asked when they are sent)
    page.paint()
    keys = list(page.items)
    assert keys[-MAX_QUEUED:] == [f"m-{m.id}" for m in queued]  # under the answer, in order
    first = page.item(queued[0].id)
    assert "Queued: sent when the answer ends · Saved on this device, not sent yet" in first and ">Edit<" in first and ">Remove<" in first
    await client.dispatch("send", {"text": "one too many", "assistant": "demo"})
    assert len(client.store.queued(chat)) == MAX_QUEUED and (chat, "one too many") in page.put_backs
    assert f"at most {MAX_QUEUED} queued messages" in page.regions["composer-files"]

    # Edit and Remove, while queued.
    await client.dispatch("edit-message", {"id": queued[1].id})
    await client.dispatch("send", {"text": "then 1, edited"})
    await client.dispatch("remove-message", {"id": queued[2].id})
    assert [m.content for m in client.store.queued(chat)][:3] == ["then 0", "then 1, edited", "then 3"]

    # Stop: the queue waits, and says so.
    await client.dispatch("stop-run", {"id": request.message_id})
    page.paint()
    bar = page.items["queue"]
    assert f"{MAX_QUEUED - 1} queued — " in bar and ">Send now<" in bar and ">Clear<" in bar
    assert "Queued: waiting" in page.item(queued[0].id)
    await client.dispatch("send-queued-now", {})
    [send] = sent(client, EventType.QUEUED_MESSAGE_SENT)
    assert isinstance(send, QueuedSend) and (send.message_id, send.parent_id, send.assistant_id) == (queued[0].id, request.message_id, "demo")
    page.paint()
    assert send.run_id is not None and "queue" not in page.items  # (an answer is being written again)
    assert [step.id for step in client.store.shown_path(chat)][-2:] == [queued[0].id, send.reply_id]
    await client.dispatch("stop-run", {"id": send.reply_id})
    await client.dispatch("clear-queue", {})
    page.paint()
    assert client.store.queued(chat) == [] and "queue" not in page.items


class HeldModel(EchoModel):
    """A model on this device whose first answer waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        if not self.asked:
            await self.release.wait()
        async for piece in super().stream(turns, sampling):
            yield piece


async def test_follow_ups_for_assistants_on_this_device_are_sent_here_in_order(tmp_path: Path) -> None:
    model = HeldModel()
    client, page = await signed_in(tmp_path, model)
    chat = client.selected or ""
    answering = asyncio.ensure_future(client.dispatch("send", {"text": "slow one", "assistant": DEVICE_MODEL_ID}))
    for _ in range(50):
        await asyncio.sleep(0)
    assert chat in client.store.running()
    await client.dispatch("send", {"text": "2 + 3", "assistant": LOCAL_TOOLS_ID})
    await client.dispatch("send", {"text": "and again", "assistant": DEVICE_MODEL_ID})
    assert [m.content for m in client.store.queued(chat)] == ["2 + 3", "and again"]
    model.release.set()
    await answering
    for _ in range(200):
        if not client.store.queued(chat) and chat not in client.store.running():
            break
        await asyncio.sleep(0.01)
    path = client.store.messages_by_id([s.id for s in client.store.shown_path(chat)])
    said = [(m.role, m.content) for m in (path[s.id] for s in client.store.shown_path(chat))]
    assert said[0] == ("user", "slow one") and said[1][0] == "assistant"
    assert [c for r, c in said if r == "user"] == ["slow one", "2 + 3", "and again"]  # in order, each answered
    assert said[-1] == ("assistant", "answer 2") and any(c == "`2 + 3` = 5" for _, c in said)
    sends = sent(client, EventType.QUEUED_MESSAGE_SENT)
    assert all(isinstance(s, QueuedSend) and s.run_id is None for s in sends) and len(sends) == 2  # (answered here)
    assert all(isinstance(m, Message) for m in path.values())


def test_what_an_answer_cost_is_read_from_its_final_event() -> None:
    from shared.models import TokenUsage
    from webapp.message_html import Item, message_item

    reply = Message(id="018bcfe5-6805-7309-844b-27a808c594fc", chat_id="018bcfe5-6805-7309-844b-27a808c594fd", role="assistant",
                    content="Some words", status="completed", assistant_id="fake", created_at="2026-11-30T12:00:00.000Z",
                    finish_reason="stop", usage=TokenUsage(prompt_tokens=12, completion_tokens=2))  # fmt: skip
    assert "12 + 2 tokens" in message_item(Item(reply))
    estimated = reply.model_copy(update={"usage": TokenUsage(prompt_tokens=12, completion_tokens=2, estimated=True)})
    assert "about 12 + 2 tokens (estimated)" in message_item(Item(estimated))
    stopped = reply.model_copy(update={"status": "cancelled", "finish_reason": "cancelled", "usage": TokenUsage(prompt_tokens=0, completion_tokens=2)})
    assert "about 2 tokens (counted: the service did not say)" in message_item(Item(stopped))
    assert "Stopped." in message_item(Item(stopped)) and ">Continue<" in message_item(Item(stopped))


async def test_a_preset_deleted_elsewhere_is_never_remembered_as_an_assistant(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    await client.dispatch("choose-assistant", {"assistant": "preset:018bcfe5-6805-7309-844b-27a808c594fc"})  # (gone)
    assert client.store.setting("assistant") is None or not str(client.store.setting("assistant")).startswith("preset:")
    assert "preset:" not in page.regions["assistant-choice"]


async def test_the_rows_read_for_the_queue_s_state_decide_it_as_the_whole_chat_does(tmp_path: Path) -> None:
    from shared.followups import queue_state

    client, _ = await signed_in(tmp_path)
    chat = client.selected or ""
    states = []
    await client.dispatch("send", {"text": "first", "assistant": "demo"})
    [request] = sent(client, EventType.ASSISTANT_RUN_REQUESTED)
    assert isinstance(request, RunRequest)
    for step in ("queue", "stop", "now", "stop again", "clear"):
        if step == "queue":
            await client.dispatch("send", {"text": "a", "assistant": "demo"})
            await client.dispatch("send", {"text": "b", "assistant": ""})
        elif step == "stop":
            await client.dispatch("stop-run", {"id": request.message_id})
        elif step == "now":
            await client.dispatch("send-queued-now", {})
        elif step == "stop again":
            [send] = sent(client, EventType.QUEUED_MESSAGE_SENT)
            assert isinstance(send, QueuedSend)
            await client.dispatch("stop-run", {"id": send.reply_id})
        else:
            await client.dispatch("clear-queue", {})
        whole, read = queue_state(client.store.messages(chat)), queue_state(client.store.queue_rows(chat))
        states.append(read)
        assert whole == read, step
    assert states == ["answering", "paused", "answering", "paused", "empty"]
