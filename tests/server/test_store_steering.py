"""The EventStore contract for the account's settings, presets, Continue and queued follow-ups:
each new event accepted or rejected (with its sentence), the state it leaves, the runs it queues,
compaction and the state path. One suite for both backends (SQLite and PostgreSQL), as
tests/server/test_store_contract.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from server.event_store import SqlEventStore
from server.run_store import SqlRunStore
from shared.models import SETTINGS_ID, Message
from tests.server.events import T, chat_created, event, message, new_id
from tests.server.replay import as_state, replay
from tests.server.stores import Clock
from tests.server.test_store_contract import clock_store, parse, store

__all__ = ["clock_store", "store"]  # (the suite's fixtures, both backends)


def settings(instructions: str = "Metric units.", id: str = SETTINGS_ID, **more: Any) -> dict[str, Any]:
    return event("SettingsUpdated", {"id": id, "instructions": instructions, "createdAt": T, **more})


def preset(kind: str, id: str, name: str = "Terse", **more: Any) -> dict[str, Any]:
    return event(kind, {"id": id, "name": name, "assistantId": "demo", "instructions": "Be terse.", "createdAt": T, **more})


def user(id: str, chat: str, content: str = "hi", status: str = "completed", parent: str | None = None, **more: Any) -> dict[str, Any]:
    payload = {"id": id, "chatId": chat, "role": "user", "content": content, "status": status, "parentId": parent, "createdAt": T}
    return event("MessageAppended", {**payload, **more})


def edited(row: Message, **change: Any) -> dict[str, Any]:
    payload = row.model_copy(update={"updated_at": None, "last_seq": None, **change}).wire()
    return event("MessageEdited", payload)


def request(chat: str, question: str, reply: str, run: str, assistant: str = "demo") -> dict[str, Any]:
    payload = {"runId": run, "chatId": chat, "parentId": question, "messageId": reply, "assistantId": assistant}
    return event("AssistantRunRequested", payload)


def continued(chat: str, reply: str, run: str, assistant: str = "demo") -> dict[str, Any]:
    return event("AssistantRunContinued", {"runId": run, "chatId": chat, "messageId": reply, "assistantId": assistant})


def sent(chat: str, queued: str, parent: str | None, run: str | None = None, reply: str | None = None, **more: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"messageId": queued, "chatId": chat, "parentId": parent, **more}
    if run is not None:
        payload |= {"runId": run, "replyId": reply, "assistantId": more.get("assistantId", "demo")}
    return event("QueuedMessageSent", payload)


async def append(store: SqlEventStore, account: str, *raw: dict[str, Any]) -> list[tuple[str, str | None]]:
    results, _ = await store.append(account, "dev", parse(*raw))
    return [(r.status, r.error) for r in results]


async def rows(store: SqlEventStore, account: str) -> dict[str, Message]:
    page = await store.read_state(account, None, None, 1000, None)
    return {m.id: m for m in page.snapshot.messages}


async def runs(store: SqlEventStore, account: str, chat: str) -> list[tuple[str, str, str, str]]:
    """The chat's runs: (run, reply, assistant, status), oldest request first."""
    return [(r.id, r.message_id, r.assistant_id, r.status) for r in await SqlRunStore(store.db).chat_runs(account, chat)]


ACCEPTED = ("accepted", None)


async def test_the_settings_have_one_id_and_are_replaced_whole(store: SqlEventStore) -> None:
    account = new_id()
    assert await append(store, account, settings(id=new_id())) == [
        ("rejected", f"an account's settings have the id {SETTINGS_ID}")
    ]
    assert await append(store, account, settings("First."), settings("Second.", defaultPresetId=new_id())) == [ACCEPTED] * 2
    page = await store.read_state(account, None, None, 100, None)
    [row] = page.snapshot.settings
    assert (row.id, row.instructions, row.last_seq) == (SETTINGS_ID, "Second.", 2)


