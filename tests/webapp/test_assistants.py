"""The assistants as the client runs them (webapp/assistants.py): the local one's tools, and the
one code path that applies what any assistant yields (through the outbox, to the server)."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from quart import Quart

from server.app import create_app
from server.config import Settings
from shared.assistants import DEFAULT_SAMPLING, Piece, RunInput, Sampling, Turn, UpstreamError
from shared.ids import Uuid7Generator
from shared.models import DomainEvent, Message
from tests.conftest import QUICK_PASSWORDS
from tests.waiting import until
from tests.webapp.devices import Device, T, signup
from webapp import device_model
from webapp.assistants import LOCAL_TOOLS_ID, ToolAssistant, choose_tool
from webapp.python_tool import MAX_ERROR, MAX_OUTPUT, run_python

new_id = Uuid7Generator(itertools.count(1_700_000_000_000).__next__, os.urandom)


async def answer(text: str) -> list[DomainEvent]:
    question = Message(id=new_id(), chat_id=new_id(), role="user", content=text, created_at=T)
    run = RunInput(question.chat_id, question, [question], new_id, lambda: T)
    return [event async for event in ToolAssistant().run(run)]


def test_the_tool_is_chosen_from_the_question() -> None:
    assert choose_tool("2 * (3 + 4) =") == ("calculator", "2 * (3 + 4)")
    assert choose_tool("calc: sqrt(2)") == ("calculator", "sqrt(2)")
    assert choose_tool("python: print(1)") == ("python", "print(1)")
    assert choose_tool("please run\n```python\nx = 2\nx * 21\n```") == ("python", "x = 2\nx * 21")
    assert choose_tool("what is the time in 2 cities") == (None, "")
    # Arithmetic the calculator would refuse is still for the calculator: its refusal is the answer.
    assert choose_tool("factorial(10**6)") == ("calculator", "factorial(10**6)")
    assert choose_tool("1/0 =") == ("calculator", "1/0")


def test_python_runs_and_reports_its_output() -> None:
    assert run_python("print('a')\n6 * 7") == "a\n42"
    assert run_python("x = 1") == "(no output)"
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run_python("1 / 0")


def test_what_python_prints_is_cut_and_says_so() -> None:
    started = time.perf_counter()
    printed = run_python("for _ in range(100_000): print('x' * 1000)")  # 100 MB
    assert time.perf_counter() - started < 10  # (a guard: what is cut is not kept)
    assert printed.startswith("x" * 1000 + "\n") and len(printed) == MAX_OUTPUT
    assert printed.endswith("x\n… (cut here: it was 100,100,000 characters long)")
    assert run_python("'y' * 10**6").endswith("y\n… (cut here: it was 1,000,002 characters long)")
    with pytest.raises(RuntimeError) as raised:
        run_python("raise ValueError('z' * 10**6)")
    assert len(str(raised.value)) == MAX_ERROR and str(raised.value).startswith("ValueError: zzz")
    assert str(raised.value).endswith("(cut here: it was 1,000,012 characters long)")
    assert run_python("print('short')") == "short"  # (nothing to cut: nothing said)


async def test_an_answer_is_a_tool_call_its_result_and_a_reply_along_one_branch() -> None:
    call, result, reply = await answer("12 * 12")
    assert [e.type for e in (call, result, reply)] == ["ToolCallRequested", "ToolCallSucceeded", "MessageAppended"]
    assert json.loads(call.payload.content) == {"tool": "calculator", "input": "12 * 12"}  # type: ignore[union-attr]
    assert result.payload.content == "144" and reply.payload.content == "`12 * 12` = 144"  # type: ignore[union-attr]
    assert result.payload.parent_id == call.payload.id and reply.payload.parent_id == result.payload.id  # type: ignore[union-attr]
    assert {e.payload.assistant_id for e in (call, result, reply)} == {LOCAL_TOOLS_ID}  # type: ignore[union-attr]

    call, failed, reply = await answer("python: 1 / 0")
    assert failed.type == "ToolCallFailed" and failed.payload.role == "error"  # type: ignore[union-attr]
    assert "ZeroDivisionError" in failed.payload.content and "could not" in reply.payload.content  # type: ignore[union-attr]

    call, result, reply = await answer("python: print('x' * 10**8)")  # (100 MB: not in the chat, nor the log)
    assert len(result.payload.content) == MAX_OUTPUT  # type: ignore[union-attr]
    assert result.payload.content.endswith("(cut here: it was 100,000,001 characters long)")  # type: ignore[union-attr]
    assert len(reply.payload.content) < MAX_OUTPUT + 100  # type: ignore[union-attr]

    started = time.perf_counter()
    call, failed, reply = await answer("(9999**9999)**9999")  # it would take minutes
    assert time.perf_counter() - started < 1.0  # (a guard: the refusal is what matters)
    assert failed.type == "ToolCallFailed" and failed.payload.role == "error"  # type: ignore[union-attr]
    assert failed.payload.content == (  # type: ignore[union-attr]
        "CalculationError: the result would have about 39,996 digits; the calculator keeps at most about 3,010"
    )
    assert reply.payload.content == (  # type: ignore[union-attr]
        "The calculator could not do that: the result would have about 39,996 digits; the calculator keeps at most about 3,010"
    )

    [plain] = await answer("hello there")
    assert plain.type == "MessageAppended" and "calculate" in plain.payload.content  # type: ignore[union-attr]


@pytest.fixture
async def app(tmp_path: Path) -> Quart:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=f"sqlite:///{tmp_path / 'server.db'}", run_poll_seconds=0.05))
    async with app.test_app():
        yield app


async def test_a_local_answer_made_offline_reaches_the_server_and_the_other_device(app: Quart, tmp_path: Path) -> None:
    from tests.webapp.page import FakePage
    from webapp.app import Client, Services

    token = await signup(app)
    device, other = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    device.transport.offline = True
    client = Client(Services(device.store, FakePage(), None, device.transport, new_id, lambda: T))  # type: ignore[arg-type]
    client.engine = device.engine
    await client.dispatch("new-chat", {})
    await client.dispatch("send", {"text": "calc: 6 * 7", "assistant": LOCAL_TOOLS_ID})
    roles = [(m.role, m.content) for m in device.store.messages(client.selected or "")]
    assert roles == [
        ("user", "calc: 6 * 7"),
        ("tool_call", json.dumps({"tool": "calculator", "input": "6 * 7"})),
        ("tool_result", "42"),
        ("assistant", "`6 * 7` = 42"),
    ]
    assert device.store.pending_count() == 5  # the chat, the question and the three answers

    device.transport.offline = False
    await device.sync()
    await other.sync()
    assert [(m.role, m.content) for c in other.store.chats() for m in other.store.messages(c.id)] == roles


async def test_a_reply_from_a_model_on_this_device_streams_stops_and_is_ended_after_a_reload(tmp_path: Path) -> None:
    import asyncio

    from shared.assistants import DemoModel
    from tests.webapp.page import FakePage
    from tests.webapp.test_client import FakeAuth, OfflineTransport
    from webapp.app import Client, Services
    from webapp.assistants import DEVICE_MODEL_ID
    from webapp.database import FilePersistence
    from webapp.store import LocalStore

    def client_on(path: Path) -> tuple[Client, FakePage]:
        view = FakePage()
        services = Services(
            LocalStore(str(path), FilePersistence()), view, FakeAuth(), OfflineTransport(),  # type: ignore[arg-type]
            new_id, lambda: T, device_model=lambda url, model: DemoModel(seconds_per_word=0.01),
            schedule_frame=view.schedule_frame,
        )
        return Client(services), view

    client, view = client_on(tmp_path / "local.db")
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.dispatch("device-model", {"url": "http://127.0.0.1:11434/v1", "model": "tiny"})
    assert '<option value="on-device">On this device: tiny</option>' in view.regions["assistant-choice"]
    asking = asyncio.ensure_future(client.dispatch("send", {"text": "hi", "assistant": DEVICE_MODEL_ID}))
    for _ in range(200):
        if any(len(text) > 20 for text in client.pane.streaming.values()):
            break
        await asyncio.sleep(0.01)
    [(reply_id, text)] = client.pane.streaming.items()
    view.paint()
    assert text in view.messages and ">Stop<" in view.messages
    await client.dispatch("stop-run", {"id": reply_id})
    await asyncio.gather(asking, return_exceptions=True)
    stopped = client.store.message(reply_id)
    assert stopped is not None and stopped.status == "cancelled" and stopped.content.startswith(text)

    # A reply still being written when the page went away is ended at the next start.
    client.store.conn.execute("UPDATE messages SET status = 'streaming' WHERE id = ?", (reply_id,))
    client.stop()
    client.store.close()
    reloaded, view = client_on(tmp_path / "local.db")
    reloaded.start()
    ended = await until(lambda: (m := reloaded.store.message(reply_id)) is not None and m.status != "streaming" and m,
                        "the reply is still streaming")
    reloaded.stop()
    assert ended.status == "failed_upstream"
    [why] = [m for m in reloaded.store.messages(ended.chat_id) if m.parent_id == reply_id]
    assert (why.role, why.content) == ("error", "the page was closed or reloaded while this answer was being written")
    reloaded.redraw()
    view.paint()
    assert "The assistant could not answer: the page was closed or reloaded while this answer was being written." in view.messages


async def test_how_a_server_run_ended_and_what_it_cost_are_shown(tmp_path: Path) -> None:
    import asyncio

    from tests.webapp.page import FakePage
    from webapp.app import Client, Services
    from webapp.sync import Status

    app = create_app(Settings(**QUICK_PASSWORDS, database_url=f"sqlite:///{tmp_path / 'server.db'}", run_poll_seconds=0.05,
                              demo_seconds_per_word=0.001))
    async with app.test_app():
        device = Device(app, await signup(app), tmp_path / "a.db")
        view = FakePage()
        client = Client(Services(device.store, view, None, device.transport, new_id, lambda: T))  # type: ignore[arg-type]
        client.engine = device.engine
        client.engine.status = Status.ONLINE
        await client.dispatch("new-chat", {})
        await client.dispatch("send", {"text": "hello", "assistant": "demo"})

        async def shows(text: str) -> str:
            for _ in range(200):
                await device.sync()
                client.redraw()
                if text in view.messages:
                    break
                await asyncio.sleep(0.02)
            return view.messages

        await shows("tokens")  # (the answer has ended: a message sent now is not queued behind it)
        await client.dispatch("send", {"text": "and you?", "assistant": "nobody"})  # a server without it
        shown = await shows("no assistant")
        assert "The assistant could not answer: there is no assistant &#x27;nobody&#x27; on this server." in shown
        # What it cost is in the answer's final event: shown with no request for it.
        [answer] = [m for m in client.store.messages(client.selected or "") if m.assistant_id == "demo"]
        assert answer.usage is not None and answer.usage.estimated and answer.finish_reason == "stop"  # (it counts words)
        assert f"about {answer.usage.prompt_tokens} + {answer.usage.completion_tokens} tokens (estimated)" in shown
        assert client.store.run_infos(client.selected or "") == {}  # (GET /runs is not asked)


class UnreachableModel:
    """What webapp/browser.py's FetchModel does when nothing listens at its address: a fetch that
    rejects, raised as the sentence of webapp/device_model.py."""

    def __init__(self, base_url: str, model: str) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        raise UpstreamError(device_model.unreachable(self.url))
        yield Piece()  # (a generator, as every model's stream)


async def test_why_a_model_on_this_device_failed_is_shown_here_and_on_the_other_device(app: Quart, tmp_path: Path) -> None:
    from tests.webapp.page import FakePage
    from webapp.app import Client, Services
    from webapp.assistants import DEVICE_MODEL_ID

    token = await signup(app)
    device, other = Device(app, token, tmp_path / "a.db"), Device(app, token, tmp_path / "b.db")
    view = FakePage()
    client = Client(Services(device.store, view, None, device.transport, new_id, lambda: T,  # type: ignore[arg-type]
                             device_model=UnreachableModel))  # fmt: skip
    client.engine = device.engine
    await client.dispatch("new-chat", {})
    await client.dispatch("device-model", {"url": "http://127.0.0.1:9/v1", "model": "tiny"})
    await client.dispatch("send", {"text": "hi", "assistant": DEVICE_MODEL_ID})
    said = (
        "The assistant could not answer: http://127.0.0.1:9/v1/chat/completions could not be reached: check that "
        "the model&#x27;s server is running at that address and that it allows this page&#x27;s origin (CORS)."
    )
    view.paint()
    assert said in view.messages and "The assistant could not answer." not in view.messages
    assert 'class="message error' not in view.messages  # (said by the reply, not a message of its own)
    [question, reply, error] = device.store.messages(client.selected or "")
    assert (reply.role, reply.status, error.role, error.parent_id) == ("assistant", "failed_upstream", "error", reply.id)

    await device.sync()  # ...and it is in the log: another device shows it too
    await other.sync()
    elsewhere = FakePage()
    seen = Client(Services(other.store, elsewhere, None, other.transport, new_id, lambda: T))  # type: ignore[arg-type]
    await seen.dispatch("select-chat", {"id": client.selected})
    elsewhere.paint()
    assert said in elsewhere.messages
