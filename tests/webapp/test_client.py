"""The client's UI logic (webapp/app.py, webapp/pane.py) under CPython, on an in-memory page that
records what the client asks of it (what static/view.js then does is tests/e2e/test_view.py's)."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.assistants import DEFAULT_SAMPLING, Piece, Sampling, Turn
from shared.ids import Uuid7Generator
from shared.models import DeltaFrame, DomainEvent, EventType, LoggedEvent, Message, Session
from tests.waiting import until
from tests.webapp.page import FakePage
from webapp import app as app_module
from webapp.app import AuthFailed, Client, Services
from webapp.assistants import DEVICE_MODEL_ID
from webapp.database import FilePersistence
from webapp.pane import WINDOW
from webapp.store import LocalStore
from webapp.transport import NetworkError

T = "2026-11-30T12:00:00.000Z"
TICKS = itertools.count(1_700_000_000_000)  # one clock for every client of a test run, reloads included


class OfflineTransport:
    """The server is out of reach: everything stays local."""

    async def updates(self, *args: object) -> None:
        raise NetworkError("offline")

    state = submit = live = assistants = blob_limits = blob_offset = blob_append = updates


class FakeAuth:
    def __init__(self) -> None:
        self.accept = True
        self.silent = False  # a server that never answers (a connection left half-open)
        self.signins: list[str] = []
        self.signouts = 0

    async def signin(self, username: str, password: str, signup: bool) -> Session:
        if self.silent:
            await asyncio.Event().wait()
        if not self.accept:
            raise AuthFailed("Wrong username or password.")
        self.signins.append(username)
        return Session(user_id="u1" if username == "ann" else f"u-{username}", device_id="d1", token="t")

    async def signout(self) -> None:
        if self.silent:
            await asyncio.Event().wait()
        self.signouts += 1


class EchoModel:
    """A model on this device that answers with what it was asked, and remembers it."""

    def __init__(self) -> None:
        self.asked: list[list[Turn]] = []

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        self.asked.append(turns)
        yield Piece(text=f"answer {len(self.asked)}")


def make_client(tmp_path: Path, model: EchoModel | None = None) -> tuple[Client, FakePage, FakeAuth]:
    page, auth = FakePage(), FakeAuth()
    services = Services(
        store=LocalStore(str(tmp_path / "local.db"), FilePersistence()),
        view=page,
        auth=auth,
        transport=OfflineTransport(),  # type: ignore[arg-type]
        new_id=Uuid7Generator(TICKS.__next__, os.urandom),
        now=lambda: T,
        device_model=(lambda url, name: model) if model else None,  # type: ignore[arg-type,return-value]
        schedule_frame=page.schedule_frame,
    )
    return Client(services), page, auth


async def signed_in(tmp_path: Path, model: EchoModel | None = None) -> tuple[Client, FakePage]:
    client, page, _ = make_client(tmp_path, model)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    if model is not None:
        await client.dispatch("device-model", {"url": "http://127.0.0.1:1/v1", "model": "echo"})
    return client, page


async def test_the_warm_up_goes_a_step_per_callback_once_per_page_then_freezes_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """webapp/markdown.py: warm_steps, after start-up; in the browser each callback is a task of
    the page's own, so input and frames come between two steps."""
    happened: list[str] = []

    def steps() -> Iterator[None]:
        for i in range(3):
            happened.append(f"step {i}")
            asyncio.get_running_loop().call_soon(happened.append, f"after {i}")  # (what the page does meanwhile)
            yield

    monkeypatch.setattr(app_module.markdown, "warm_steps", steps)
    client, page, _ = make_client(tmp_path)
    client.s.freeze_heap = lambda: happened.append("frozen")
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    client.start()  # (again: a sign-in again, say)
    await until(lambda: "frozen" in happened)
    await asyncio.sleep(3 * app_module.WARM_AFTER_SECONDS)
    assert happened == ["step 0", "after 0", "step 1", "after 1", "step 2", "after 2", "frozen"]