async def test_a_preset_is_created_once_and_changed_or_deleted_only_when_it_exists(store: SqlEventStore) -> None:
    account, terse, chat = new_id(), new_id(), new_id()
    assert await append(store, account, preset("PresetUpdated", terse), event("PresetDeleted", {"id": terse})) == [
        ("rejected", "unknown preset")
    ] * 2
    assert await append(store, account, preset("PresetCreated", terse), preset("PresetCreated", terse, "Again")) == [
        ACCEPTED, ("rejected", "this preset already exists"),
    ]  # fmt: skip
    assert await append(store, account, preset("PresetUpdated", terse, "Very terse", temperature=0.25, maxTokens=64)) == [ACCEPTED]
    [row] = (await store.read_state(account, None, None, 100, None)).snapshot.presets
    assert (row.name, row.temperature, row.max_tokens, row.assistant_id) == ("Very terse", 0.25, 64, "demo")
    # A chat that names it keeps the id when it goes (a preset that is gone counts as none).
    named = event("ChatCreated", {"id": chat, "title": "t", "createdAt": T, "presetId": terse, "instructions": "Two of us."})
    assert await append(store, account, named, event("PresetDeleted", {"id": terse})) == [ACCEPTED] * 2
    page = await store.read_state(account, None, None, 100, None)
    assert page.snapshot.presets == [] and page.snapshot.chats[0].preset_id == terse
    assert page.snapshot.chats[0].instructions == "Two of us."
    assert await append(store, account, preset("PresetUpdated", terse)) == [("rejected", "unknown preset")]
    assert await append(store, account, preset("PresetCreated", terse, "Back")) == [ACCEPTED]  # (its id, again)


async def ended_reply(store: SqlEventStore, account: str, chat: str, status: str = "completed") -> tuple[str, str, str]:
    """A question and a reply its run ended (``status``), with some text: (question, reply, run)."""
    question, reply, run = new_id(), new_id(), new_id()
    assert await append(store, account, chat_created(chat), user(question, chat), request(chat, question, reply, run)) == [ACCEPTED] * 3
    row = (await rows(store, account))[reply]
    assert await append(store, account, edited(row, status=status, content="Half of it", finish_reason="length")) == [ACCEPTED]
    return question, reply, run


async def test_continue_reopens_an_ended_reply_with_a_new_run_and_keeps_its_text(store: SqlEventStore) -> None:
    account, chat = new_id(), new_id()
    question, reply, first = await ended_reply(store, account, chat)
    second = new_id()
    assert await append(store, account, continued(chat, reply, second)) == [ACCEPTED]
    row = (await rows(store, account))[reply]
    assert (row.status, row.run_id, row.finish_reason, row.content) == ("queued", second, None, "Half of it")
    # The server queued a run for it, as for a request (the first one's row is its own).
    assert await runs(store, account, chat) == [(first, reply, "demo", "queued"), (second, reply, "demo", "queued")]
    # Not while it is being written; not with a runId used before; not twice.
    assert await append(store, account, continued(chat, reply, new_id()), continued(chat, reply, first)) == [
        ("rejected", "this reply is still being written"),
        ("rejected", "this reply is still being written"),
    ]
    # A late checkpoint, or a late Stop, of the run before cannot overwrite or stop the
    # continuation; the new run can write.
    assert await append(
        store, account,
        edited(row, run_id=first, status="completed", content="Old"),
        event("AssistantRunCancelled", {"runId": first, "messageId": reply}),
    ) == [("rejected", "this reply is being written by another run")] * 2  # fmt: skip
    assert await append(store, account, edited(row, status="streaming", content="Half of it, and more")) == [ACCEPTED]
    assert await append(store, account, edited(row, status="completed", content="Half of it, and more.")) == [ACCEPTED]
    assert await append(store, account, continued(chat, reply, first)) == [
        ("rejected", "this run already exists (a new request needs a new runId)")
    ]
    assert (await rows(store, account))[question].status == "completed"


