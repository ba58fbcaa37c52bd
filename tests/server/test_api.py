"""The HTTP API of docs/protocol.md, in-process (Quart's test client), on SQLite and PostgreSQL alike."""

from __future__ import annotations

from typing import Any

import pytest
from quart import Quart
from quart.typing import TestClientProtocol as Client

from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, event, message, new_id


async def post(client: Client, session: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    response = await client.post("/sync/events", json={"events": events}, headers=bearer(session))
    assert response.status_code == 200, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


async def get(client: Client, session: dict[str, Any], path: str) -> dict[str, Any]:
    response = await client.get(path, headers=bearer(session))
    assert response.status_code == 200, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


async def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    body: dict[str, Any] = await response.get_json()
    assert response.status_code == status, body
    assert body["error"] == code and body["message"], body
    return body


# --- accounts ------------------------------------------------------------------------------------


async def test_signup_login_logout(client: Client) -> None:
    first = await signup(client, "alice")
    assert set(first) == {"userId", "deviceId", "token"}
    response = await client.post("/auth/login", json={"username": "alice", "password": "correct horse", "deviceName": "phone"})
    second = await response.get_json()
    assert response.status_code == 200 and second["userId"] == first["userId"]
    assert second["deviceId"] != first["deviceId"] and second["token"] != first["token"]
    assert "HttpOnly" in response.headers["Set-Cookie"] and "SameSite=Strict" in response.headers["Set-Cookie"]

    assert (await client.post("/auth/logout", headers=bearer(second))).status_code == 204
    await assert_error(await client.get("/sync/updates", headers=bearer(second)), 401, "unauthorized")
    assert (await client.get("/sync/updates", headers=bearer(first))).status_code == 200


async def test_signup_errors(client: Client) -> None:
    await signup(client, "alice")
    again = await client.post("/auth/signup", json={"username": "alice", "password": "another one"})
    await assert_error(again, 409, "username_taken")
    short = await client.post("/auth/signup", json={"username": "bob", "password": "short"})
    await assert_error(short, 400, "bad_request")
    wrong = await client.post("/auth/login", json={"username": "alice", "password": "wrong password"})
    await assert_error(wrong, 401, "unauthorized")
    nobody = await client.post("/auth/login", json={"username": "nobody", "password": "whatever1"})
    await assert_error(nobody, 401, "unauthorized")


async def test_the_browser_session_cookie_authenticates(app: Quart) -> None:
    client = app.test_client()
    response = await client.post("/auth/signup", json={"username": "carol", "password": "correct horse"})
    assert response.status_code == 201
    # The test client keeps cookies like a browser does.
    assert (await client.get("/sync/updates")).status_code == 200


# --- errors --------------------------------------------------------------------------------------


async def test_every_error_is_json(client: Client) -> None:
    session = await signup(client)
    await assert_error(await client.get("/no/such/route"), 404, "not_found")
    await assert_error(await client.get("/sync/updates"), 401, "unauthorized")
    await assert_error(
        await client.post("/sync/events", data=b"{not json", headers=bearer(session)), 400, "bad_request"
    )
    for query in ("afterSeq=x", "afterSeq=-1", "limit=0", "limit=100000"):
        await assert_error(await client.get(f"/sync/updates?{query}", headers=bearer(session)), 400, "bad_request")
    for query in ("upToSeq=x", "chatId=nope", "page=garbage"):
        await assert_error(await client.get(f"/sync/state?{query}", headers=bearer(session)), 400, "bad_request")


@pytest.mark.parametrize(
    "body",
    [[], {"events": "nope"}, {"events": [{"type": "ChatCreated"}]}, {"events": [42]}, {"nothing": 1}],
)
async def test_a_malformed_batch_is_invalid_event(client: Client, body: Any) -> None:
    session = await signup(client)
    response = await client.post("/sync/events", json=body, headers=bearer(session))
    await assert_error(response, 422, "invalid_event")
    assert (await get(client, session, "/sync/updates"))["currentSeq"] == 0


async def test_limits_give_payload_too_large(client: Client) -> None:
    session = await signup(client)
    too_many = [chat_created(new_id()) for _ in range(501)]
    await assert_error(
        await client.post("/sync/events", json={"events": too_many}, headers=bearer(session)),
        413,
        "payload_too_large",
    )
    huge = [message("MessageAppended", new_id(), new_id(), "x" * 1_100_000)]
    await assert_error(
        await client.post("/sync/events", json={"events": huge}, headers=bearer(session)), 413, "payload_too_large"
    )
    assert (await get(client, session, "/sync/updates"))["currentSeq"] == 0


# --- submitting events ---------------------------------------------------------------------------


async def test_accepted_duplicate_rejected(client: Client) -> None:
    session = await signup(client)
    chat = new_id()
    create = chat_created(chat)
    first = await post(client, session, [create, message("MessageAppended", new_id(), chat)])
    assert [r["status"] for r in first["results"]] == ["accepted", "accepted"]
    assert [r["seq"] for r in first["results"]] == [1, 2] and first["currentSeq"] == 2

    unknown_chat = message("MessageAppended", new_id(), new_id())
    bad_payload = event("MessageAppended", {"id": new_id(), "chatId": chat})  # no role, content...
    second = await post(client, session, [create, unknown_chat, bad_payload, chat_created(new_id())])
    statuses = [(r["status"], r.get("seq")) for r in second["results"]]
    assert statuses == [("duplicate", 1), ("rejected", None), ("rejected", None), ("accepted", 3)]
    assert second["results"][1]["error"] == "unknown chat"
    assert "role" in second["results"][2]["error"]
    assert second["currentSeq"] == 3

    updates = await get(client, session, "/sync/updates?afterSeq=0")
    assert [e["seq"] for e in updates["events"]] == [1, 2, 3]  # rejected events left no trace


@pytest.mark.parametrize(
    ("events", "error"),
    [
        (lambda c, m: [chat_created(c)], "this chat already exists"),
        (lambda c, m: [event("ChatUpdated", {"id": new_id(), "title": "x", "createdAt": "2026-01-01T00:00:00Z"})], "unknown chat"),
        (lambda c, m: [event("ChatDeleted", {"id": new_id()})], "unknown chat"),
        (lambda c, m: [message("MessageAppended", m, c)], "this message already exists"),
        (lambda c, m: [message("MessageEdited", new_id(), c)], "unknown message"),
        (lambda c, m: [event("MessageDeleted", {"id": new_id(), "chatId": c})], "unknown message"),
        (lambda c, m: [event("AssistantRunCancelled", {"runId": new_id(), "messageId": new_id()})], "unknown message"),
    ],
)
async def test_events_that_do_not_fit_the_state_are_rejected(
    client: Client, events: Any, error: str
) -> None:
    session = await signup(client)
    chat, msg = new_id(), new_id()
    await post(client, session, [chat_created(chat), message("MessageAppended", msg, chat)])
    result = await post(client, session, events(chat, msg))
    assert result["results"][0] == {"eventId": result["results"][0]["eventId"], "status": "rejected", "error": error}
    assert result["currentSeq"] == 2


async def test_a_chat_deleted_takes_its_messages(client: Client) -> None:
    session = await signup(client)
    chat = new_id()
    await post(client, session, [chat_created(chat), message("MessageAppended", new_id(), chat)])
    await post(client, session, [event("ChatDeleted", {"id": chat})])
    state = await get(client, session, "/sync/state")
    assert state["snapshot"] == {"chats": [], "messages": [], "settings": [], "presets": []}
    late = await post(client, session, [message("MessageAppended", new_id(), chat)])
    assert late["results"][0]["error"] == "unknown chat"


# --- reading -------------------------------------------------------------------------------------


async def test_updates_page_through_the_log(client: Client) -> None:
    session = await signup(client)
    await post(client, session, [chat_created(new_id()) for _ in range(5)])
    page = await get(client, session, "/sync/updates?afterSeq=1&limit=2")
    assert [e["seq"] for e in page["events"]] == [2, 3] and page["hasMore"] and page["currentSeq"] == 5
    page = await get(client, session, "/sync/updates?afterSeq=3&limit=2")
    assert [e["seq"] for e in page["events"]] == [4, 5] and not page["hasMore"]
    event_ = page["events"][0]
    assert set(event_) == {"seq", "eventId", "type", "payload", "createdAt", "origin"}
    assert event_["origin"] == session["deviceId"]


async def test_snapshot_at_n_plus_updates_after_n_is_the_current_state(client: Client) -> None:
    session = await signup(client)
    chat, msg = new_id(), new_id()
    await post(client, session, [chat_created(chat), message("MessageAppended", msg, chat, "one")])
    await post(client, session, [message("MessageEdited", msg, chat, "two"), chat_created(new_id())])

    snapshot = await get(client, session, "/sync/state?upToSeq=2")
    assert snapshot["upToSeq"] == 2 and snapshot["currentSeq"] == 4
    # The edited message changed after 2, so it is not in the snapshot at 2: its event after 2 brings it.
    assert [c["id"] for c in snapshot["snapshot"]["chats"]] == [chat]
    assert snapshot["snapshot"]["messages"] == []
    updates = await get(client, session, "/sync/updates?afterSeq=2")
    assert [e["seq"] for e in updates["events"]] == [3, 4]

    now = (await get(client, session, "/sync/state"))["snapshot"]
    assert [m["content"] for m in now["messages"]] == ["two"] and len(now["chats"]) == 2
    assert now["messages"][0]["lastSeq"] == 3


async def test_state_pages_and_filters_by_chat(client: Client) -> None:
    session = await signup(client)
    chats = [new_id() for _ in range(3)]
    await post(client, session, [chat_created(c) for c in chats])
    await post(client, session, [message("MessageAppended", new_id(), chats[0]) for _ in range(4)])
    seen_chats, seen_messages, page = [], [], None
    while True:
        query = "/sync/state?limit=2" + (f"&page={page}" if page else "")
        body = await get(client, session, query)
        assert len(body["snapshot"]["chats"]) + len(body["snapshot"]["messages"]) <= 2
        seen_chats += body["snapshot"]["chats"]
        seen_messages += body["snapshot"]["messages"]
        page = body["nextPage"]
        if page is None:
            break
    assert sorted(c["id"] for c in seen_chats) == sorted(chats) and len(seen_messages) == 4

    one = await get(client, session, f"/sync/state?chatId={chats[1]}")
    assert [c["id"] for c in one["snapshot"]["chats"]] == [chats[1]] and one["snapshot"]["messages"] == []


async def test_accounts_are_isolated(client: Client) -> None:
    alice, bob = await signup(client, "alice"), await signup(client, "bob")
    chat, msg = new_id(), new_id()
    shared_event = chat_created(chat)
    await post(client, alice, [shared_event, message("MessageAppended", msg, chat)])

    assert (await get(client, bob, "/sync/updates"))["events"] == []
    assert (await get(client, bob, "/sync/state"))["snapshot"] == {"chats": [], "messages": [], "settings": [], "presets": []}
    attack = await post(client, bob, [message("MessageEdited", msg, chat, "pwned"), event("ChatDeleted", {"id": chat})])
    assert [r["status"] for r in attack["results"]] == ["rejected", "rejected"]
    # Bob reusing Alice's eventId is a new event for Bob.
    reuse = await post(client, bob, [shared_event])
    assert reuse["results"][0]["status"] == "accepted" and reuse["results"][0]["seq"] == 1
    alice_state = (await get(client, alice, "/sync/state"))["snapshot"]
    assert [m["content"] for m in alice_state["messages"]] == ["hi"] and len(alice_state["chats"]) == 1


async def test_text_the_database_cannot_store_is_rejected_not_a_500(client: Client) -> None:
    session = await signup(client)
    chat = new_id()
    result = await post(client, session, [chat_created(chat), message("MessageAppended", new_id(), chat, "a\u0000b")])
    assert [r["status"] for r in result["results"]] == ["accepted", "rejected"]
    assert "NUL" in result["results"][1]["error"]
