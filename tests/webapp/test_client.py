"""The client's UI logic (webapp/app.py) under CPython, with a recording view."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from shared.ids import Uuid7Generator
from shared.models import Session
from webapp.app import AuthFailed, Client, Services
from webapp.store import FilePersistence, LocalStore
from webapp.transport import NetworkError


class RecordingView:
    def __init__(self) -> None:
        self.regions: dict[str, str] = {}
        self.status = ""
        self.restored: list[tuple[str, str]] = []

    def set_html(self, region: str, html: str) -> None:
        self.regions[region] = html

    def set_status(self, status: str, text: str) -> None:
        self.status = status

    def focus(self, selector: str) -> None:
        pass

    def restore_text(self, selector: str, text: str) -> None:
        self.restored.append((selector, text))


class OfflineTransport:
    """The server is out of reach: everything stays local."""

    async def updates(self, after_seq: int, limit: int) -> None:
        raise NetworkError("offline")

    state = submit = live = updates


class FakeAuth:
    def __init__(self) -> None:
        self.accept = True

    async def signin(self, username: str, password: str, signup: bool) -> Session:
        if not self.accept:
            raise AuthFailed("Wrong username or password.")
        return Session(user_id="u1", device_id="d1", token="t")


def make_client(tmp_path: Path) -> tuple[Client, RecordingView, FakeAuth]:
    view, auth = RecordingView(), FakeAuth()
    ticks = itertools.count(1_700_000_000_000)
    services = Services(
        store=LocalStore(str(tmp_path / "local.db"), FilePersistence()),
        view=view,
        auth=auth,
        transport=OfflineTransport(),  # type: ignore[arg-type]
        new_id=Uuid7Generator(ticks.__next__, os.urandom),
        now=lambda: "2026-11-30T12:00:00.000Z",
    )
    return Client(services), view, auth


async def test_sign_in_create_a_chat_and_send_offline(tmp_path: Path) -> None:
    client, view, auth = make_client(tmp_path)
    client.start()
    assert 'data-action="signin"' in view.regions["root"]
    auth.accept = False
    await client.dispatch("signin", {"username": "ann", "password": "wrong one"})
    assert "Wrong username or password." in view.regions["root"]
    auth.accept = True
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert "ann" in view.regions["root"] and "New chat" in view.regions["root"]

    await client.dispatch("new-chat", {})
    assert "Chat 1" in view.regions["chat-list"] and 'class="chat-item selected pending"' in view.regions["chat-list"]
    assert '<option value="demo" selected>' in view.regions["chat"]  # the assistant every server has
    await client.dispatch("send", {"text": "  hello <b>world</b>  ", "assistant": "demo"})
    assert "hello &lt;b&gt;world&lt;/b&gt;" in view.regions["messages"]  # escaped
    assert 'class="message user pending"' in view.regions["messages"]
    # The question is asked too, offline: a reply waits, and can be stopped.
    assert 'class="message assistant pending queued"' in view.regions["messages"]
    assert "Waiting for the assistant" in view.regions["messages"] and ">Stop<" in view.regions["messages"]
    await client.dispatch("send", {"text": "   "})  # blank: nothing
    assert view.regions["messages"].count("<li") == 2
    assert [p.event.type for p in client.store.outbox()] == ["ChatCreated", "MessageAppended", "AssistantRunRequested"]
    await client.dispatch("send", {"text": "no answer needed", "assistant": ""})
    assert client.store.pending_count() == 4 and client.store.setting("assistant") == ""


async def test_a_message_that_could_not_be_saved_goes_back_into_the_composer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, view, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})

    async def disk_full(event: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(client.store, "add_local", disk_full)
    with pytest.raises(OSError):
        await client.dispatch("send", {"text": "keep me"})
    assert view.restored == [("textarea[name=text]", "keep me")]


async def test_unknown_actions_are_errors(tmp_path: Path) -> None:
    client, _, _ = make_client(tmp_path)
    with pytest.raises(ValueError, match="unknown action"):
        await client.dispatch("explode", {})


async def test_drafts_are_kept_per_chat_and_cleared_by_sending(tmp_path: Path) -> None:
    client, view, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    first = client.selected
    await client.dispatch("draft", {"text": "half a <thought>", "chat": first})
    await client.dispatch("new-chat", {})
    assert "half a" not in view.regions["chat"]  # the new chat's composer is empty
    await client.dispatch("select-chat", {"id": first})
    assert "half a &lt;thought&gt;</textarea>" in view.regions["chat"]

    # A reload (memory gone, database kept) brings it back too.
    client.store.close()
    reloaded, view, _ = make_client(tmp_path)
    reloaded.start()
    await reloaded.dispatch("select-chat", {"id": first})
    assert "half a &lt;thought&gt;</textarea>" in view.regions["chat"]
    await reloaded.dispatch("send", {"text": "the whole thought"})
    assert reloaded.store.draft(first) == ""


async def test_edit_and_withdraw_a_message_before_it_is_sent(tmp_path: Path) -> None:
    client, view, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.dispatch("send", {"text": "frist", "assistant": ""})
    [message] = client.store.messages(client.selected or "")
    assert 'data-action="edit-message"' in view.regions["messages"] and ">Withdraw<" in view.regions["messages"]

    await client.dispatch("edit-message", {"id": message.id})
    assert "Editing a message" in view.regions["chat"] and "frist</textarea>" in view.regions["chat"]
    assert "data-draft" not in view.regions["chat"]  # the text being edited is not the chat's draft
    await client.dispatch("send", {"text": "first"})
    assert "Editing a message" not in view.regions["chat"]
    assert [m.content for m in client.store.messages(message.chat_id)] == ["first"]
    assert [p.event.type for p in client.store.outbox()] == ["ChatCreated", "MessageAppended"]  # coalesced

    await client.dispatch("remove-message", {"id": message.id})
    assert client.store.messages(message.chat_id) == []
    assert [p.event.type for p in client.store.outbox()] == ["ChatCreated"]  # withdrawn: nothing goes out


async def test_a_reply_grows_from_deltas_and_can_be_stopped_or_retried(tmp_path: Path) -> None:
    from shared.models import DeltaFrame, DomainEvent, EventType, LoggedEvent, Message

    client, view, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.dispatch("send", {"text": "hi", "assistant": "demo"})
    question, reply = client.store.messages(client.selected or "")
    assert reply.status == "queued" and reply.parent_id == question.id and reply.run_id

    def logged(seq: int, kind: EventType, payload: object, event_id: str | None = None) -> LoggedEvent:
        return LoggedEvent(seq=seq, origin="server", event_id=event_id or client.s.new_id(), type=kind,
                           payload=payload, created_at="2026-11-30T12:00:00.000Z")  # type: ignore[arg-type]

    # The server starts streaming: deltas show at once; one that skips ahead waits for a checkpoint.
    streaming = reply.model_copy(update={"status": "streaming", "content": ""})
    pending = [p.event for p in client.store.outbox()]
    await client.store.apply_remote([logged(i + 1, e.type, e.payload, e.event_id) for i, e in enumerate(pending)]
                                    + [logged(4, EventType.MESSAGE_EDITED, streaming)], 4)
    client.redraw()
    for offset, text in ((0, "Hel"), (3, "lo"), (2, "llo"), (9, "far ahead")):
        client._on_delta(DeltaFrame(message_id=reply.id, run_id=reply.run_id or "", offset=offset, text=text))
    assert '<div class="content">Hello</div>' in view.regions["messages"] and "far ahead" not in view.regions["messages"]
    # A checkpoint that knows more replaces what the deltas built.
    checkpoint = streaming.model_copy(update={"content": "Hello, world"})
    await client.store.apply_remote([logged(5, EventType.MESSAGE_EDITED, checkpoint)], 5)
    client.redraw()
    assert '<div class="content">Hello, world</div>' in view.regions["messages"] and client.streaming == {}

    await client.dispatch("stop-run", {"id": reply.id})
    [stop] = [p.event for p in client.store.outbox()]
    assert stop.type == "AssistantRunCancelled" and stop.payload.message_id == reply.id  # type: ignore[union-attr]
    assert "Stopped." in view.regions["messages"] and ">Retry<" in view.regions["messages"]
    await client.dispatch("retry-run", {"id": reply.id})
    retry = [p.event for p in client.store.outbox()][-1]
    assert isinstance(retry, DomainEvent) and retry.type == "AssistantRunRequested"
    assert retry.payload.parent_id == question.id and retry.payload.message_id != reply.id  # type: ignore[union-attr]
    assert isinstance(checkpoint, Message)


async def test_the_assistant_chosen_is_remembered_when_chosen(tmp_path: Path) -> None:
    client, view, _ = make_client(tmp_path)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.dispatch("choose-assistant", {"assistant": "local-tools"})
    await client.dispatch("new-chat", {})
    assert '<option value="local-tools" selected>' in view.regions["chat"]