async def test_continue_is_refused_for_what_is_not_an_ended_reply_of_its_chat(store: SqlEventStore) -> None:
    account, chat, other = new_id(), new_id(), new_id()
    question, reply, _ = await ended_reply(store, account, chat, status="cancelled")
    assert await append(store, account, chat_created(other)) == [ACCEPTED]
    assert await append(
        store,
        account,
        continued(chat, new_id(), new_id()),
        continued(chat, question, new_id()),
        continued(other, reply, new_id()),
        continued(new_id(), reply, new_id()),
    ) == [
        ("rejected", "unknown message"),
        ("rejected", "only an assistant's reply can be continued"),
        ("rejected", "this reply is not in this chat"),
        ("rejected", "unknown chat"),
    ]
    assert await append(store, account, continued(chat, reply, new_id())) == [ACCEPTED]  # (a Stopped one may)


async def test_a_run_is_queued_only_for_an_assistant_the_server_has(store: SqlEventStore) -> None:
    """A Continue or a queued message sent for a device's own assistant is answered by that device:
    the reply is reopened (or made) all the same, but no run is queued here."""
    store.serves = lambda assistant_id: assistant_id == "demo"
    account, chat = new_id(), new_id()
    _, reply, first = await ended_reply(store, account, chat)
    local = new_id()
    assert await append(store, account, continued(chat, reply, local, assistant="on-device")) == [ACCEPTED]
    assert (await rows(store, account))[reply].run_id == local
    queued, answer = new_id(), new_id()
    assert await append(
        store, account, user(queued, chat, status="queued"), sent(chat, queued, reply, new_id(), answer, assistantId="on-device")
    ) == [ACCEPTED] * 2
    assert (await rows(store, account))[answer].status == "queued"
    assert await runs(store, account, chat) == [(first, reply, "demo", "queued")]


async def test_a_queued_message_is_sent_once_and_answered_by_the_run_it_names(store: SqlEventStore) -> None:
    account, chat = new_id(), new_id()
    _, reply, first = await ended_reply(store, account, chat)
    queued, answer, run = new_id(), new_id(), new_id()
    terse = new_id()
    assert await append(store, account, user(queued, chat, "And then?", status="queued", presetId=terse)) == [ACCEPTED]
    assert (await rows(store, account))[queued].is_queued_follow_up
    assert await append(store, account, sent(chat, queued, reply, run, answer, presetId=terse)) == [ACCEPTED]
    state = await rows(store, account)
    assert (state[queued].status, state[queued].parent_id, state[queued].content) == ("completed", reply, "And then?")
    made = state[answer]
    assert (made.role, made.status, made.parent_id, made.run_id, made.assistant_id, made.preset_id) == (
        "assistant", "queued", queued, run, "demo", terse,
    )  # fmt: skip
    assert await runs(store, account, chat) == [(first, reply, "demo", "queued"), (run, answer, "demo", "queued")]
    # A second device's (or the server's) dispatch of the same message comes too late.
    assert await append(store, account, sent(chat, queued, reply, new_id(), new_id()), sent(chat, queued, reply)) == [
        ("rejected", "this message was already sent")
    ] * 2
    assert len(await runs(store, account, chat)) == 2
    # Sent, it cannot go back to the queue (its text may still change).
    assert await append(store, account, edited(state[queued], status="queued")) == [
        ("rejected", "the run of this message has ended (completed)")
    ]
    assert await append(store, account, edited(state[queued], content="And after that?")) == [ACCEPTED]


async def test_a_queued_message_is_edited_or_removed_while_queued_and_only_sent_by_its_event(store: SqlEventStore) -> None:
    account, chat = new_id(), new_id()
    _, reply, _ = await ended_reply(store, account, chat)
    queued, removed = new_id(), new_id()
    assert await append(store, account, user(queued, chat, "v1", status="queued"), user(removed, chat, status="queued")) == [ACCEPTED] * 2
    row = (await rows(store, account))[queued]
    assert await append(store, account, edited(row, content="v2")) == [ACCEPTED]
    assert await append(store, account, edited(row, status="completed"), edited(row, role="assistant")) == [
        ("rejected", "a queued message stays queued until it is sent (QueuedMessageSent) or removed")
    ] * 2
    assert await append(store, account, event("AssistantRunCancelled", {"runId": new_id(), "messageId": queued})) == [
        ("rejected", "only an answer can be stopped (a queued message is removed instead)")
    ]
    assert await append(store, account, event("MessageDeleted", {"id": removed, "chatId": chat})) == [ACCEPTED]
    assert await append(store, account, sent(chat, removed, reply)) == [("rejected", "unknown message")]
    # Sent without a run ("No answer"): no reply is made, no run is queued.
    assert await append(store, account, sent(chat, queued, reply)) == [ACCEPTED]
    state = await rows(store, account)
    assert (state[queued].status, state[queued].content) == ("completed", "v2")
    assert len(state) == 3 and len(await runs(store, account, chat)) == 1