async def test_sign_in_create_a_chat_and_send_offline(tmp_path: Path) -> None:
    client, page, auth = make_client(tmp_path)
    client.start()
    assert 'data-action="signin"' in page.regions["root"]
    auth.accept = False
    await client.dispatch("signin", {"username": "ann", "password": "wrong one"})
    assert "Wrong username or password." in page.regions["root"]
    assert 'name="username" autocomplete="username" value="ann"' in page.regions["root"]  # (kept: only the password is typed again)
    auth.accept = True
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert "ann" in page.regions["root"] and "New chat" in page.regions["root"]

    await client.dispatch("new-chat", {})
    assert "New chat" in page.regions["chat-list"] and 'class="chat-item selected pending"' in page.regions["chat-list"]
    assert '<option value="demo" selected>' in page.regions["assistant-choice"]  # the assistant every server has
    await client.dispatch("send", {"text": "  hello <b>world</b>  ", "assistant": "demo"})
    page.paint()
    assert "<p>hello &lt;b&gt;world&lt;/b&gt;</p>" in page.messages  # Markdown, its HTML escaped
    assert 'class="message user pending"' in page.messages
    assert "Saved on this device, not sent yet" in page.messages
    # The question is asked too, offline: a reply waits, and can be stopped.
    assert 'class="message assistant pending queued"' in page.messages
    assert "the assistant is asked once the server can be reached" in page.messages and ">Stop<" in page.messages
    await client.dispatch("send", {"text": "   "})  # blank: nothing
    assert len(page.items) == 2
    assert [p.event.type for p in client.store.outbox()] == ["ChatCreated", "MessageAppended", "AssistantRunRequested"]
    await client.dispatch("send", {"text": "no answer needed", "assistant": ""})
    assert client.store.pending_count() == 4 and client.store.setting("assistant") == ""


async def test_a_push_that_found_no_network_is_drawn_as_not_sent_not_as_sending(tmp_path: Path) -> None:
    """The message was drawn while its push was on the way ("Sending…"); the push failed: the
    next frames draw it as not sent, without waiting for another change to redraw it."""
    client, page = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "hello", "assistant": ""})
    page.paint()
    assert "Saved on this device, not sent yet" in page.messages

    async def submit(events: object) -> None:
        for _ in range(2):  # (frames while the request is out: a redraw, then its messages)
            page.paint()
        assert "Sending…" in page.messages
        raise NetworkError("the server could not be reached")

    client.engine.transport.submit = submit  # type: ignore[method-assign]
    with pytest.raises(NetworkError):
        await client.engine.push()
    for _ in range(2):
        page.paint()
    assert "Not sent yet: the server could not be reached" in page.messages and "Sending…" not in page.messages


async def test_the_first_message_with_no_chat_yet_makes_one(tmp_path: Path) -> None:
    client, page, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert client.selected is None and page.composer.chat == ""
    await client.dispatch("draft", {"text": "typed at once", "chat": ""})
    await client.dispatch("send", {"text": "typed at once", "assistant": ""})
    assert client.selected is not None and "typed at once" in page.messages
    assert client.store.drafted() == set()


async def test_a_message_the_page_kept_is_saved_once_with_its_id_in_its_chat(tmp_path: Path) -> None:
    """The page draws and keeps a sent message before Python has it (static/app.js), with its own
    id, and hands it over again after a reload when it could not tell whether Python had it."""
    client, page, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    made = "01a23000-0000-7000-8000-000000000001"
    sent = {"id": "01a23000-0000-7000-8000-000000000002", "chat": made, "newChat": True, "text": "sent in no chat", "assistant": ""}
    await client.dispatch("send", sent)
    assert client.selected == made and client.store.message(sent["id"]) is not None  # the page's ids
    assert (made, None, None) in page.composed  # (the box is left as the page has it, in the chat it made)
    await client.dispatch("send", sent)  # given again (a reload between the two): saved once
    following = {"id": "01a23000-0000-7000-8000-000000000003", "chat": made, "newChat": True, "text": "and then", "assistant": ""}
    await client.dispatch("send", following)  # (the chat the page made exists now)
    assert [m.content for m in client.store.messages(made)] == ["sent in no chat", "and then"]
    assert client.store.messages(made)[1].parent_id == sent["id"]
    assert len(client.store.chats()) == 1
    assert page.ended_sending == []  # (each taken: the page's drawing of it stays until Python's morphs it)
    # ...and the page is told each is taken, the one given twice too: Python's next drawing of the
    # list morphs the page's, or removes it should the message be drawn under another id by then.
    assert page.taken_sending == [sent["id"], sent["id"], following["id"]]
    await client.dispatch("send", {"id": "not an id", "chat": made, "text": "a bad id", "assistant": ""})
    assert "a bad id" in [m.content for m in client.store.messages(made)]  # (given an id of Python's)
    assert page.ended_sending == ["not an id"]  # (drawn under Python's id: the page's drawing goes)


