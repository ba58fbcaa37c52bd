"""WS /sync/live in-process: backlog, caughtUp, live events, pings, close codes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from quart import Quart
from quart.testing.connections import WebsocketDisconnectError
from quart.typing import TestClientProtocol as Client

from shared.models import DomainEvent
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, new_id
from tests.waiting import until


async def receive(ws: Any, timeout: float = 5) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await asyncio.wait_for(ws.receive(), timeout))
    return frame


async def next_event_seq(ws: Any) -> int:
    while True:
        frame = await receive(ws)
        if frame["type"] == "event":
            return int(frame["event"]["seq"])


async def test_backlog_then_caught_up_then_live(client: Client) -> None:
    session = await signup(client)
    await client.post("/sync/events", json={"events": [chat_created(new_id()) for _ in range(3)]}, headers=bearer(session))
    async with client.websocket("/sync/live?afterSeq=1", headers=bearer(session)) as ws:
        assert [await next_event_seq(ws) for _ in range(2)] == [2, 3]
        assert await receive(ws) == {"type": "caughtUp", "seq": 3}
        await client.post("/sync/events", json={"events": [chat_created(new_id())]}, headers=bearer(session))
        frame = await receive(ws)
        assert frame["type"] == "event" and frame["event"]["seq"] == 4
        assert frame["event"]["origin"] == session["deviceId"]
        assert await receive(ws, timeout=3) == {"type": "ping"}  # ping_seconds=0.5 in the fixture


async def test_an_append_by_any_writer_reaches_the_live_sockets_through_the_stores_hook(app: Quart, client: Client) -> None:
    """Not only the route's: what the run worker (any writer in the process) appends wakes the sockets too."""
    session = await signup(client)
    async with client.websocket("/sync/live?afterSeq=0", headers=bearer(session)) as ws:
        assert await receive(ws) == {"type": "caughtUp", "seq": 0}
        event = DomainEvent.model_validate(chat_created(new_id()))
        await app.extensions["store"].append(session["userId"], "server", [event])
        frame = await receive(ws)
        assert frame["type"] == "event" and frame["event"]["eventId"] == event.event_id and frame["event"]["origin"] == "server"


async def test_hand_over_has_no_gap_and_no_duplicate_while_writers_commit(client: Client) -> None:
    session = await signup(client)
    total = 60
    written = 0

    async def writer() -> None:
        nonlocal written
        for _ in range(total):
            await client.post("/sync/events", json={"events": [chat_created(new_id())]}, headers=bearer(session))
            written += 1

    writing = asyncio.ensure_future(writer())
    await until(lambda: written >= 10, "the writer has begun")  # a backlog, and commits still to come
    async with client.websocket("/sync/live?afterSeq=0", headers=bearer(session)) as ws:
        seqs = []
        while len(seqs) < total:
            frame = await receive(ws)
            if frame["type"] == "event":
                seqs.append(frame["event"]["seq"])
    await writing
    assert seqs == list(range(1, total + 1))


async def close_code(client: Client, path: str, headers: dict[str, str]) -> int:
    async with client.websocket(path, headers=headers) as ws:
        try:
            await asyncio.wait_for(ws.receive(), 5)
        except WebsocketDisconnectError as closed:
            return int(closed.args[0])
    raise AssertionError("the socket was not closed")


async def test_close_codes(app: Quart) -> None:
    client = app.test_client()  # keeps the session cookie, as a browser does
    session = await signup(client)
    assert await close_code(app.test_client(use_cookies=False), "/sync/live", {}) == 4401
    # A cookie-authenticated socket must come from our own origin.
    assert await close_code(client, "/sync/live", {"Origin": "http://evil.example"}) == 4403
    assert await close_code(client, "/sync/live?afterSeq=-5", {"Origin": "http://localhost"}) == 4400
    # Bearer tokens are not sent by browsers on their own, so no Origin check for them.
    async with client.websocket("/sync/live", headers={**bearer(session), "Origin": "http://other"}) as ws:
        assert await receive(ws) == {"type": "caughtUp", "seq": 0}


async def test_reads_of_one_cursor_in_flight_together_are_one_read() -> None:
    from server.live import SharedReads
    from server.store import Updates
    from shared.models import LoggedEvent

    calls = 0

    class CountingStore:
        async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.01)
            event = LoggedEvent.model_validate({**chat_created(new_id()), "seq": after_seq + 1, "origin": "d"})
            return Updates(events=[event], has_more=False, current_seq=after_seq + 1)

    reads = SharedReads(CountingStore())  # type: ignore[arg-type]
    woken = reads.now()
    pages = await asyncio.gather(*(reads.read("a", 5, woken) for _ in range(100)))
    assert calls == 1 and all(p.frames == pages[0].frames for p in pages)
    assert pages[0].frames[0][0] == 6 and json.loads(pages[0].frames[0][1])["event"]["seq"] == 6
    await reads.read("a", 6, woken)  # another cursor: another read
    await reads.read("a", 5, woken)  # the first read is over: a new one
    assert calls == 3
    # A caller woken after a read began (by a commit it may not see) does not share it.
    first = asyncio.ensure_future(reads.read("a", 5, reads.now()))
    await asyncio.sleep(0)
    await asyncio.gather(first, reads.read("a", 5, reads.now()), reads.read("a", 5, woken))
    assert calls == 5


async def test_delta_frames_reach_the_accounts_sockets_in_order(app: Quart, client: Client) -> None:
    from shared.models import DeltaFrame

    session, other = await signup(client, "streamer"), await signup(client, "bystander")
    publish = app.extensions["publish_delta"]
    message_id, run_id = new_id(), new_id()
    long_text = "".join(chr(0x430 + i % 32) for i in range(2500))  # split: a notification is small
    async with client.websocket("/sync/live", headers=bearer(session)) as ws, client.websocket(
        "/sync/live", headers=bearer(other)
    ) as bystander:
        assert (await receive(ws))["type"] == "caughtUp"
        assert (await receive(bystander))["type"] == "caughtUp"
        await publish(session["userId"], DeltaFrame(message_id=message_id, run_id=run_id, offset=0, text="Hel"))
        await publish(session["userId"], DeltaFrame(message_id=message_id, run_id=run_id, offset=3, text=long_text))
        text = ""
        while len(text) < 3 + len(long_text):
            frame = await receive(ws)
            assert frame["type"] == "delta" and frame["messageId"] == message_id and frame["runId"] == run_id
            assert frame["offset"] == len(text)
            text += frame["text"]
        assert text == "Hel" + long_text
        assert (await receive(bystander, timeout=1.5))["type"] == "ping"  # nothing for another account