async def test_a_queued_message_is_sent_only_after_a_message_of_its_chat_with_a_new_run_and_reply(store: SqlEventStore) -> None:
    account, chat, other = new_id(), new_id(), new_id()
    question, reply, first = await ended_reply(store, account, chat)
    queued, waiting, elsewhere = new_id(), new_id(), new_id()
    assert await append(
        store, account,
        chat_created(other), user(elsewhere, other),
        user(queued, chat, status="queued"), user(waiting, chat, status="queued"),
    ) == [ACCEPTED] * 4  # fmt: skip
    assert await append(
        store,
        account,
        sent(chat, queued, elsewhere),
        sent(chat, queued, queued),
        sent(chat, queued, waiting),
        sent(chat, queued, new_id()),
        sent(chat, queued, reply, first, new_id()),
        sent(chat, queued, reply, new_id(), question),
        sent(chat, reply, question),
        sent(other, queued, reply),
        sent(new_id(), queued, reply),
    ) == [
        ("rejected", "the message to follow (parentId) is not in this chat"),
        ("rejected", "the message to follow (parentId) is not in this chat"),
        ("rejected", "the message to follow (parentId) is still queued"),
        ("rejected", "the message to follow (parentId) is not in this chat"),
        ("rejected", "this run already exists (a new request needs a new runId)"),
        ("rejected", "the reply (replyId) already exists"),
        ("rejected", "only a queued user message can be sent"),
        ("rejected", "this message is not in this chat"),
        ("rejected", "unknown chat"),
    ]
    # (A chat's first message may be sent with no parent.)
    assert await append(store, account, sent(chat, queued, None)) == [ACCEPTED]


async def test_a_batch_sees_its_own_queued_message_sent_and_its_reply(store: SqlEventStore) -> None:
    """In one transaction: queued, sent with a run, its reply written by that run, then a second
    dispatch of it and a request reusing the run's id, both refused."""
    account, chat = new_id(), new_id()
    queued, answer, run = new_id(), new_id(), new_id()
    reply_row = Message(id=answer, chat_id=chat, role="assistant", content="Yes.", parent_id=queued, status="completed",
                        assistant_id="demo", run_id=run, created_at=T)  # fmt: skip
    assert await append(
        store,
        account,
        chat_created(chat),
        user(queued, chat, status="queued"),
        sent(chat, queued, None, run, answer),
        event("MessageEdited", reply_row.wire()),
        sent(chat, queued, None),
        request(chat, queued, new_id(), run),
        continued(chat, answer, run),
    ) == [ACCEPTED] * 4 + [
        ("rejected", "this message was already sent"),
        ("rejected", "this run already exists (a new request needs a new runId)"),
        ("rejected", "this run already exists (a new request needs a new runId)"),
    ]
    state = await rows(store, account)
    assert (state[queued].status, state[answer].status, state[answer].content) == ("completed", "completed", "Yes.")


async def test_deleting_the_chat_clears_its_queue(store: SqlEventStore) -> None:
    account, chat = new_id(), new_id()
    _, reply, _ = await ended_reply(store, account, chat)
    queued = new_id()
    assert await append(store, account, user(queued, chat, status="queued"), event("ChatDeleted", {"id": chat})) == [ACCEPTED] * 2
    assert await append(store, account, sent(chat, queued, reply, new_id(), new_id())) == [("rejected", "unknown chat")]
    assert await rows(store, account) == {}