async def test_drafts_the_page_kept_are_adopted_before_the_composer_is_drawn(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    chat = client.selected or ""
    await client.dispatch("draft", {"text": "older, as Python had it", "chat": chat})
    client.store.close()
    reloaded, page, _ = make_client(tmp_path)
    gone = await reloaded.adopt_drafts({
        chat: {"text": "newer, as the page kept it", "at": 5},
        "": {"text": "", "at": 6},
        "a-chat-deleted-since": {"text": "lost chat", "at": 7},
    })  # fmt: skip
    assert gone == {"": 6, "a-chat-deleted-since": 7}  # the page may forget those
    reloaded.start()
    assert page.composer.chat == chat and page.composer.text == "newer, as the page kept it"
    assert reloaded.store.drafted() == {chat}


@pytest.mark.parametrize("failing", ["add_local", "shown_path"])
async def test_a_message_that_could_not_be_saved_goes_back_into_the_composer_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """Whatever fails before the message is durable (its write, or anything Python does before
    it), its text goes back into the composer with the reason, and the page's drawing of it goes:
    the page forgets a send once Python has answered it, so nothing else would keep it."""
    client, page = await signed_in(tmp_path)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(client.store, failing, broken)
    chat = client.selected or ""
    with pytest.raises(OSError):
        await client.dispatch("send", {"id": "0190a000-0000-7000-8000-000000000001", "chat": chat, "text": "keep me"})
    assert page.put_backs == [(chat, "keep me")]  # (the page puts it before what was typed since)
    assert page.ended_sending == ["0190a000-0000-7000-8000-000000000001"] and page.taken_sending == []
    assert "Not sent: it could not be saved on this device. It is back in the box." in page.regions["composer-files"]
    assert client.store.message("0190a000-0000-7000-8000-000000000001") is None


async def test_unknown_actions_are_errors(tmp_path: Path) -> None:
    client, _, _ = make_client(tmp_path)
    with pytest.raises(ValueError, match="unknown action"):
        await client.dispatch("explode", {})


async def test_drafts_are_kept_per_chat_marked_in_the_list_and_cleared_by_sending(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    first = client.selected or ""
    await client.dispatch("draft", {"text": "half a <thought>", "chat": first})
    assert page.regions["chat-list"].count(">Draft<") == 1
    await client.dispatch("new-chat", {})
    assert page.composer.text == "" and page.composer.chat == client.selected  # the new chat's composer is empty
    await client.dispatch("select-chat", {"id": first})
    assert page.composer.text == "half a <thought>" and page.composer.chat == first

    # A reload (memory gone, database kept) brings it back too.
    client.store.close()
    reloaded, page, _ = make_client(tmp_path)
    reloaded.start()
    await reloaded.dispatch("select-chat", {"id": first})
    assert page.composer.text == "half a <thought>"
    await reloaded.dispatch("send", {"text": "the whole thought"})
    assert reloaded.store.draft(first) == "" and ">Draft<" not in page.regions["chat-list"]


async def test_nothing_redrawn_replaces_the_composer_or_its_text(tmp_path: Path) -> None:
    """The client sets the composer only when a chat is opened, with its draft as saved; that the
    page then keeps what was typed since (and its cursor) is static/view.js's (tests/e2e/test_view.py)."""
    client, page = await signed_in(tmp_path)
    chat = client.selected or ""
    await client.dispatch("draft", {"text": "typed right after signing in", "chat": chat})
    composed, drawn = len(page.composed), len(page.drawn)
    client.store.conn.execute("INSERT INTO meta VALUES ('setting:assistants', '[]')")  # (to differ from the list)

    class Listing(OfflineTransport):
        async def assistants(self) -> list[object]:  # type: ignore[override]
            from webapp.transport import AssistantInfo

            return [AssistantInfo("demo", "Demo", "remote", "demo"), AssistantInfo("big", "Big model", "remote", "big")]

    client.choice.transport = Listing()  # type: ignore[assignment]
    await client.choice.refresh()  # the list of assistants arrives
    client.redraw()  # and sync redraws
    assert "Big model" in page.regions["assistant-choice"] and len(page.composed) == composed  # the composer untouched
    client.redraw(chat_changed=True)  # the chat drawn anew: its draft, as saved
    assert page.composed[composed:] == [(chat, "typed right after signing in", None)]
    assert "root" not in page.drawn[drawn:]  # the layout, the box in it, is drawn once per sign-in


async def test_edit_and_withdraw_a_message_before_it_is_sent(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "frist", "assistant": ""})
    [message] = client.store.messages(client.selected or "")
    page.paint()
    assert 'data-action="edit-message"' in page.messages and 'aria-label="Withdraw"' in page.messages

    await client.dispatch("edit-message", {"id": message.id})
    assert page.composer.text == "frist" and "Send saves the change" in (page.composer.note or "")
    await client.dispatch("send", {"text": "first"})
    assert page.composer.note is None
    assert [m.content for m in client.store.messages(message.chat_id)] == ["first"]
    assert [p.event.type for p in client.store.outbox()] == ["ChatCreated", "MessageAppended"]  # coalesced

    await client.dispatch("remove-message", {"id": message.id})
    assert client.store.messages(message.chat_id) == []
    assert [p.event.type for p in client.store.outbox()] == ["ChatCreated"]  # withdrawn: nothing goes out


def logged(client: Client, seq: int, kind: EventType, payload: object, event_id: str | None = None) -> LoggedEvent:
    return LoggedEvent(seq=seq, origin="server", event_id=event_id or client.s.new_id(), type=kind,
                       payload=payload, created_at=T)  # type: ignore[arg-type]


async def confirm_outbox(client: Client) -> int:
    """The server takes everything in the outbox (as if it had been sent): returns the cursor."""
    pending = [p.event for p in client.store.outbox()]
    seq = client.store.last_seq()
    await client.store.apply_remote([logged(client, seq + i + 1, e.type, e.payload, e.event_id) for i, e in enumerate(pending)])
    client.redraw()
    return client.store.last_seq()


async def test_a_reply_grows_from_deltas_once_a_frame_and_only_its_item_changes(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "earlier", "assistant": ""})
    await client.dispatch("send", {"text": "hi", "assistant": "demo"})
    _, question, reply = client.store.messages(client.selected or "")
    assert reply.status == "queued" and reply.parent_id == question.id and reply.run_id
    seq = await confirm_outbox(client)
    page.paint()
    earlier_key, question_key = f"m-{client.store.messages(client.selected or '')[0].id}", f"m-{question.id}"
    since = len(page.patches)

    # The server starts streaming: deltas show at the next frame; one that skips ahead waits for a checkpoint.
    streaming = reply.model_copy(update={"status": "streaming", "content": ""})
    await client.store.apply_remote([logged(client, seq + 1, EventType.MESSAGE_EDITED, streaming)])
    client.redraw()
    page.paint()
    patches = len(page.patches)
    text = ""
    for i in range(50):
        piece = f"word{i} "
        client._on_delta(DeltaFrame(message_id=reply.id, run_id=reply.run_id or "", offset=len(text), text=piece))
        text += piece
    client._on_delta(DeltaFrame(message_id=reply.id, run_id=reply.run_id or "", offset=len(text) + 5, text="far ahead"))
    assert len(page.patches) == patches  # nothing drawn before the frame
    page.paint()
    assert len(page.patches) == patches + 1 and list(page.patches[-1]) == [f"m-{reply.id}"]  # one node, once
    assert f"<p>{text.strip()}</p>" in page.messages and "far ahead" not in page.messages
    assert not page.touched(question_key, since) and not page.touched(earlier_key, since)  # the other items: asked nothing

    # A checkpoint that knows more replaces what the deltas built.
    checkpoint = streaming.model_copy(update={"content": text + "and more"})
    await client.store.apply_remote([logged(client, seq + 2, EventType.MESSAGE_EDITED, checkpoint)])
    client.redraw()
    page.paint()
    assert f"{text}and more" in page.messages and client.pane.streaming == {}

    await client.dispatch("stop-run", {"id": reply.id})
    [stop] = [p.event for p in client.store.outbox()]
    assert stop.type == "AssistantRunCancelled" and stop.payload.message_id == reply.id  # type: ignore[union-attr]
    page.paint()
    assert "Stopped." in page.messages and ">Retry<" in page.messages
    await client.dispatch("retry-run", {"id": reply.id})
    retry = [p.event for p in client.store.outbox()][-1]
    assert isinstance(retry, DomainEvent) and retry.type == "AssistantRunRequested"
    assert retry.payload.parent_id == question.id and retry.payload.message_id != reply.id  # type: ignore[union-attr]
    # The retry is a branch beside the stopped reply, and it is the one shown.
    page.paint()
    assert f"m-{retry.payload.message_id}" in page.items and f"m-{reply.id}" not in page.items  # type: ignore[union-attr]
    assert ">2 / 2<" in page.messages


