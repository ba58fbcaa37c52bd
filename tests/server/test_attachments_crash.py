"""A server process killed (SIGKILL) in the middle of an upload, on each backend: no half blob is
visible after it, the upload goes on from the server's offset (above 0), and the file the
server ends with has the right SHA-256. And over a real connection, the client's side: a chunk
cut off by a client gone keeps what came of it (the server stores a chunk as it comes), and a
chunk refused before its end is answered, not reset."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from server.app import open_attachments
from server.config import Settings
from server.databases import open_database
from server.event_store import SqlEventStore
from tests.conftest import drop_schema, postgres_schema
from tests.processes import Server

MIB = 1024 * 1024


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chat.db'}"
        return
    schema, url = asyncio.run(postgres_schema())
    try:
        yield url
    finally:
        asyncio.run(drop_schema(schema))


def call(server: Server, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    response.read()
    return response


def stored_blobs(database_url: str) -> list[str]:
    """The complete blobs in the server's store, read beside it."""

    async def read() -> list[str]:
        store = SqlEventStore(open_database(database_url), lambda: datetime.now(UTC))
        await store.open()
        attachments = open_attachments(store, Settings(database_url=database_url), lambda: datetime.now(UTC))
        try:
            return [b.sha256 for b in await attachments.blobs.blobs()]
        finally:
            await store.close()

    return asyncio.run(read())


def test_a_server_killed_mid_upload_leaves_no_half_blob_and_the_upload_resumes(database_url: str, tmp_path: Path) -> None:
    data = os.urandom(3 * MIB + 12345)
    digest = hashlib.sha256(data).hexdigest()
    server = Server(database_url, tmp_path / "server.log", rate_limit_per_minute="0")
    server.start()
    try:
        signup = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        signup.request("POST", "/auth/signup", body=json.dumps({"username": "alice", "password": "correct horse"}))
        token = json.loads(signup.getresponse().read())["token"]
        auth = {"Authorization": f"Bearer {token}", "Tus-Resumable": "1.0.0"}
        chunk = {**auth, "Content-Type": "application/offset+octet-stream"}
        for offset in (0, MIB):
            extra = {"Upload-Length": str(len(data))} if offset == 0 else {}
            sent = call(server, "PATCH", f"/blobs/{digest}", data[offset : offset + MIB], {**chunk, "Upload-Offset": str(offset), **extra})
            assert sent.status == 204 and sent.headers["Upload-Offset"] == str(offset + MIB)

        # The third chunk is half sent when the server is killed.
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = f"PATCH /blobs/{digest} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {MIB}\r\nUpload-Offset: {2 * MIB}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in chunk.items()) + "\r\n"
        raw.sendall(head.encode() + data[2 * MIB : 2 * MIB + MIB // 2])
        assert server.process is not None
        server.process.kill()  # SIGKILL: nothing of the process runs after it
        server.process.wait(timeout=10)
        raw.close()
        assert digest not in stored_blobs(database_url)  # no half blob

        server.start()  # the same database, a new process
        missing = call(server, "GET", f"/blobs/{digest}", headers=auth)
        assert missing.status == 404
        progress = call(server, "HEAD", f"/blobs/{digest}", headers=auth)
        assert progress.status == 200
        offset = int(progress.headers["Upload-Offset"])
        assert 0 < offset < len(data) and progress.headers["Upload-Length"] == str(len(data))
        while offset < len(data):
            sent = call(server, "PATCH", f"/blobs/{digest}", data[offset : offset + MIB], {**chunk, "Upload-Offset": str(offset)})
            assert sent.status == 204, sent.status
            offset = int(sent.headers["Upload-Offset"])
        assert f"upload of {digest} resumed at offset {2 * MIB} of {len(data)}" in server.log.read_text()

        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", f"/blobs/{digest}", headers=auth)
        response = connection.getresponse()
        assert response.status == 200
        assert hashlib.sha256(response.read()).hexdigest() == digest
        assert stored_blobs(database_url) == [digest]
    finally:
        server.stop()


def signed_up(server: Server) -> dict[str, str]:
    """A new account's headers for a chunk."""
    signup = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    signup.request("POST", "/auth/signup", body=json.dumps({"username": "alice", "password": "correct horse"}))
    token = json.loads(signup.getresponse().read())["token"]
    return {"Authorization": f"Bearer {token}", "Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"}


def test_a_chunk_cut_off_by_the_client_keeps_what_came_and_the_upload_goes_on(database_url: str, tmp_path: Path) -> None:
    data = os.urandom(4 * MIB + 12345)
    digest = hashlib.sha256(data).hexdigest()
    server = Server(database_url, tmp_path / "server.log", rate_limit_per_minute="0")
    server.start()
    try:
        chunk = signed_up(server)
        sent = call(server, "PATCH", f"/blobs/{digest}", data[:MIB], {**chunk, "Upload-Offset": "0", "Upload-Length": str(len(data))})
        assert sent.status == 204
        # A chunk of 3 MiB of which the client sends 2.5 MiB, then goes.
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = f"PATCH /blobs/{digest} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {3 * MIB}\r\nUpload-Offset: {MIB}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in chunk.items()) + "\r\n"
        raw.sendall(head.encode() + data[MIB : MIB + 5 * MIB // 2])
        raw.close()

        def offset() -> int:
            return int(call(server, "HEAD", f"/blobs/{digest}", headers=chunk).headers["Upload-Offset"])

        deadline = time.monotonic() + 30
        while (kept := offset()) < MIB + 5 * MIB // 2:  # (every byte that came is kept)
            assert time.monotonic() < deadline, f"the server kept {kept - MIB} bytes of the cut chunk"
            time.sleep(0.05)
        assert kept == MIB + 5 * MIB // 2
        at = kept
        while at < len(data):
            sent = call(server, "PATCH", f"/blobs/{digest}", data[at : at + MIB], {**chunk, "Upload-Offset": str(at)})
            assert sent.status in (204, 409), sent.status  # (409: the cut chunk's last bytes were stored after the HEAD)
            at = int(sent.headers["Upload-Offset"])
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", f"/blobs/{digest}", headers=chunk)
        assert hashlib.sha256(connection.getresponse().read()).hexdigest() == digest
    finally:
        server.stop()


def test_a_chunk_refused_before_its_end_is_answered_on_a_connection_that_goes_on(database_url: str, tmp_path: Path) -> None:
    """The server knows a chunk at another offset is refused before reading it, and reads the
    rest all the same: the client, sending it whole before it listens, gets the 409, and its
    connection serves the next request."""
    data = os.urandom(6 * MIB)
    digest = hashlib.sha256(data).hexdigest()
    server = Server(database_url, tmp_path / "server.log", rate_limit_per_minute="0")
    server.start()
    try:
        chunk = signed_up(server)
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        first = {**chunk, "Upload-Offset": "0", "Upload-Length": str(len(data))}
        connection.request("PATCH", f"/blobs/{digest}", body=data[:MIB], headers=first)
        assert connection.getresponse().read() == b""
        connection.request("PATCH", f"/blobs/{digest}", body=data[2 * MIB :], headers={**chunk, "Upload-Offset": str(2 * MIB)})
        refused = connection.getresponse()
        assert refused.status == 409 and json.loads(refused.read())["offset"] == MIB
        connection.request("PATCH", f"/blobs/{digest}", body=data[MIB:], headers={**chunk, "Upload-Offset": str(MIB)})
        done = connection.getresponse()
        done.read()
        assert done.status == 204 and done.headers["Upload-Offset"] == str(len(data))
    finally:
        server.stop()