async def test_the_state_pages_the_settings_and_presets_first_and_counts_them(store: SqlEventStore) -> None:
    account, chat = new_id(), new_id()
    presets = [new_id() for _ in range(3)]
    await append(store, account, chat_created(chat), message("MessageAppended", new_id(), chat), settings())
    await append(store, account, *(preset("PresetCreated", p, f"P{n}") for n, p in enumerate(presets)))
    first = await store.read_state(account, None, None, 2, None)
    assert first.total == 1 + 3 + 1 + 1
    assert [len(first.snapshot.settings), len(first.snapshot.presets), first.snapshot.chats] == [1, 1, []]
    pages = [first]
    while pages[-1].next_page is not None:
        pages.append(await store.read_state(account, first.up_to_seq, None, 2, pages[-1].next_page))
    assert [(len(p.snapshot.settings), len(p.snapshot.presets), len(p.snapshot.chats), len(p.snapshot.messages)) for p in pages] == [
        (1, 1, 0, 0), (0, 2, 0, 0), (0, 0, 1, 1),
    ]  # fmt: skip
    assert [p.total for p in pages] == [6, None, None]
    # One chat's state holds no account's rows.
    one = await store.read_state(account, None, chat, 100, None)
    assert (one.total, one.snapshot.settings, one.snapshot.presets, len(one.snapshot.messages)) == (2, [], [], 1)


async def test_a_row_only_patched_after_a_snapshot_s_seq_is_in_that_snapshot(store: SqlEventStore) -> None:
    """A queued message sent (a patch of it) after N: a device reading the snapshot at N, then
    the log after N, must still have it (the log only patches it). It comes last, as it is now,
    and the log's patch then changes nothing."""
    account, chat = new_id(), new_id()
    _, reply, _ = await ended_reply(store, account, chat)
    queued, other = new_id(), new_id()
    await append(store, account, user(queued, chat, status="queued"), user(other, chat))
    n = await store.current_seq(account)
    first = await store.read_state(account, n, None, 3, None)
    assert await append(store, account, sent(chat, queued, reply, new_id(), new_id()), continued(chat, reply, new_id())) == [ACCEPTED] * 2
    pages, messages = [first], list(first.snapshot.messages)
    while pages[-1].next_page is not None:
        pages.append(await store.read_state(account, n, None, 3, pages[-1].next_page))
        messages += pages[-1].snapshot.messages
    snapshot = pages[0].snapshot.model_copy(update={"messages": messages})
    after = (await store.read_updates(account, n, 100)).events
    current = await store.read_state(account, None, None, 100, None)
    assert replay(after, snapshot) == as_state(current.snapshot)
    assert {m.id for m in messages} >= {queued, reply}


async def test_compaction_keeps_a_sent_message_s_event_while_either_row_needs_it(clock_store: tuple[Clock, SqlEventStore]) -> None:
    """A QueuedMessageSent with a run changes two rows: the later events of its reply alone do not
    replace it (its message would be queued again on replay), nor do its message's alone."""
    clock, store = clock_store
    account, chat = new_id(), new_id()
    _, reply, _ = await ended_reply(store, account, chat)
    queued, answer = new_id(), new_id()
    await append(store, account, user(queued, chat, status="queued"), sent(chat, queued, reply, new_id(), answer))
    for changed in (queued, answer):  # its message's text edited (its reply made by it alone), then its reply written
        await append(store, account, edited((await rows(store, account))[changed], content="Changed."))
        clock.now += timedelta(seconds=1)
        await store.compact(account, retention_seconds=10**9, grace_seconds=0)
        events = (await store.read_updates(account, 0, 100)).events
        assert "QueuedMessageSent" in [e.type for e in events]
        current = await store.read_state(account, None, None, 100, None)
        assert replay(events) == as_state(current.snapshot)
    # Deleting the chat lets it go with the rest.
    await append(store, account, event("ChatDeleted", {"id": chat}))
    clock.now += timedelta(seconds=1)
    await store.compact(account, retention_seconds=10**9, grace_seconds=0)
    assert [e.type for e in (await store.read_updates(account, 0, 100)).events] == ["ChatDeleted"]