async def test_a_streaming_reply_is_drawn_by_its_last_block_only(tmp_path: Path) -> None:
    from webapp import markdown

    client, page = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "a long one", "assistant": "demo"})
    _, reply = client.store.messages(client.selected or "")
    seq = await confirm_outbox(client)
    await client.store.apply_remote([logged(client, seq + 1, EventType.MESSAGE_EDITED,
                                            reply.model_copy(update={"status": "streaming"}))])  # fmt: skip
    client.redraw()
    text = ""
    for i in range(40):
        piece = f"Paragraph {i} with **bold** words.\n\n" if i % 10 else f"```python\nx = {i}\n```\n\n"
        client._on_delta(DeltaFrame(message_id=reply.id, run_id=reply.run_id or "", offset=len(text), text=piece))
        text += piece
        page.paint()
        # What the page is sent is the whole text, rendered: the item, or since it the blocks it
        # keeps (the first ``kept``: tests/e2e/test_view.py) and what follows them.
        if f"m-{reply.id}" in page.streamed:
            kept, html = page.streamed[f"m-{reply.id}"]
            assert "".join(client.pane._renderers[reply.id].kept[:kept]) + html == markdown.render(text)
        else:
            assert markdown.render(text) in page.item(reply.id)
    item_patches = sum(f"m-{reply.id}" in patch and patch[f"m-{reply.id}"] != "(stream)" for patch in page.patches)
    stream_patches = sum(f"m-{reply.id}" in patch for patch in page.streams)
    assert stream_patches >= 35 and item_patches <= 3  # drawn by the end of its text, not the whole
    sent = [html for patch in page.streams[-30:] for _, html in patch.values()]
    # Each frame carries the blocks after those it kept (two at most here), never the whole text.
    assert max(len(html) for html in sent) < len(markdown.render(text)) / 5


