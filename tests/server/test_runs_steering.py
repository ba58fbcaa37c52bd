"""What steers a server run (issue 21), in-process on both backends against the fake upstream:
the system message of the account's, the preset's and the chat's instructions (exactly what the
model is sent, and written on the answer), a preset's parameters, why an answer ended and what it
cost in its final event, Continue (prefill or a go-on turn, the text so far kept as the start),
and follow-ups queued while an answer is written, sent in order by the server alone, paused by a
Stop until Send now."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quart import Quart
from quart.typing import TestClientProtocol as Client

from server.app import create_app
from server.assistants import Assistant, AssistantConfig
from server.run_store import SqlRunStore
from server.runs import RunWorker
from shared.assistants import DEFAULT_SAMPLING, Piece, Sampling, Turn
from shared.continuation import GO_ON
from shared.followups import Sender, queue_state, send_next
from shared.ids import Uuid7Generator
from shared.models import (
    SETTINGS_ID,
    UNFINISHED,
    DeltaFrame,
    DomainEvent,
    EventType,
    Message,
    MessageRef,
    QueuedSend,
    RunCancel,
    format_time,
)
from tests.fake_upstream import FakeUpstream, full_answer
from tests.server.conftest import bearer, signup
from tests.server.events import T, event, message, new_id
from tests.server.stores import Clock, open_store
from tests.server.test_runs import (
    _asked_in,
    a_chat_with_a_question,
    log_of,
    post,
    reply,
    run_request,
    run_settings,
    until_idle,
    until_status,
)


def assistants(upstream: FakeUpstream) -> str:
    """Two assistants on the fake upstream: ``fake`` asks to go on with a user turn, ``fill``
    continues the answer given as the last assistant turn (prefill)."""
    entry = {"name": "Fake", "provider": "openai", "baseUrl": upstream.base_url, "model": "fake-1"}
    return json.dumps([{**entry, "id": "fake"}, {**entry, "id": "fill", "name": "Fill", "prefill": True}])


@pytest.fixture
async def app(database_url: str, upstream: FakeUpstream) -> AsyncIterator[Quart]:
    app = create_app(run_settings(database_url, upstream, assistants=assistants(upstream)))
    async with app.test_app():
        yield app


@pytest.fixture
def client(app: Quart) -> Client:
    return app.test_client(use_cookies=False)


def account_settings(instructions: str) -> dict[str, Any]:
    return event("SettingsUpdated", {"id": SETTINGS_ID, "instructions": instructions, "createdAt": T})


def preset(preset_id: str, instructions: str, **more: Any) -> dict[str, Any]:
    return event("PresetCreated", {"id": preset_id, "name": "Terse", "instructions": instructions, "createdAt": T, **more})


def queued(message_id: str, chat: str, content: str, assistant: str | None = "fake", at: str = T) -> dict[str, Any]:
    """A follow-up queued at ``at`` (they are sent in the order of their times, then ids)."""
    payload = {"id": message_id, "chatId": chat, "role": "user", "content": content, "status": "queued", "createdAt": at}
    if assistant is not None:
        payload["assistantId"] = assistant
    return event("MessageAppended", payload)


def accepted(results: list[dict[str, Any]]) -> None:
    assert [r["status"] for r in results] == ["accepted"] * len(results), results


async def test_the_model_gets_every_layer_in_order_and_the_answer_records_them(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    chat, terse = new_id(), new_id()
    chat_row = {"id": chat, "title": "A chat", "createdAt": T, "instructions": "  Answer in French.\n", "presetId": terse}
    accepted(await post(
        client, session, account_settings("You talk to Ada."), preset(terse, "Be terse.", temperature=0.2, maxTokens=5),
        event("ChatCreated", chat_row), message("MessageAppended", question := new_id(), chat, "Hi"),
    ))  # fmt: skip
    request = run_request(chat, question)
    accepted(await post(client, session, request))
    done = await until_status(client, session, chat, request["payload"]["messageId"], "completed")

    system = "You talk to Ada.\n\nBe terse.\n\n  Answer in French.\n"  # (each layer as written)
    [sent] = upstream.requests
    assert sent["messages"] == [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
    assert (sent["temperature"], sent["max_tokens"]) == (0.2, 5)
    # The answer says what it was given, why it ended (the preset's length limit) and what it cost.
    assert done["instructions"] == system and done["content"] == full_answer(5)
    assert done["finishReason"] == "length"
    assert done["usage"] == {"promptTokens": 7, "completionTokens": 5, "estimated": False}
    final = [e for e in await log_of(client, session) if e["type"] == "MessageEdited"][-1]
    assert final["payload"]["usage"] == done["usage"] and final["payload"]["finishReason"] == "length"


async def test_instructions_named_by_the_request_are_sent_as_they_are(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    accepted(await post(client, session, account_settings("Account layer, not used")))
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    request["payload"]["instructions"] = "The earlier answer's instructions"
    await post(client, session, request)
    done = await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    assert upstream.requests[0]["messages"][0] == {"role": "system", "content": "The earlier answer's instructions"}
    assert done["instructions"] == "The earlier answer's instructions" and done["finishReason"] == "stop"


async def test_no_instructions_no_system_message(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    await post(client, session, request)
    done = await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    assert [m["role"] for m in upstream.requests[0]["messages"]] == ["user"]
    assert "instructions" not in done and done["finishReason"] == "stop"


async def test_a_failed_answer_says_why_in_the_log(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    upstream.mode = "502"
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    await post(client, session, request)
    reply_id = request["payload"]["messageId"]
    done = await until_status(client, session, chat, reply_id, "failed_upstream")
    assert done["finishReason"] == "failed"
    await until_idle(app)
    state = await (await client.get(f"/sync/state?chatId={chat}", headers=bearer(session))).get_json()
    [why] = [m for m in state["snapshot"]["messages"] if m["role"] == "error"]
    assert why["parentId"] == reply_id and "502" in why["content"]


async def continued(
    client: Client, session: dict[str, Any], chat: str, reply_id: str, assistant: str
) -> dict[str, Any]:
    accepted(await post(client, session, event(
        "AssistantRunContinued", {"runId": new_id(), "chatId": chat, "messageId": reply_id, "assistantId": assistant}
    )))  # fmt: skip
    return await until_status(client, session, chat, reply_id, "completed", "failed_upstream")


@pytest.mark.parametrize("assistant", ["fake", "fill"])
async def test_continue_goes_on_after_the_text_so_far(app: Quart, client: Client, upstream: FakeUpstream, assistant: str) -> None:
    session = await signup(client)
    chat, terse = new_id(), new_id()
    chat_row = {"id": chat, "title": "A chat", "createdAt": T, "presetId": terse}
    accepted(await post(client, session, preset(terse, "Short.", maxTokens=4), event("ChatCreated", chat_row),
                        message("MessageAppended", question := new_id(), chat, "Count")))  # fmt: skip
    request = run_request(chat, question, assistant)
    await post(client, session, request)
    reply_id = request["payload"]["messageId"]
    cut = await until_status(client, session, chat, reply_id, "completed")
    assert cut["content"] == "word0 word1 word2 word3" and cut["finishReason"] == "length"
    await until_idle(app)

    # The model repeats the whole answer (the fake always answers from word0): only the rest is
    # kept. (The preset now allows 6 words: the continuation is cut at its limit again.)
    accepted(await post(client, session, event("PresetUpdated", {**preset(terse, "Short.")["payload"], "maxTokens": 6})))
    done = await continued(client, session, chat, reply_id, assistant)
    assert done["content"] == full_answer(6) and done["finishReason"] == "length"
    asked = upstream.requests[-1]["messages"]
    assert asked[0] == {"role": "system", "content": "Short."} and asked[1] == {"role": "user", "content": "Count"}
    if assistant == "fill":
        assert asked[2:] == [{"role": "assistant", "content": full_answer(4)}]
    else:
        assert asked[2:] == [{"role": "assistant", "content": full_answer(4)}, {"role": "user", "content": GO_ON}]
    # What the answer cost: both runs.
    assert done["usage"] == {"promptTokens": 14, "completionTokens": 10, "estimated": False}
    assert done["instructions"] == cut["instructions"] == "Short."


async def test_a_continuation_that_is_new_text_is_appended_byte_for_byte(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    upstream.text = "Déjà vu,\n  a partial"
    request = run_request(chat, question)
    await post(client, session, request)
    reply_id = request["payload"]["messageId"]
    first = await until_status(client, session, chat, reply_id, "completed")
    await until_idle(app)
    upstream.text = " and then the rest."
    async with client.websocket("/sync/live?afterSeq=0", headers=bearer(session)) as ws:
        while json.loads(await asyncio.wait_for(ws.receive(), 5))["type"] != "caughtUp":
            pass
        accepted(await post(client, session, event(
            "AssistantRunContinued", {"runId": new_id(), "chatId": chat, "messageId": reply_id, "assistantId": "fake"}
        )))  # fmt: skip
        frames: list[dict[str, Any]] = []
        while not any(f["type"] == "event" and f["event"]["payload"].get("status") == "completed" for f in frames):
            frames.append(json.loads(await asyncio.wait_for(ws.receive(), 5)))
    done = await until_status(client, session, chat, reply_id, "completed")
    assert done["content"] == first["content"] + " and then the rest."
    # A socket is sent the text so far at offset 0, then the continuation after it.
    deltas = [f for f in frames if f["type"] == "delta"]
    assert deltas[0]["offset"] == 0 and deltas[0]["text"] == first["content"]
    assert deltas[1]["offset"] == len(first["content"])


async def test_continue_is_refused_while_the_answer_runs_and_for_a_question(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    upstream.hold = asyncio.Event()
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    await post(client, session, request)
    reply_id = request["payload"]["messageId"]
    await until_status(client, session, chat, reply_id, "streaming")
    for target in (reply_id, question):
        [result] = await post(client, session, event(
            "AssistantRunContinued", {"runId": new_id(), "chatId": chat, "messageId": target, "assistantId": "fake"}
        ))  # fmt: skip
        assert result["status"] == "rejected", result
    upstream.hold.set()
    await until_status(client, session, chat, reply_id, "completed")


async def conversation(client: Client, session: dict[str, Any], chat: str) -> list[dict[str, Any]]:
    state = await (await client.get(f"/sync/state?chatId={chat}", headers=bearer(session))).get_json()
    return list(state["snapshot"]["messages"])


def path_to_leaf(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat's one path (these tests make no branches), from its first message."""
    by_parent = {m["parentId"]: m for m in messages if m["status"] != "queued" or m["role"] != "user"}
    path, at = [], None
    while at in by_parent or (at is None and None in by_parent):
        path.append(by_parent[at])
        at = path[-1]["id"]
    return path


