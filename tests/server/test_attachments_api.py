"""/blobs over tus 1.0 core, through the real app on each backend (docs/protocol.md,
"Attachments"): HEAD and PATCH semantics, the limits, another account's blob, what a download
is served as, and garbage collection."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from quart import Quart
from quart.typing import TestClientProtocol as Client

from server.app import create_app
from server.attachments import MAX_CHUNK_BYTES
from server.blobs import sniff
from server.config import Settings
from server.headers import content_security_policy
from server.routes.blobs import SANDBOX
from tests.conftest import QUICK_PASSWORDS
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, event, new_id
from tests.server.stores import Clock

TUS = {"Tus-Resumable": "1.0.0"}
CHUNK = {**TUS, "Content-Type": "application/offset+octet-stream"}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
HTML = b"<!doctype html><html><body><script>alert(document.cookie)</script></body></html>\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def settings_for(database_url: str, **overrides: Any) -> Settings:
    return Settings(**QUICK_PASSWORDS, database_url=database_url, rate_limit_per_minute=0, compact_interval_seconds=0, **overrides)


@pytest.fixture
async def app(database_url: str, clock: Clock) -> AsyncIterator[Quart]:
    app = create_app(settings_for(database_url, max_file_bytes=64 * 1024, max_account_bytes=160 * 1024), clock)
    async with app.test_app():
        yield app


async def patch(client: Client, auth: dict[str, str], data: bytes, offset: int, chunk: bytes, length: bool = True) -> Any:
    headers = {**auth, **CHUNK, "Upload-Offset": str(offset)}
    if length:
        headers["Upload-Length"] = str(len(data))
    return await client.patch(f"/blobs/{sha(data)}", data=chunk, headers=headers)


async def upload(client: Client, auth: dict[str, str], data: bytes, size: int = 1000) -> None:
    """The whole file, chunk by chunk, as a tus client sends it."""
    offset = 0
    while True:
        response = await patch(client, auth, data, offset, data[offset : offset + size], length=offset == 0)
        assert response.status_code == 204, await response.get_data()
        offset = int(response.headers["Upload-Offset"])
        if offset == len(data):
            return


async def head(client: Client, auth: dict[str, str], digest: str) -> Any:
    return await client.head(f"/blobs/{digest}", headers={**auth, **TUS})


async def error_of(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(await response.get_data())
    assert set(body) >= {"error", "message"} and body["message"].endswith("."), body
    return body


async def test_options_say_what_the_server_speaks_without_a_session(client: Client) -> None:
    for path in ("/blobs", f"/blobs/{sha(PNG)}"):
        response = await client.options(path)
        assert response.status_code == 204
        assert response.headers["Tus-Version"] == "1.0.0" and response.headers["Tus-Resumable"] == "1.0.0"
        assert response.headers["Tus-Max-Size"] == str(64 * 1024)


async def test_options_with_a_session_say_what_the_account_may_still_upload_as_the_413_counts(client: Client) -> None:
    async def free(auth: dict[str, str]) -> int:
        response = await client.options("/blobs", headers=auth)
        assert response.status_code == 204 and response.headers["Tus-Max-Size"] == str(64 * 1024)
        return int(response.headers["Upload-Account-Free"])

    assert "Upload-Account-Free" not in (await client.options("/blobs")).headers  # (no session: not said)
    unknown = await client.options("/blobs", headers={"Authorization": "Bearer nobody"})
    assert unknown.status_code == 204 and "Upload-Account-Free" not in unknown.headers  # (not a 401: OPTIONS needs none)
    auth = bearer(await signup(client))
    assert await free(auth) == 160 * 1024
    files = [bytes([i]) * 60 * 1024 for i in range(3)]
    await upload(client, auth, files[0], size=30 * 1024)
    assert await free(auth) == 100 * 1024  # what it holds
    await patch(client, auth, files[1], 0, files[1][:1000])
    assert await free(auth) == 40 * 1024  # and an upload under way, whole, however little of it came
    await upload(client, auth, files[0])  # (held already: sent no more, counted once)
    assert await free(auth) == 40 * 1024
    # The figure is the 413's: one byte more is refused, exactly as much is taken.
    over = b"y" * (40 * 1024 + 1)
    assert (await patch(client, auth, over, 0, over[:1000])).status_code == 413
    exact = b"z" * (40 * 1024)
    assert (await patch(client, auth, exact, 0, exact[:1000])).status_code == 204
    assert await free(auth) == 0
    assert await free(bearer(await signup(client, "bob"))) == 160 * 1024  # (each account its own)


async def test_an_upload_goes_chunk_by_chunk_and_head_says_how_far(client: Client, app: Quart) -> None:
    auth = bearer(await signup(client))
    digest = sha(PNG)
    missing = await head(client, auth, digest)
    assert missing.status_code == 404 and missing.headers["Tus-Resumable"] == "1.0.0"
    first = await patch(client, auth, PNG, 0, PNG[:1000])
    assert first.status_code == 204
    assert first.headers["Upload-Offset"] == "1000" and first.headers["Tus-Resumable"] == "1.0.0"
    halfway = await head(client, auth, digest)
    assert halfway.status_code == 200
    assert (halfway.headers["Upload-Offset"], halfway.headers["Upload-Length"]) == ("1000", str(len(PNG)))
    assert halfway.headers["Cache-Control"] == "no-store"
    assert (await client.get(f"/blobs/{digest}", headers=auth)).status_code == 404  # (not before it is whole)
    last = await patch(client, auth, PNG, 1000, PNG[1000:], length=False)
    assert last.status_code == 204 and last.headers["Upload-Offset"] == str(len(PNG))
    done = await head(client, auth, digest)
    assert done.headers["Upload-Offset"] == done.headers["Upload-Length"] == str(len(PNG))
    download = await client.get(f"/blobs/{digest}", headers=auth)
    assert download.status_code == 200 and await download.get_data() == PNG
    assert download.headers["Content-Length"] == str(len(PNG))
    assert "Content-Range" not in download.headers  # (the whole file; no Range needed)
    metrics = (await client.get("/metrics")).get_data
    assert f"chat_blob_bytes_received_total {float(len(PNG))}" in (await metrics()).decode()


async def test_a_held_blob_is_never_sent_again(client: Client, app: Quart) -> None:
    auth = bearer(await signup(client))
    await upload(client, auth, PNG)
    again = await patch(client, auth, PNG, 0, PNG[:1000])  # (a second device, the same file)
    assert again.status_code == 204 and again.headers["Upload-Offset"] == str(len(PNG))
    assert (await head(client, auth, sha(PNG))).headers["Upload-Offset"] == str(len(PNG))
    assert len(await app.extensions["attachments"].blobs.blobs()) == 1


async def test_a_chunk_at_another_offset_is_409_with_the_server_s(client: Client) -> None:
    auth = bearer(await signup(client))
    await patch(client, auth, PNG, 0, PNG[:1000])
    for wrong in (0, 999, 1500):
        response = await patch(client, auth, PNG, wrong, PNG[wrong : wrong + 10], length=False)
        assert response.status_code == 409
        assert response.headers["Upload-Offset"] == "1000"
        body = await error_of(response)
        assert body["error"] == "upload_offset_mismatch" and body["offset"] == 1000


async def test_a_wrong_hash_is_422_and_discards_the_upload(client: Client, app: Quart) -> None:
    auth = bearer(await signup(client))
    forged = PNG[:-1] + b"?"
    response = await client.patch(
        f"/blobs/{sha(PNG)}", data=forged, headers={**auth, **CHUNK, "Upload-Offset": "0", "Upload-Length": str(len(PNG))}
    )
    assert response.status_code == 422
    body = await error_of(response)
    assert body["error"] == "blob_hash_mismatch" and body["sha256"] == sha(forged)
    assert "upload the file again" in body["message"]
    assert (await head(client, auth, sha(PNG))).status_code == 404  # nothing of it is left
    assert await app.extensions["attachments"].blobs.blobs() == []
    await upload(client, auth, PNG)  # and the right bytes go in from 0


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Tus-Resumable": None}, 412, "precondition_failed"),
        ({"Tus-Resumable": "0.2.2"}, 412, "precondition_failed"),
        ({"Content-Type": "application/octet-stream"}, 415, "unsupported_media_type"),
        ({"Upload-Offset": None}, 400, "bad_request"),
        ({"Upload-Offset": "-1"}, 400, "bad_request"),
        ({"Upload-Offset": "ten"}, 400, "bad_request"),
        ({"Upload-Length": None}, 400, "bad_request"),  # (the first chunk says how long the file is)
        ({"Upload-Length": "10"}, 400, "bad_request"),  # (the chunk goes past it)
    ],
)
async def test_malformed_chunks_are_refused_in_the_error_format(
    client: Client, headers: dict[str, str | None], status: int, code: str
) -> None:
    auth = bearer(await signup(client))
    sent = {**auth, **CHUNK, "Upload-Offset": "0", "Upload-Length": str(len(PNG)), **headers}
    response = await client.patch(f"/blobs/{sha(PNG)}", data=PNG[:100], headers={k: v for k, v in sent.items() if v is not None})
    assert response.status_code == status
    assert (await error_of(response))["error"] == code
    assert response.headers["Tus-Resumable"] == "1.0.0"
    if status == 412:
        assert response.headers["Tus-Version"] == "1.0.0"


async def test_a_name_that_is_no_digest_is_400_and_no_session_401(client: Client) -> None:
    auth = bearer(await signup(client))
    for bad in ("abc", "AB" * 32, "g" * 64):
        response = await client.get(f"/blobs/{bad}", headers=auth)
        assert response.status_code == 400 and (await error_of(response))["error"] == "bad_request"
    for method in ("GET", "HEAD", "PATCH"):
        response = await client.open(f"/blobs/{sha(PNG)}", method=method, headers={**CHUNK, "Upload-Offset": "0"})
        assert response.status_code == 401, method


async def test_over_the_limits_is_413_in_the_error_format(client: Client) -> None:
    auth = bearer(await signup(client))
    big = b"x" * (64 * 1024 + 1)
    response = await patch(client, auth, big, 0, big[:1000])
    assert response.status_code == 413
    body = await error_of(response)
    assert body["error"] == "payload_too_large" and body["limit"] == 64 * 1024
    assert "largest file" in body["message"]
    # The account's total: two files of 60 KiB fit in 160 KiB, a third (even begun) does not.
    files = [bytes([i]) * 60 * 1024 for i in range(3)]
    await upload(client, auth, files[0], size=30 * 1024)
    await patch(client, auth, files[1], 0, files[1][:1000])  # (an upload under way counts too)
    over = await patch(client, auth, files[2], 0, files[2][:1000])
    assert over.status_code == 413
    assert "one account" in (await error_of(over))["message"]
    other = bearer(await signup(client, "bob"))  # (another account has its own)
    await upload(client, other, files[2], size=30 * 1024)


async def test_a_chunk_over_the_largest_is_413(database_url: str) -> None:
    app = create_app(settings_for(database_url, max_file_bytes=2 * MAX_CHUNK_BYTES))
    async with app.test_app():
        client = app.test_client()
        auth = bearer(await signup(client))
        data = b"\0" * (MAX_CHUNK_BYTES + 1)
        response = await patch(client, auth, data, 0, data)
        assert response.status_code == 413
        error = await error_of(response)
        assert error["error"] == "payload_too_large" and "A chunk is at most" in error["message"]
        small = await patch(client, auth, data, 0, data[: 2 * 1024 * 1024])  # (above --max-body-bytes: a chunk may be)
        assert small.status_code == 204


async def test_another_account_s_blob_is_the_same_404_as_none(client: Client, app: Quart) -> None:
    alice, bob = bearer(await signup(client)), bearer(await signup(client, "bob"))
    await upload(client, alice, PNG)
    nothing = await client.get(f"/blobs/{sha(b'nothing')}", headers=bob)
    theirs = await client.get(f"/blobs/{sha(PNG)}", headers=bob)
    assert theirs.status_code == nothing.status_code == 404
    assert await theirs.get_data() == await nothing.get_data()
    assert (await head(client, bob, sha(PNG))).status_code == 404  # (nor does Bob see Alice's upload)
    # Bob proves he has the file by sending it all: then he may read it; it is stored once.
    started = await patch(client, bob, PNG, 0, PNG[:1000])
    assert started.headers["Upload-Offset"] == "1000"
    last = await patch(client, bob, PNG, 1000, PNG[1000:], length=False)
    assert last.status_code == 204
    assert await (await client.get(f"/blobs/{sha(PNG)}", headers=bob)).get_data() == PNG
    assert len(await app.extensions["attachments"].blobs.blobs()) == 1


@pytest.mark.parametrize(
    ("data", "content_type", "disposition"),
    [
        (PNG, "image/png", "inline"),
        (HTML, "text/plain; charset=utf-8", "attachment"),  # an HTML file named .png, sent as image/png
        (b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', "text/plain; charset=utf-8", "attachment"),
        (b"%PDF-1.7\n...", "application/pdf", "attachment"),
        (b"\x00\x01\x02binary", "application/octet-stream", "attachment"),
    ],
)
async def test_a_download_is_served_as_what_the_server_sniffs_never_the_client_s_claim(
    client: Client, data: bytes, content_type: str, disposition: str
) -> None:
    auth = bearer(await signup(client))
    await upload(client, auth, data)
    digest = sha(data)
    chat, message = new_id(), new_id()
    attachment = {"sha256": digest, "name": "cat \u201cpicture\u201d.png", "mime": "image/png", "size": len(data)}
    payload = {"id": message, "chatId": chat, "role": "user", "content": "look", "attachments": [attachment], "createdAt": "2026-11-30T12:00:00.000Z"}
    posted = await client.post("/sync/events", json={"events": [chat_created(chat), event("MessageAppended", payload)]}, headers=auth)
    assert [r["status"] for r in (await posted.get_json())["results"]] == ["accepted", "accepted"]
    response = await client.get(f"/blobs/{digest}", headers=auth)
    assert response.status_code == 200 and await response.get_data() == data
    assert response.headers["Content-Type"] == content_type
    assert response.headers["Content-Disposition"] == (
        f"{disposition}; filename=\"cat _picture_.png\"; filename*=UTF-8''cat%20%E2%80%9Cpicture%E2%80%9D.png"
    )
    assert response.headers.getlist("X-Content-Type-Options") == ["nosniff"]
    assert response.headers.getlist("Content-Security-Policy") == [SANDBOX]
    assert "sandbox" in SANDBOX.split("; ") and "script-src" not in SANDBOX
    assert response.headers["ETag"] == f'"{digest}"'
    assert "immutable" in response.headers["Cache-Control"] and "private" in response.headers["Cache-Control"]
    cached = await client.get(f"/blobs/{digest}", headers={**auth, "If-None-Match": f'"{digest}"'})
    assert cached.status_code == 304
    named = await client.get(f"/blobs/{digest}?name=report.txt", headers=auth)
    assert "filename=\"report.txt\"" in named.headers["Content-Disposition"]
    # (every other response keeps the page's policy)
    assert (await client.get("/healthz")).headers["Content-Security-Policy"] == content_security_policy()


def test_sniffing_goes_by_the_bytes() -> None:
    assert sniff(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert sniff(b"GIF89a...") == "image/gif"
    assert sniff(b"RIFF\x10\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff(b"RIFF\x10\x00\x00\x00AVI ") == "application/octet-stream"
    assert sniff("caf\u00e9 ok".encode()) == "text/plain; charset=utf-8"
    assert sniff(("x" * 4095 + "\u00e9").encode()[:4096]) == "text/plain; charset=utf-8"  # (a character cut off)
    assert sniff(b"\xfe\xff\x00h") == "application/octet-stream"
    assert sniff(b"") == "text/plain; charset=utf-8"
    assert sniff(b"text\x1b[31m") == "application/octet-stream"


async def message_with(client: Client, auth: dict[str, str], chat: str, *digests: str) -> str:
    message = new_id()
    attachments = [{"sha256": d, "name": f"{d[:6]}.bin", "mime": "application/octet-stream", "size": 1} for d in digests]
    payload = {"id": message, "chatId": chat, "role": "user", "content": "", "attachments": attachments, "createdAt": "2026-11-30T12:00:00.000Z"}
    response = await client.post("/sync/events", json={"events": [event("MessageAppended", payload)]}, headers=auth)
    assert (await response.get_json())["results"][0]["status"] == "accepted"
    return message


async def test_garbage_collection_keeps_referenced_blobs_and_removes_the_others_after_the_window(
    client: Client, app: Quart, clock: Clock
) -> None:
    attachments = app.extensions["attachments"]
    alice, bob = bearer(await signup(client)), bearer(await signup(client, "bob"))
    kept, dropped, shared = b"kept" * 100, b"dropped" * 100, b"shared" * 100
    for data in (kept, dropped, shared):
        await upload(client, alice, data)
    await upload(client, bob, shared)
    chat = new_id()
    await client.post("/sync/events", json={"events": [chat_created(chat)]}, headers=alice)
    await message_with(client, alice, chat, sha(kept))
    gone = await message_with(client, alice, chat, sha(dropped))
    await client.post("/sync/events", json={"events": [event("MessageDeleted", {"id": gone, "chatId": chat})]}, headers=alice)
    bob_chat = new_id()
    await client.post("/sync/events", json={"events": [chat_created(bob_chat)]}, headers=bob)
    await message_with(client, bob, bob_chat, sha(shared))
    await patch(client, alice, b"abandoned" * 100, 0, b"abandoned")  # an upload never finished

    clock.now += timedelta(days=29)  # within the window: everything stays
    nothing = await attachments.collect_garbage(retention_seconds=30 * 86400, grace_seconds=60)
    assert (nothing.holdings_dropped, nothing.uploads_dropped, nothing.blobs_deleted) == (0, 0, 0)
    clock.now += timedelta(days=2)
    collected = await attachments.collect_garbage(retention_seconds=30 * 86400, grace_seconds=60)
    # Alice's dropped and shared (no message of hers names them) go; shared stays for Bob.
    assert (collected.holdings_dropped, collected.uploads_dropped, collected.blobs_deleted) == (2, 1, 1)
    assert await (await client.get(f"/blobs/{sha(kept)}", headers=alice)).get_data() == kept
    for data in (dropped, shared):
        assert (await client.get(f"/blobs/{sha(data)}", headers=alice)).status_code == 404
    assert await (await client.get(f"/blobs/{sha(shared)}", headers=bob)).get_data() == shared
    assert sorted(b.sha256 for b in await attachments.blobs.blobs()) == sorted([sha(kept), sha(shared)])
    assert (await head(client, alice, sha(b"abandoned" * 100))).status_code == 404
    # Still referenced a window later: kept (the reference is renewed at each pass).
    clock.now += timedelta(days=31)
    await attachments.collect_garbage(retention_seconds=30 * 86400, grace_seconds=60)
    assert (await client.get(f"/blobs/{sha(kept)}", headers=alice)).status_code == 200


async def test_a_file_whose_message_comes_later_is_kept_for_it_even_with_a_short_retention(
    client: Client, app: Quart, clock: Clock
) -> None:
    """(Found by python -m server chaos, whose compaction uses a retention of 5 s: a file uploaded
    while its message waited on a paused server was let go before the message arrived.)"""
    attachments = app.extensions["attachments"]
    alice = bearer(await signup(client))
    late, never = b"late" * 100, b"never" * 100
    await upload(client, alice, late)
    await upload(client, alice, never)
    clock.now += timedelta(seconds=60)  # past the retention, before the message
    collected = await attachments.collect_garbage(retention_seconds=5, grace_seconds=2)
    assert collected.holdings_dropped == 0
    chat = new_id()
    await client.post("/sync/events", json={"events": [chat_created(chat)]}, headers=alice)
    await message_with(client, alice, chat, sha(late))
    clock.now += timedelta(seconds=60)
    await attachments.collect_garbage(retention_seconds=5, grace_seconds=2)
    assert await (await client.get(f"/blobs/{sha(late)}", headers=alice)).get_data() == late
    assert await (await client.get(f"/blobs/{sha(never)}", headers=alice)).get_data() == never
    # A file no message ever names goes a day after its upload (the retention, when longer).
    clock.now += timedelta(days=1)
    collected = await attachments.collect_garbage(retention_seconds=5, grace_seconds=2)
    assert collected.holdings_dropped == 1
    assert (await client.get(f"/blobs/{sha(never)}", headers=alice)).status_code == 404
    assert (await client.get(f"/blobs/{sha(late)}", headers=alice)).status_code == 200


async def test_an_upload_still_under_way_is_not_taken_for_abandoned_while_its_touch_lags(
    client: Client, app: Quart, clock: Clock
) -> None:
    """An upload's updated_at is written at most once a minute (TOUCH_SECONDS): with a retention
    shorter than that, an upload whose last chunk came within it must not be dropped."""
    attachments = app.extensions["attachments"]
    alice = bearer(await signup(client))
    data = b"slow" * 300
    assert (await patch(client, alice, data, 0, data[:400])).status_code == 204
    clock.now += timedelta(seconds=40)
    assert (await patch(client, alice, data, 400, data[400:800], length=False)).status_code == 204
    clock.now += timedelta(seconds=30)  # its last chunk 30 s ago, its updated_at 70 s ago
    collected = await attachments.collect_garbage(retention_seconds=40, grace_seconds=2)
    assert collected.uploads_dropped == 0
    assert (await patch(client, alice, data, 800, data[800:], length=False)).status_code == 204
    assert await (await client.get(f"/blobs/{sha(data)}", headers=alice)).get_data() == data


async def test_an_upload_whose_bytes_all_came_before_a_crash_is_checked_at_the_next_head(client: Client, app: Quart) -> None:
    """The process stopped between the last append and its check: HEAD checks it then (the
    right bytes: held; wrong ones: discarded, 404, never a 500)."""
    attachments = app.extensions["attachments"]
    session = await signup(client)
    auth, account = bearer(session), session["userId"]
    for data, stored, expected in ((PNG, PNG, 200), (HTML, HTML[::-1], 404)):
        await attachments.start(account, sha(data), len(data))
        await attachments.blobs.append(account, sha(data), 0, stored)  # (the bytes, unchecked)
        response = await head(client, auth, sha(data))
        assert response.status_code == expected
        if expected == 200:
            assert response.headers["Upload-Offset"] == str(len(data))
            assert await (await client.get(f"/blobs/{sha(data)}", headers=auth)).get_data() == data
        else:
            assert await attachments.blobs.received(account, sha(data)) is None


async def test_a_head_that_finds_the_upload_completed_and_begun_again_says_what_is_held(
    client: Client, app: Quart, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A HEAD finds every byte there and checks them; just before, another device's request
    completed the upload (and holds the blob), and a third device's chunk, sent before that,
    began it again: the HEAD answers what the account holds, and the new upload is left alone
    (the store is not asked to check its first chunk as the file, which discarded it, and
    answered 404 for a blob the account holds)."""
    attachments = app.extensions["attachments"]
    blobs = attachments.blobs
    session = await signup(client)
    auth, account, digest = bearer(session), session["userId"], sha(PNG)
    await attachments.start(account, digest, len(PNG))
    await blobs.append(account, digest, 0, PNG)
    real_complete = blobs.complete

    async def raced(owner: str, sha256: str, size: int) -> int:
        monkeypatch.setattr(blobs, "complete", real_complete)
        await attachments.hold(account, digest, await real_complete(owner, sha256, size))  # (the other device's)
        await blobs.append(account, digest, 0, PNG[:100])  # (the third's)
        return await real_complete(owner, sha256, size)

    monkeypatch.setattr(blobs, "complete", raced)
    response = await head(client, auth, digest)
    assert response.status_code == 200 and response.headers["Upload-Offset"] == str(len(PNG))
    assert await blobs.received(account, digest) == 100
    assert await (await client.get(f"/blobs/{digest}", headers=auth)).get_data() == PNG