async def test_regenerate_and_edit_make_branches_and_the_model_gets_the_shown_path(tmp_path: Path) -> None:
    model = EchoModel()
    client, page = await signed_in(tmp_path, model)
    chat = client.selected or ""
    await client.dispatch("send", {"text": "first question", "assistant": DEVICE_MODEL_ID})
    await client.dispatch("send", {"text": "second question", "assistant": DEVICE_MODEL_ID})
    assert [t.content for t in model.asked[1]] == ["first question", "answer 1", "second question"]
    await confirm_outbox(client)
    q1, a1, q2, a2 = client.store.messages(chat)

    # Regenerate the first answer: a sibling, shown ("2 / 2"), asked about the path to its question only.
    await client.dispatch("regenerate", {"id": a1.id})
    assert [t.content for t in model.asked[2]] == ["first question"]
    a1b = client.store.messages(chat)[-1]
    assert a1b.parent_id == q1.id and a1b.content == "answer 3"
    page.paint()
    assert list(page.items) == [f"m-{q1.id}", f"m-{a1b.id}"] and ">2 / 2<" in page.messages
    await client.dispatch("send", {"text": "third question", "assistant": DEVICE_MODEL_ID})
    assert [t.content for t in model.asked[3]] == ["first question", "answer 3", "third question"]

    # Previous branch: the first answer and what followed it, as this device remembers across a reload.
    await client.dispatch("show-branch", {"fork": q1.id, "id": a1.id})
    page.paint()
    assert list(page.items) == [f"m-{m.id}" for m in (q1, a1, q2, a2)] and ">1 / 2<" in page.messages
    client.store.close()
    client, page, _ = make_client(tmp_path, model)
    client.start()
    assert list(page.items) == [f"m-{m.id}" for m in (q1, a1, q2, a2)]

    # Editing an answered question: a new question beside it, asked again; the old branch stays.
    await client.dispatch("edit-message", {"id": q2.id})
    assert "new branch" in (page.composer.note or "")
    await client.dispatch("send", {"text": "second, better"})
    q2b, a2b = client.store.messages(chat)[-2:]
    assert q2b.parent_id == a1.id and q2b.content == "second, better" and a2b.parent_id == q2b.id
    assert [t.content for t in model.asked[-1]] == ["first question", "answer 1", "second, better"]
    assert client.store.message(q2.id) == q2  # unchanged
    page.paint()
    assert list(page.items) == [f"m-{m.id}" for m in (q1, a1, q2b, a2b)]
    await client.dispatch("show-branch", {"fork": a1.id, "id": q2.id})
    page.paint()
    assert list(page.items) == [f"m-{m.id}" for m in (q1, a1, q2, a2)]