async def test_follow_ups_queued_during_an_answer_are_sent_in_order_by_the_server(
    app: Quart, client: Client, upstream: FakeUpstream
) -> None:
    upstream.hold, upstream.text = asyncio.Event(), "Answer {n}."
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    await post(client, session, request)
    await until_status(client, session, chat, request["payload"]["messageId"], "streaming")
    follow_ups = [new_id() for _ in range(3)]
    accepted(await post(client, session, *(queued(m, chat, f"Then {i}", at=f"2026-11-30T12:00:0{i}.000Z") for i, m in enumerate(follow_ups))))
    # While the answer is written they wait, unsent.
    assert [m["status"] for m in await conversation(client, session, chat) if m["id"] in follow_ups] == ["queued"] * 3
    upstream.hold.set()  # (the client has gone: only the server sends them)
    for _ in range(400):
        messages = await conversation(client, session, chat)
        if len(messages) == 8 and all(m["status"] == "completed" for m in messages):
            break
        await asyncio.sleep(0.025)
    path = path_to_leaf(messages)
    assert [(m["role"], m["content"]) for m in path] == [
        ("user", "What is up?"), ("assistant", "Answer 1."), ("user", "Then 0"), ("assistant", "Answer 2."),
        ("user", "Then 1"), ("assistant", "Answer 3."), ("user", "Then 2"), ("assistant", "Answer 4."),
    ]  # fmt: skip
    assert [m["messages"][-1]["content"] for m in upstream.requests] == ["What is up?", "Then 0", "Then 1", "Then 2"]
    sends = [e for e in await log_of(client, session) if e["type"] == "QueuedMessageSent"]
    assert [e["payload"]["messageId"] for e in sends] == follow_ups and all(e["origin"] == "server" for e in sends)
    await until_idle(app)
    assert upstream.calls == 4


