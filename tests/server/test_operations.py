"""Health, readiness, metrics, request logs and graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path

import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families
from quart import Quart
from quart.typing import TestClientProtocol as Client

from tests.processes import Server
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, new_id


async def test_health_and_readiness(client: Client, app: Quart) -> None:
    assert (await (await client.get("/healthz")).get_json()) == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and (await ready.get_json())["status"] == "ready"
    app.extensions["hub"].go_away()
    draining = await client.get("/readyz")
    assert draining.status_code == 503 and "shutting down" in (await draining.get_json())["problems"]


async def test_metrics_count_events_sockets_and_requests(client: Client) -> None:
    session = await signup(client)
    events = [chat_created(new_id()) for _ in range(3)]
    await client.post("/sync/events", json={"events": events}, headers=bearer(session))
    async with client.websocket("/sync/live", headers=bearer(session)) as ws:
        await asyncio.wait_for(ws.receive(), 5)
        response = await client.get("/metrics")
    assert response.content_type.startswith("text/plain")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families((await response.get_data()).decode())
        for sample in family.samples
    }
    assert samples[("chat_events_appended_total", ())] == 3
    assert samples[("chat_live_sockets", ())] == 1
    posted = (("method", "POST"), ("route", "/sync/events"), ("status", "200"))
    assert samples[("chat_request_duration_seconds_count", posted)] == 1
    assert samples[("chat_request_duration_seconds_bucket", tuple(sorted((*posted, ("le", "+Inf")))))] == 1
    assert samples[("chat_compaction_runs_total", ())] == 0
    assert samples[("process_cpu_seconds_total", ())] > 0  # (the process's own, from prometheus_client)


async def test_one_structured_log_line_per_request(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="server.access"):
        await client.get("/sync/updates")
    [line] = [json.loads(r.getMessage()) for r in caplog.records if r.name == "server.access"]
    assert line["method"] == "GET" and line["path"] == "/sync/updates" and line["status"] == 401
    assert line["ms"] >= 0 and line["at"].endswith("Z")


async def test_shutdown_closes_live_sockets_with_going_away(tmp_path: Path) -> None:
    server = Server(f"sqlite:///{tmp_path / 'chat.db'}", tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        import httpx

        async with httpx.AsyncClient(base_url=server.url) as http:
            token = (await http.post("/auth/signup", json={"username": "bye", "password": "long enough"})).json()["token"]
        url = server.url.replace("http://", "ws://") + "/sync/live"
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as socket:
            assert json.loads(await socket.recv())["type"] == "caughtUp"
            assert server.process is not None
            server.process.send_signal(signal.SIGTERM)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(socket.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert await asyncio.to_thread(server.process.wait, 15) == 0
    finally:
        server.stop()


async def test_a_stopping_server_names_the_requests_it_still_serves(tmp_path: Path) -> None:
    """A request whose body is still coming is in the log's line of a stop (so a stop that waits
    out the graceful timeout says what for); once it is gone, the server exits."""
    server = Server(f"sqlite:///{tmp_path / 'chat.db'}", tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        import httpx

        async with httpx.AsyncClient(base_url=server.url) as http:
            token = (await http.post("/auth/signup", json={"username": "slow", "password": "long enough"})).json()["token"]
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        head = f"POST /sync/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{"
        writer.write(head.encode())
        await writer.drain()
        await wait_for_line(server, '"path": "/sync/events"', absent=True)  # (not answered: its body is coming)
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        line = await wait_for_line(server, "stopping; open: ")
        assert "POST /sync/events (" in line
        writer.close()
        assert await asyncio.to_thread(server.process.wait, 30) == 0
        assert "stopping; open still: none" in server.log.read_text()
    finally:
        server.stop()


async def wait_for_line(server: Server, text: str, absent: bool = False) -> str:
    """The server log's line with `text`, once it is there (absent: after a moment, none is)."""
    for _ in range(10 if absent else 300):
        lines = [line for line in server.log.read_text().splitlines() if text in line]
        if lines and not absent:
            return lines[0]
        assert not (lines and absent), lines
        await asyncio.sleep(0.1)
    assert absent, f"no {text!r} in {server.log_tail()}"
    return ""


async def test_the_server_declines_websocket_compression(tmp_path: Path) -> None:
    # Each compressed socket would keep ~90 KiB of zlib state (server/tuning.py).
    server = Server(f"sqlite:///{tmp_path / 'chat.db'}", tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        url = server.url.replace("http://", "ws://") + "/sync/live"
        async with websockets.connect(url) as socket:  # offers permessage-deflate, as browsers do
            assert socket.response is not None
            assert "sec-websocket-extensions" not in {k.lower() for k in socket.response.headers}
    finally:
        server.stop()


async def test_a_request_that_is_not_http_is_answered_with_the_apis_json_error(tmp_path: Path) -> None:
    """Refused by Hypercorn before the app sees it (here a Content-Length that is no number, as the
    fuzzer once sent), a request still gets the API's JSON error, and the server goes on serving."""
    server = Server(f"sqlite:///{tmp_path / 'chat.db'}", tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /runs?chatId=x HTTP/1.1\r\nHost: x\r\nContent-Length: ?uY,4\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)  # (then the connection is closed)
        writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode().lower().split("\r\n")
        assert lines[0].startswith("http/1.1 400")
        assert "content-type: application/json" in lines and "x-content-type-options: nosniff" in lines
        assert json.loads(body) == {"error": "bad_request", "message": "the request is not valid HTTP/1.1"}
        import httpx

        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).status_code == 200
    finally:
        server.stop()