async def test_a_long_chat_draws_its_latest_messages_and_more_on_demand(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    chat = client.selected or ""
    for i in range(WINDOW + 10):
        await client.dispatch("send", {"text": f"message {i}", "assistant": ""})
        page.paint()  # (the browser's next frame: each Send's messages are drawn in it)
    # While it is open, new messages are added below and those above stay (nothing moves)...
    assert len(page.items) == WINDOW + 10 and "<p>message 0</p>" in page.messages
    # ...opened again, it draws its latest messages, and more on demand.
    await client.dispatch("select-chat", {"id": chat})
    assert len(page.items) == WINDOW and page.earlier
    assert f"message {WINDOW + 9}" in page.messages and "<p>message 9</p>" not in page.messages
    since, latest = len(page.patches), f"m-{client.store.messages(chat)[-1].id}"
    await client.dispatch("show-earlier", {})
    assert len(page.items) == WINDOW + 10 and not page.earlier and "<p>message 0</p>" in page.messages
    assert not page.touched(latest, since)  # the ones drawn already are not sent again
    # The list stays within bounds as a chat goes on: at most WINDOW more than it was opened with.
    await client.dispatch("select-chat", {"id": chat})
    for i in range(2 * WINDOW):
        await client.dispatch("send", {"text": f"later {i}", "assistant": ""})
        assert WINDOW <= len(page.items) <= 2 * WINDOW


async def test_the_assistant_chosen_is_remembered_when_chosen(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    await client.dispatch("choose-assistant", {"assistant": "local-tools"})
    await client.dispatch("new-chat", {})
    assert '<option value="local-tools" selected>' in page.regions["assistant-choice"]


async def test_copy_gives_a_message_as_its_markdown(tmp_path: Path) -> None:
    client, _ = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "some **bold** `code`", "assistant": ""})
    [message] = client.store.messages(client.selected or "")
    assert client.source(message.id) == "some **bold** `code`" and client.source("nothing") == ""


async def test_a_message_drawn_by_another_action_before_it_is_durable_says_saving(tmp_path: Path) -> None:
    """A message is shown once it is durable; should another action draw the chat meanwhile (two
    sends in quick succession, the first one's redraw), it says "Saving", never "Saved"."""
    client, page, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.dispatch("send", {"text": "one", "assistant": ""})
    held = asyncio.Event()
    flush = client.store._persistence.flush

    async def held_flush(checkpoint: Any) -> None:
        await held.wait()
        await flush(checkpoint)

    client.store._persistence.flush = held_flush  # type: ignore[method-assign]
    sending = asyncio.ensure_future(client.dispatch("send", {"text": "two", "assistant": ""}))
    await until(lambda: [m.content for m in client.store.messages(client.selected or "")] == ["one", "two"])
    client.redraw()  # another action draws the chat: "two" is committed, not durable
    page.paint()
    [two] = [m for m in client.store.messages(client.selected or "") if m.content == "two"]
    assert 'data-state="saving"' in page.item(two.id) and "Saving on this device…" in page.item(two.id)
    held.set()
    await sending
    page.paint()
    assert 'data-state="pending"' in page.item(two.id) and "Saved on this device" in page.item(two.id)