async def test_a_stop_pauses_the_queue_until_send_now(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    upstream.hold, upstream.text = asyncio.Event(), "Answer {n}."
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    await post(client, session, request)
    reply_id = request["payload"]["messageId"]
    await until_status(client, session, chat, reply_id, "streaming")
    first, second = new_id(), new_id()
    accepted(await post(client, session, queued(first, chat, "One"), queued(second, chat, "Two", None, "2026-11-30T12:00:01.000Z")))
    accepted(await post(client, session, event("AssistantRunCancelled", {"runId": request["payload"]["runId"], "messageId": reply_id})))
    await until_status(client, session, chat, reply_id, "cancelled")
    upstream.hold.set()
    await until_idle(app)
    for _ in range(20):  # (the worker looks each poll: it keeps them waiting)
        await app.extensions["runs"].step()
    assert [m["status"] for m in await conversation(client, session, chat) if m["id"] in (first, second)] == ["queued"] * 2
    assert upstream.calls == 1

    # Send now, from a device: the first goes, answered; the second (no answer asked) follows it.
    send = {"messageId": first, "chatId": chat, "parentId": reply_id, "runId": new_id(), "replyId": new_id(), "assistantId": "fake"}
    accepted(await post(client, session, event("QueuedMessageSent", send)))
    answer = await until_status(client, session, chat, send["replyId"], "completed")
    assert answer["content"] == "Answer 2."
    for _ in range(400):
        sent = await reply(client, session, chat, second)
        if sent is not None and sent["status"] == "completed":
            break
        await asyncio.sleep(0.025)
    assert sent is not None and sent["parentId"] == send["replyId"]
    # The same message sent again (a second device's Send now) is refused: it was sent once.
    [again] = await post(client, session, event("QueuedMessageSent", {**send, "runId": new_id(), "replyId": new_id()}))
    assert again["status"] == "rejected"
    await until_idle(app)
    assert upstream.calls == 2


# --- the queue under any interleaving (Hypothesis, two server processes' workers) ---------------


class _Brief:
    """A model that answers in a few pieces, letting the loop run between them (so that a Stop,
    a Send now or the other process can come mid-answer); it counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        self.calls += 1
        question = next(t.content for t in reversed(turns) if t.role == "user")
        for word in ("Re:", question):
            await asyncio.sleep(0)
            yield Piece(text=word + " ")
        yield Piece(finish_reason="stop")


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("queue"), st.just(0)),
        st.tuples(st.sampled_from(["edit", "remove"]), st.integers(0, 9)),
        st.tuples(st.just("stop"), st.just(0)),
        st.tuples(st.just("send now"), st.integers(1, 2)),  # from one device, or two at once
        st.tuples(st.just("step"), st.integers(0, 1)),  # a process's worker looks
        st.tuples(st.just("wait"), st.integers(1, 12)),  # the answers go on meanwhile
    ),
    max_size=40,
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
async def test_any_interleaving_sends_each_follow_up_once_in_order(backend: str, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]) -> None:
    """Follow-ups queued, edited and removed, answers stopped, Send now from one device or two at
    once, and two server processes' workers looking at the queue, in any order: at the end every
    follow-up not removed while queued was sent exactly once, in the order queued, and answered
    once; the chat is one conversation (no branch); the model was asked once per run."""
    clock = Clock()
    store, cleanup = await open_store(backend, tmp_path_factory.mktemp("q"), clock)
    try:
        runs, model = SqlRunStore(store.db), _Brief()
        assistant = Assistant(AssistantConfig(id="brief", name="Brief", provider="demo"), model)

        async def publish(account_id: str, frame: DeltaFrame) -> None:
            pass

        workers = [RunWorker(store, runs, {"brief": assistant}, publish, clock, checkpoint_seconds=0.0) for _ in range(2)]
        account, chat, _ = await _asked_in(store, "brief")
        made = new_ids()
        follow_ups: list[str] = []
        removed: set[str] = set()

        async def rows() -> dict[str, Message]:
            return {m.id: m for m in await runs.chat_messages(account, chat)}

        async def append(*payloads: tuple[EventType, Any]) -> list[str]:
            events = [DomainEvent(event_id=made(), type=kind, payload=p, created_at=T) for kind, p in payloads]
            results, _ = await store.append(account, "dev", list(events))
            return [r.status for r in results]

        async def send_now(devices: int) -> None:
            messages = list((await rows()).values())
            for _ in range(devices):  # (each device decides on what it saw: the same message)
                send = send_next(messages, Sender(answers=lambda a: True, new_id=made), now=True)
                if send is not None:
                    await append((EventType.QUEUED_MESSAGE_SENT, send))

        for kind, n in steps:
            current = await rows()
            queued_now = [i for i in follow_ups if i in current and current[i].is_queued_follow_up]
            if kind == "queue":
                clock.now += timedelta(milliseconds=1)
                q = Message(id=made(), chat_id=chat, role="user", content=f"q{len(follow_ups)}", status="queued",
                            assistant_id="brief", created_at=format_time(clock.now))  # fmt: skip
                follow_ups.append(q.id)
                assert await append((EventType.MESSAGE_APPENDED, q)) == ["accepted"]
            elif kind in ("edit", "remove") and queued_now:
                target = current[queued_now[n % len(queued_now)]]
                if kind == "edit":
                    await append((EventType.MESSAGE_EDITED, target.model_copy(update={"content": target.content + "!"})))
                else:
                    removed.add(target.id)
                    await append((EventType.MESSAGE_DELETED, MessageRef(id=target.id, chat_id=chat)))
            elif kind == "stop":
                for reply in (m for m in current.values() if m.role == "assistant" and m.status in UNFINISHED):
                    assert reply.run_id is not None
                    await append((EventType.ASSISTANT_RUN_CANCELLED, RunCancel(run_id=reply.run_id, message_id=reply.id)))
            elif kind == "send now":
                await send_now(n)
            elif kind == "step":
                await workers[n].step()
            elif kind == "wait":
                for _ in range(n):
                    await asyncio.sleep(0)

        # Heal: the workers look until all is answered; a paused queue is sent on (Send now).
        for _ in range(200):
            for worker in workers:
                await worker.step()
            while any(w.running for w in workers):
                await asyncio.sleep(0.001)
            messages = list((await rows()).values())
            state = queue_state(messages)
            if state == "paused":
                await send_now(1)
            elif state == "empty" and not any(m.role == "assistant" and m.status in UNFINISHED for m in messages):
                break  # (the workers are idle: the runs they took up have ended)
        else:
            raise AssertionError(f"the queue never drained: {queue_state(messages)}")

        log = (await store.read_updates(account, 0, 10_000)).events
        sends = [e.payload for e in log if isinstance(e.payload, QueuedSend)]
        sent = [s.message_id for s in sends]
        assert len(sent) == len(set(sent)), "a follow-up sent twice"
        assert sent == [i for i in follow_ups if i not in removed], "each follow-up not removed, once, in order"
        final = await rows()
        assert not any(m.status in UNFINISHED for m in final.values())
        for s in sends:
            assert [m.id for m in final.values() if m.parent_id == s.message_id] == [s.reply_id]
        children: dict[str | None, int] = {}
        for m in final.values():
            children[m.parent_id] = children.get(m.parent_id, 0) + 1
        assert max(children.values()) == 1, "the conversation branched"
        asked = await runs.chat_runs(account, chat)
        assert len(asked) == 1 + len(sends)  # (every follow-up here asks for an answer)
        assert all(r.upstream_calls <= 1 for r in asked) and model.calls <= len(asked), "a run paid twice"
    finally:
        await cleanup()


def new_ids() -> Callable[[], str]:
    generator = Uuid7Generator(lambda: int(datetime.now(UTC).timestamp() * 1000), os.urandom)
    return generator
