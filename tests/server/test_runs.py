"""Remote assistant runs (server/runs.py) against a fake OpenAI-compatible upstream, in-process
on both backends: streamed to the end with nobody listening, paid once per request, failures and
retries, Stop, one answer at a time per chat. No test waits on the clock: each waits for what it
needs to see (a status, delta frames, the worker gone idle), and the checkpoint interval is small."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from quart import Quart
from quart.typing import TestClientProtocol as Client
from quart.typing import TestWebsocketConnectionProtocol as Websocket

from server.app import create_app
from server.assistants import Assistant, AssistantConfig
from server.config import Settings
from server.run_store import SqlRunStore
from server.runs import INTERRUPTED, RunWorker
from shared.assistants import DEFAULT_SAMPLING, Piece, Sampling, Turn
from shared.models import DeltaFrame, DomainEvent, EventType, format_time
from tests.conftest import QUICK_PASSWORDS
from tests.fake_upstream import FakeUpstream, full_answer
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, event, message, new_id
from tests.server.stores import Clock, open_store


def run_settings(database_url: str, upstream: FakeUpstream, **overrides: Any) -> Settings:
    """The server's settings for these tests: the fake upstream as the assistant "fake"; a reply's
    checkpoints (and the reads of whether it was stopped) as often as its size allows, rather than
    once a second, so that no test waits for a second to pass. A stalled upstream fails a run after
    10 s (a loaded machine held the fake upstream, in this process, back for more than 1 s between
    two words: the suite's third loaded run failed a streaming test so); the stall's own test asks for 1 s."""
    defaults: dict[str, Any] = {
        "ping_seconds": 0.5, "run_poll_seconds": 0.1, "upstream_timeout_seconds": 10.0, "run_checkpoint_seconds": 0.05,
    }  # fmt: skip
    return Settings(**QUICK_PASSWORDS, database_url=database_url, **{"assistants": upstream.config(), **defaults, **overrides})


@pytest.fixture
async def app(database_url: str, upstream: FakeUpstream) -> AsyncIterator[Quart]:
    app = create_app(run_settings(database_url, upstream))
    async with app.test_app():
        yield app


@contextlib.asynccontextmanager
async def serving(database_url: str, upstream: FakeUpstream, **overrides: Any) -> AsyncIterator[tuple[Quart, Client]]:
    """An app of these settings, and a client of it, while it serves."""
    app = create_app(run_settings(database_url, upstream, **overrides))
    async with app.test_app():
        yield app, app.test_client(use_cookies=False)


async def post(client: Client, session: dict[str, Any], *events: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post("/sync/events", json={"events": list(events)}, headers=bearer(session))
    assert response.status_code == 200, await response.get_data()
    results: list[dict[str, Any]] = (await response.get_json())["results"]
    return results


async def a_chat_with_a_question(client: Client, session: dict[str, Any]) -> tuple[str, str]:
    chat, question = new_id(), new_id()
    await post(client, session, chat_created(chat), message("MessageAppended", question, chat, "What is up?"))
    return chat, question


def run_request(chat: str, parent: str, assistant: str = "fake") -> dict[str, Any]:
    payload = {"runId": new_id(), "chatId": chat, "parentId": parent, "messageId": new_id(), "assistantId": assistant}
    return event("AssistantRunRequested", payload)


async def a_requested_run(
    client: Client, session: dict[str, Any], assistant: str = "fake"
) -> tuple[str, str, dict[str, Any]]:
    """A chat with a question, and a run asked for its answer: (chat, question, the request)."""
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question, assistant)
    await post(client, session, request)
    return chat, question, request


async def reply(client: Client, session: dict[str, Any], chat: str, message_id: str) -> dict[str, Any] | None:
    response = await client.get(f"/sync/state?chatId={chat}", headers=bearer(session))
    messages = (await response.get_json())["snapshot"]["messages"]
    return next((m for m in messages if m["id"] == message_id), None)


async def until_status(client: Client, session: dict[str, Any], chat: str, message_id: str, *statuses: str) -> dict[str, Any]:
    for _ in range(400):
        found = await reply(client, session, chat, message_id)
        if found is not None and found["status"] in statuses:
            return found
        await asyncio.sleep(0.025)
    raise AssertionError(f"the reply never became {statuses}: {found}")


async def deltas(ws: Websocket, count: int) -> list[dict[str, Any]]:
    """The next ``count`` delta frames a live socket gets (the worker has had that much text)."""
    found: list[dict[str, Any]] = []
    while len(found) < count:
        frame = json.loads(await asyncio.wait_for(ws.receive(), 5))
        if frame["type"] == "delta":
            found.append(frame)
    return found


async def run_row(app: Quart, run_id: str) -> dict[str, Any]:
    db = app.extensions["store"].db
    row = await db.read_one(
        "SELECT status, error, prompt_tokens, completion_tokens, usage_reported, upstream_calls, usage_estimated"
        " FROM runs WHERE id = ?",
        run_id,
    )
    assert row is not None
    return dict(zip(["status", "error", "prompt", "completion", "reported", "calls", "estimated"], row))


async def until_run(app: Quart, run_id: str, status: str) -> dict[str, Any]:
    """The run's row once it has this status (the reply's last edit is logged just before it)."""
    for _ in range(400):
        row = await run_row(app, run_id)
        if row["status"] == status:
            return row
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {run_id} is {row['status']}, not {status}")


async def until_idle(app: Quart) -> None:
    """Until the worker answers no run: none it took up can write anything more."""
    for _ in range(400):
        if app.extensions["runs"].running == 0:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"the worker is still answering {app.extensions['runs'].running} runs")


async def log_of(client: Client, session: dict[str, Any], after: int = 0) -> list[dict[str, Any]]:
    response = await client.get(f"/sync/updates?afterSeq={after}&limit=1000", headers=bearer(session))
    events: list[dict[str, Any]] = (await response.get_json())["events"]
    return events


async def test_the_assistants_are_listed(client: Client) -> None:
    session = await signup(client)
    response = await client.get("/assistants", headers=bearer(session))
    assert await response.get_json() == [{"id": "fake", "name": "Fake", "kind": "remote", "model": "fake-1", "vision": False}]
    assert (await client.get("/assistants")).status_code == 401


async def test_a_reply_streams_and_is_finished_when_every_client_has_gone(
    app: Quart, client: Client, upstream: FakeUpstream
) -> None:
    # 600 words (4.3 KB): long enough for a checkpoint along the way (one comes once the text pays
    # for it, server/runs.py CheckpointPlan: at about 2.3 KB).
    upstream.delay, upstream.words = 0.004, 600
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    reply_id = request["payload"]["messageId"]
    async with client.websocket("/sync/live?afterSeq=0", headers=bearer(session)) as ws:
        await post(client, session, request)
        first = await deltas(ws, 5)
    # The only client went away mid-stream; the server reads on to the end.
    assert all(d["messageId"] == reply_id and d["runId"] == request["payload"]["runId"] for d in first)
    text = "".join(d["text"] for d in first)
    assert [d["offset"] for d in first] == [len("".join(x["text"] for x in first[:i])) for i in range(5)]
    assert full_answer(600).startswith(text)

    done = await until_status(client, session, chat, reply_id, "completed")
    assert done["content"] == full_answer(600)
    assert done["role"] == "assistant" and done["parentId"] == question and done["assistantId"] == "fake"
    log = await log_of(client, session)
    edits = [e["payload"] for e in log if e["type"] == "MessageEdited"]
    assert edits[0]["status"] == "streaming" and edits[-1] == {**edits[-1], "status": "completed"}
    assert any(e["status"] == "streaming" and e["content"] for e in edits)  # a checkpoint, part-way
    assert len(edits) < 10  # checkpoints, not one event per token
    assert all(e["origin"] == "server" for e in log if e["type"] == "MessageEdited")
    # The model saw the conversation, and was asked for its usage, which the run recorded.
    [sent] = upstream.requests
    assert sent["messages"] == [{"role": "user", "content": "What is up?"}] and sent["stream_options"]["include_usage"]
    assert await until_run(app, request["payload"]["runId"], "completed") == {
        "status": "completed", "error": None, "prompt": 7, "completion": 600, "reported": 1, "calls": 1, "estimated": 0,
    }
    # ...and what it cost is shown to the account, per chat.
    runs = await (await client.get(f"/runs?chatId={chat}", headers=bearer(session))).get_json()
    assert runs == [{
        "runId": request["payload"]["runId"], "messageId": reply_id, "assistantId": "fake", "status": "completed",
        "error": None, "promptTokens": 7, "completionTokens": 600, "usageReported": True, "usageEstimated": False,
    }]
    other = await signup(client, "other")
    assert await (await client.get(f"/runs?chatId={chat}", headers=bearer(other))).get_json() == []
    assert (await client.get("/runs", headers=bearer(session))).status_code == 400


async def test_the_demo_models_usage_is_an_estimate_and_an_upstreams_is_not(
    database_url: str, upstream: FakeUpstream
) -> None:
    """The demo model counts words: its usage is reported, and marked as its estimate; the usage
    an OpenAI-compatible service reports is its own count."""
    assistants = json.dumps([{"id": "demo", "name": "Demo", "provider": "demo"}, *json.loads(upstream.config())])
    settings = Settings(**QUICK_PASSWORDS, database_url=database_url, assistants=assistants, run_poll_seconds=0.1, demo_seconds_per_word=0.001)
    app = create_app(settings)
    async with app.test_app():
        client = app.test_client(use_cookies=False)
        session = await signup(client)
        for assistant, estimated in (("demo", True), ("fake", False)):
            chat, _, request = await a_requested_run(client, session, assistant)
            row = await until_run(app, request["payload"]["runId"], "completed")
            assert (row["reported"], row["estimated"]) == (1, int(estimated))
            [run] = await (await client.get(f"/runs?chatId={chat}", headers=bearer(session))).get_json()
            assert (run["usageReported"], run["usageEstimated"]) == (True, estimated)
            assert run["completionTokens"] > 0


async def test_a_resubmitted_request_calls_the_upstream_once(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    [first] = await post(client, session, request)
    [again] = await post(client, session, request)
    assert again == {**first, "status": "duplicate"}
    await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    [late] = await post(client, session, request)
    assert late["status"] == "duplicate"
    # A duplicate is never appended, so no second run exists to start (a run is a row of its own).
    runs = await app.extensions["store"].db.read_one("SELECT count(*) FROM runs")
    assert runs is not None and runs[0] == 1 and (await run_row(app, request["payload"]["runId"]))["calls"] == 1
    assert upstream.calls == 1


@pytest.mark.parametrize("mode", ["502", "stall", "broken"])
async def test_an_upstream_failure_fails_the_run_and_retry_is_a_new_run(database_url: str, upstream: FakeUpstream, mode: str) -> None:
    async with serving(database_url, upstream, upstream_timeout_seconds=1.0) as (app, client):
        session = await signup(client)
        upstream.mode = mode
        chat, question, request = await a_requested_run(client, session)
        failed = await until_status(client, session, chat, request["payload"]["messageId"], "failed_upstream")
        row = await until_run(app, request["payload"]["runId"], "failed_upstream")
        assert row["reported"] == 0
        assert {"502": "HTTP 502", "stall": "sent nothing for 1 s", "broken": "broke off"}[mode] in row["error"]
        if mode != "502":  # what had arrived is kept, and counted
            assert failed["content"] and full_answer().startswith(failed["content"])
            assert row["completion"] == len(failed["content"].split())

        upstream.mode = "ok"  # Retry: a new request
        retry = run_request(chat, question)
        await post(client, session, retry)
        done = await until_status(client, session, chat, retry["payload"]["messageId"], "completed")
        assert done["content"] == full_answer()
        assert upstream.calls == 2


async def test_stop_ends_the_run_with_what_it_had(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    upstream.delay, upstream.words = 0.05, 200
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    request = run_request(chat, question)
    run_id, reply_id = request["payload"]["runId"], request["payload"]["messageId"]
    async with client.websocket("/sync/live?afterSeq=0", headers=bearer(session)) as ws:
        await post(client, session, request)
        await deltas(ws, 3)  # the worker has some of the answer
    [stopped] = await post(client, session, event("AssistantRunCancelled", {"runId": run_id, "messageId": reply_id}))
    assert stopped["status"] == "accepted"
    row = await until_run(app, run_id, "cancelled")
    assert row["reported"] == 0 and 3 <= row["completion"] < 200
    await until_idle(app)  # the worker is done with the run: nothing more can be written of it
    final = await reply(client, session, chat, reply_id)
    assert final is not None and final["status"] == "cancelled"
    assert final["content"] and len(final["content"].split()) == row["completion"]  # all it had, kept
    edits = [e["payload"] for e in await log_of(client, session, stopped["seq"]) if e["type"] == "MessageEdited"]
    assert edits and edits[-1]["status"] == "cancelled" and edits[-1]["content"] == final["content"]


async def test_requests_in_one_chat_are_answered_one_at_a_time(database_url: str, upstream: FakeUpstream) -> None:
    upstream.hold = asyncio.Event()  # the first answer waits after its first word
    async with serving(database_url, upstream, upstream_timeout_seconds=30.0) as (app, client):
        session = await signup(client)
        chat, question = await a_chat_with_a_question(client, session)
        first, second = run_request(chat, question), run_request(chat, question)
        await post(client, session, first, second)  # sent without waiting for the first answer
        await until_status(client, session, chat, first["payload"]["messageId"], "streaming")
        await app.extensions["runs"].step()  # a look for what may start, with the first still streaming
        assert (await run_row(app, second["payload"]["runId"]))["status"] == "queued"
        waiting = await reply(client, session, chat, second["payload"]["messageId"])
        assert waiting is not None and waiting["status"] == "queued"
        upstream.hold.set()
        await until_status(client, session, chat, second["payload"]["messageId"], "completed")
        done = await reply(client, session, chat, first["payload"]["messageId"])
        assert done is not None and done["status"] == "completed"
        # In the log, the second answer starts after the first has ended.
        edits = [(e["payload"]["id"], e["payload"]["status"]) for e in await log_of(client, session) if e["type"] == "MessageEdited"]
        assert edits.index((first["payload"]["messageId"], "completed")) < edits.index((second["payload"]["messageId"], "streaming"))


async def test_a_request_for_an_unknown_assistant_fails_at_once(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    chat, _, request = await a_requested_run(client, session, assistant="nobody")
    await until_status(client, session, chat, request["payload"]["messageId"], "failed_upstream")
    row = await until_run(app, request["payload"]["runId"], "failed_upstream")
    assert "no assistant 'nobody'" in row["error"] and upstream.calls == 0


async def test_a_slow_model_keeps_its_run_alive_past_the_lease(database_url: str, upstream: FakeUpstream) -> None:
    """The lease is renewed on a clock, not per token: a model slower than the lease is no crash."""
    upstream.delay, upstream.words = 1.0, 3  # a second between words; the lease is 0.6 s
    async with serving(database_url, upstream, run_lease_seconds=0.6, upstream_timeout_seconds=5.0) as (_, client):
        session = await signup(client)
        chat, _, request = await a_requested_run(client, session)
        done = await until_status(client, session, chat, request["payload"]["messageId"], "completed", "failed_upstream")
        assert done["status"] == "completed" and done["content"] == full_answer(3)
        assert upstream.calls == 1


async def test_a_request_reusing_a_run_id_is_rejected(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    chat, question = await a_chat_with_a_question(client, session)
    first = run_request(chat, question)
    again = run_request(chat, question)
    again["payload"]["runId"] = first["payload"]["runId"]  # a new message, an old run
    results = await post(client, session, first, again)
    assert [r["status"] for r in results] == ["accepted", "rejected"] and "runId" in results[1]["error"]
    later = run_request(chat, question)
    later["payload"]["runId"] = first["payload"]["runId"]
    [result] = await post(client, session, later)  # also in a later request
    assert result["status"] == "rejected"
    assert await reply(client, session, chat, later["payload"]["messageId"]) is None


async def test_a_server_shut_down_mid_answer_ends_the_run_at_once(database_url: str, upstream: FakeUpstream) -> None:
    upstream.delay, upstream.words = 0.05, 400
    async with serving(database_url, upstream) as (app, client):
        session = await signup(client)
        chat, question = await a_chat_with_a_question(client, session)
        request = run_request(chat, question)
        async with client.websocket("/sync/live?afterSeq=0", headers=bearer(session)) as ws:
            await post(client, session, request)
            await deltas(ws, 3)  # the worker has some of the answer
    # (the app has shut down: its run was cancelled)
    async with serving(database_url, upstream) as (app, client):
        response = await client.post("/auth/login", json={"username": "alice", "password": "correct horse"})
        session = await response.get_json()
        ended = await reply(client, session, chat, request["payload"]["messageId"])
        assert ended is not None and ended["status"] == "failed_upstream" and ended["content"]
        row = await run_row(app, request["payload"]["runId"])
        assert row["status"] == "failed_upstream" and "shut down" in row["error"] and row["completion"] >= 3


async def test_a_run_stopped_before_it_started_logs_its_reply_whole(database_url: str, upstream: FakeUpstream) -> None:
    """A device that resyncs from a snapshot taken before the Stop has no row for the reply (its
    lastSeq is after the snapshot's): the log after the Stop must hold the whole message, not only
    the Stop's status patch."""
    upstream.hold = asyncio.Event()  # the first answer waits after its first word: the second waits its turn
    async with serving(database_url, upstream, upstream_timeout_seconds=30.0) as (app, client):
        session = await signup(client)
        chat, question = await a_chat_with_a_question(client, session)
        first, second = run_request(chat, question), run_request(chat, question)
        await post(client, session, first, second)
        await until_status(client, session, chat, first["payload"]["messageId"], "streaming")
        waiting = second["payload"]
        [stop] = await post(client, session, event("AssistantRunCancelled", {"runId": waiting["runId"], "messageId": waiting["messageId"]}))
        assert stop["status"] == "accepted"
        upstream.hold.set()
        row = await until_run(app, waiting["runId"], "cancelled")
        assert row["error"] == "stopped before it started" and row["calls"] == 1 and upstream.calls == 1
        whole = [e for e in await log_of(client, session, stop["seq"]) if e["type"] == "MessageEdited" and e["payload"]["id"] == waiting["messageId"]]
        assert whole and whole[-1]["payload"]["status"] == "cancelled"


async def _asked_in(store: Any, assistant: str) -> tuple[str, str, str]:
    """A chat with a question and a run of ``assistant`` asked for its answer, appended straight
    to ``store`` for a new account: (account, chat, the reply's id)."""
    account, chat, question, reply_id = new_id(), new_id(), new_id(), new_id()
    request = {"runId": new_id(), "chatId": chat, "parentId": question, "messageId": reply_id, "assistantId": assistant}
    asked = [chat_created(chat), message("MessageAppended", question, chat, "go"), event("AssistantRunRequested", request)]
    await store.append(account, "dev", [DomainEvent.model_validate(e) for e in asked])
    return account, chat, reply_id


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_dead_processs_run_is_ended_even_when_the_process_that_took_it_over_died_too(backend: str, tmp_path: Path) -> None:
    """The process streaming a reply dies; another takes the run over to end it, and dies before
    it has; a third ends it, with the text of the last checkpoint. (The worker's steps, driven
    by hand on a settable clock.)"""
    clock = Clock()
    store, cleanup = await open_store(backend, tmp_path, clock)
    try:
        runs, lease = SqlRunStore(store.db), timedelta(seconds=30)
        account, chat, reply_id = await _asked_in(store, "fake")
        run = await runs.claim("streamer", clock.now + lease)
        assert run is not None
        [reply] = [m for m in await runs.chat_messages(account, chat) if m.id == reply_id]
        checkpoint = reply.model_copy(update={"status": "streaming", "content": "Half an ans", "updated_at": None, "last_seq": None})
        await store.append(account, "server", [DomainEvent(event_id=new_id(), type=EventType.MESSAGE_EDITED, payload=checkpoint, created_at=format_time(clock.now))])
        clock.now += 2 * lease  # the streamer died
        assert await runs.take_over("taker", clock.now, clock.now + lease) == [run]  # ...and so did the one that took it over

        async def publish(account_id: str, frame: DeltaFrame) -> None:
            raise AssertionError("nothing is streamed")

        worker = RunWorker(store, runs, {}, publish, clock, lease_seconds=lease.total_seconds())
        await worker.step()
        assert [m.status for m in await runs.chat_messages(account, chat) if m.id == reply_id] == ["streaming"]  # the taker's lease holds
        clock.now += 2 * lease
        await worker.step()
        [ended] = [m for m in await runs.chat_messages(account, chat) if m.id == reply_id]
        assert (ended.status, ended.content) == ("failed_upstream", "Half an ans")
        [record] = await runs.chat_runs(account, chat)
        assert (record.status, record.error, record.upstream_calls) == ("failed_upstream", INTERRUPTED, 1)
        await worker.step()  # ended once
        assert len([e for e in (await store.read_updates(account, 0, 100)).events if e.type == EventType.MESSAGE_EDITED]) == 2
    finally:
        await cleanup()


class _HeldModel:
    """A model that sends its first words, then waits for ``go`` before the rest."""

    def __init__(self) -> None:
        self.started, self.go = asyncio.Event(), asyncio.Event()

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        yield Piece("Half an ")
        self.started.set()
        await self.go.wait()
        yield Piece("answer.")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_run_whose_lease_ran_out_while_its_process_still_streams_it_goes_on(backend: str, tmp_path: Path) -> None:
    """A busy machine holds the event loop up past a run's lease, so that the worker's next step
    finds the lease run out: the run is this process's own, still streaming here, and it goes on
    to its end rather than being ended as a dead process's (as on a loaded 2-core machine, with a
    lease of 0.6 s). (The worker's steps driven by hand on a settable clock.)"""
    clock = Clock()
    store, cleanup = await open_store(backend, tmp_path, clock)
    try:
        runs, lease = SqlRunStore(store.db), timedelta(seconds=30)
        account, chat, reply_id = await _asked_in(store, "held")
        model = _HeldModel()
        assistant = Assistant(AssistantConfig(id="held", name="Held", provider="demo"), model)

        async def publish(account_id: str, frame: DeltaFrame) -> None:
            pass

        worker = RunWorker(store, runs, {"held": assistant}, publish, clock, lease_seconds=lease.total_seconds(), checkpoint_seconds=0.0)
        await worker.step()  # claims the run, which starts streaming
        await asyncio.wait_for(model.started.wait(), 10)
        clock.now += 2 * lease  # the event loop held up past the lease: not renewed in time
        await worker.step()
        [reply] = [m for m in await runs.chat_messages(account, chat) if m.id == reply_id]
        assert reply.status == "streaming"  # not ended as a dead process's run
        model.go.set()
        for _ in range(400):  # until the run has ended: its reply, then its record, written
            if worker.running == 0:
                break
            await asyncio.sleep(0.025)
        [reply] = [m for m in await runs.chat_messages(account, chat) if m.id == reply_id]
        assert (reply.status, reply.content) == ("completed", "Half an answer.")
        [record] = await runs.chat_runs(account, chat)
        assert (record.status, record.error, record.upstream_calls) == ("completed", None, 1)
    finally:
        await cleanup()