def test_every_reply_status_and_delivery_has_its_own_words(tmp_path: Path) -> None:
    from webapp import message_html
    from webapp.outbox import Delivery

    reply = Message(id=Uuid7Generator(lambda: 1, os.urandom)(), chat_id="0" * 8 + "-0000-7000-8000-" + "0" * 12,
                    role="assistant", content="", created_at=T, assistant_id="demo", run_id=None)  # fmt: skip
    words = [*message_html.REPLY_STATE.values(), *message_html.DELIVERY_STATE.values()]
    shown = [w for w in words if w]
    assert len(set(shown)) == len(shown) and len(shown) == len(words) - 1  # each its own; "completed" none
    assert all(a not in b for a in shown for b in shown if a != b)  # none is part of another either
    for status in ("queued", "streaming", "completed", "failed_upstream", "cancelled"):
        html = message_html.message_item(message_html.Item(message=reply.model_copy(update={"status": status, "last_seq": 3})))
        assert f'data-state="{status}"' in html
        said = [w for w in shown if w in html]
        if status == "completed":  # done: no state words, only a sentence for a screen reader
            assert said == [] and '<p class="state sr-only">Answer complete.</p>' in html and ">Retry<" not in html
        else:
            assert said == [message_html.REPLY_STATE[status]]
    question = reply.model_copy(update={"role": "user", "status": "completed", "last_seq": 0})
    for delivery in ("saving", "pending", "sending", "failed"):
        html = message_html.message_item(message_html.Item(message=question, delivery=Delivery(delivery, "server error 502")))
        assert f'data-state="{delivery}"' in html and message_html.DELIVERY_STATE[delivery] in html
    failed = message_html.message_item(message_html.Item(message=question, delivery=Delivery("failed", "server error 502")))
    assert "Not sent yet: server error 502. It will be sent again." in failed
    waiting = reply.model_copy(update={"status": "queued", "last_seq": None})  # its request not on the server yet
    for delivery, words in (("saving", "Saving on this device…"), ("pending", "Saved on this device: the assistant is asked")):
        html = message_html.message_item(message_html.Item(message=waiting, delivery=Delivery(delivery, None)))
        assert words in html and ("Saved" in html) == (delivery == "pending")


def test_what_an_answer_cost_is_shown_and_an_estimate_says_so() -> None:
    from shared.models import RunSummary
    from webapp import message_html

    reply = Message(id=Uuid7Generator(lambda: 1, os.urandom)(), chat_id="0" * 8 + "-0000-7000-8000-" + "0" * 12,
                    role="assistant", content="hi", created_at=T, assistant_id="demo", last_seq=3)  # fmt: skip
    # As a device kept it from an older server (GET /runs had no usageEstimated): not an estimate.
    stored = {"run_id": "r", "message_id": reply.id, "assistant_id": "fake", "status": "completed", "error": None,
              "prompt_tokens": 7, "completion_tokens": 600, "usage_reported": True}  # fmt: skip
    reported = RunSummary(**stored)
    estimated = reported.model_copy(update={"assistant_id": "demo", "usage_estimated": True})
    counted = reported.model_copy(update={"prompt_tokens": 0, "completion_tokens": 3, "usage_reported": False})

    def usage(run: RunSummary) -> str:
        html = message_html.message_item(message_html.Item(message=reply, run=run))
        return html.split('<span class="usage">')[1].split("</span>")[0]

    assert usage(reported) == "7 + 600 tokens"
    assert usage(estimated) == "about 7 + 600 tokens (estimated)"
    assert usage(counted) == "about 3 tokens (counted here: the service did not say)"
