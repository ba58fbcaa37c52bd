"""A server process killed with SIGKILL while it streams an answer: the restarted process (on the
same database) ends the run, keeping what was written, and never leaves it ``streaming``; nor
does it call the model again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from tests.fake_upstream import FakeUpstream
from tests.processes import Server
from tests.server.events import chat_created, event, message, new_id


async def test_a_run_cut_by_kill_9_is_ended_by_the_restarted_server(database_url: str, tmp_path: Path) -> None:
    # 1,000 long words for about 20 s: the first checkpoint (once the text pays for it, at about
    # 2.3 KB, server/runs.py CheckpointPlan) comes after some 2 s, long before the answer ends.
    upstream = FakeUpstream(delay=0.02, text=" ".join(f"word{i:04}-of-a-long-answer" for i in range(1000)))
    await upstream.start()  # this test's loop runs while it waits (asyncio.to_thread, sleeps)
    settings = {"assistants": upstream.config(), "run_lease_seconds": "2", "run_poll_seconds": "0.2"}
    first = Server(database_url, tmp_path / "first.log", **settings)
    await asyncio.to_thread(first.start)
    chat, question, reply_id = new_id(), new_id(), new_id()
    request = {"runId": new_id(), "chatId": chat, "parentId": question, "messageId": reply_id, "assistantId": "fake"}
    try:
        async with httpx.AsyncClient(base_url=first.url) as http:
            token = (await http.post("/auth/signup", json={"username": "kill", "password": "long enough"})).json()["token"]
            headers = {"Authorization": f"Bearer {token}"}
            events = [chat_created(chat), message("MessageAppended", question, chat, "go"), event("AssistantRunRequested", request)]
            assert (await http.post("/sync/events", json={"events": events}, headers=headers)).status_code == 200
            written = await until(http, headers, chat, reply_id, lambda m: m["status"] == "streaming" and m["content"])
        assert first.process is not None
        first.process.kill()  # SIGKILL: no shutdown of any kind
        first.process.wait()
    finally:
        first.stop()

    second = Server(database_url, tmp_path / "second.log", **settings)
    await asyncio.to_thread(second.start)
    try:
        async with httpx.AsyncClient(base_url=second.url) as http:
            ended = await until(http, headers, chat, reply_id, lambda m: m["status"] != "streaming")
        assert ended["status"] == "failed_upstream"  # Retry is offered; the model is not paid twice
        assert ended["content"].startswith(written["content"])
        assert upstream.calls == 1
    finally:
        second.stop()


async def until(http: httpx.AsyncClient, headers: dict[str, str], chat: str, reply_id: str, predicate: Any) -> Any:
    for _ in range(300):
        state = (await http.get(f"/sync/state?chatId={chat}", headers=headers)).json()
        found = next((m for m in state["snapshot"]["messages"] if m["id"] == reply_id), None)
        if found is not None and predicate(found):
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {found}")


async def test_two_processes_share_the_runs_of_one_postgresql_each_run_once(tmp_path: Path) -> None:
    """Runs requested through either process are claimed by whichever is free (FOR UPDATE SKIP
    LOCKED): every one is answered, the model called once per request, one answer at a time per chat."""
    from tests.conftest import drop_schema, postgres_schema

    upstream = FakeUpstream(delay=0.02, words=20)
    await upstream.start()
    schema, url = await postgres_schema()
    settings = {"assistants": upstream.config(), "run_poll_seconds": "0.1"}
    servers = [Server(url, tmp_path / f"{i}.log", **settings) for i in range(2)]
    try:
        for server in servers:
            await asyncio.to_thread(server.start)
        async with httpx.AsyncClient(base_url=servers[0].url) as first, httpx.AsyncClient(base_url=servers[1].url) as second:
            token = (await first.post("/auth/signup", json={"username": "two", "password": "long enough"})).json()["token"]
            headers = {"Authorization": f"Bearer {token}"}
            replies: list[tuple[str, str]] = []
            for chat_number in range(3):
                chat, question = new_id(), new_id()
                events = [chat_created(chat), message("MessageAppended", question, chat, f"q{chat_number}")]
                for _ in range(2):  # two questions per chat, through both processes
                    reply = new_id()
                    events.append(event("AssistantRunRequested", {
                        "runId": new_id(), "chatId": chat, "parentId": question, "messageId": reply, "assistantId": "fake",
                    }))
                    replies.append((chat, reply))
                via = first if chat_number % 2 else second
                assert (await via.post("/sync/events", json={"events": events}, headers=headers)).status_code == 200
            for chat, reply in replies:
                done = await until(first, headers, chat, reply, lambda m: m["status"] not in ("queued", "streaming"))
                assert done["status"] == "completed" and done["content"] == " ".join(f"word{i}" for i in range(20))
            log = (await first.get("/sync/updates?afterSeq=0&limit=1000", headers=headers)).json()["events"]
        assert upstream.calls == len(replies)
        # In the log, a chat's answers never interleave: each ends before the next one starts.
        for chat in {c for c, _ in replies}:
            edits = [e["payload"]["id"] for e in log if e["type"] == "MessageEdited" and e["payload"]["chatId"] == chat]
            assert len(set(edits)) == 2
            first_reply = edits[0]
            assert edits == [first_reply] * edits.count(first_reply) + [e for e in edits if e != first_reply]
    finally:
        for server in servers:
            server.stop()
        await drop_schema(schema)
