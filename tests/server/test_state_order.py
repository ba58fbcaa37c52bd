"""``GET /sync/state`` pages in the order a new device wants them (both backends): every chat
first, then messages newest-written first, so the chat list and the latest messages of the most
recently active chats are there after the first pages; the first page says how many rows the
whole snapshot holds; paging stays complete, with no row twice, while writes go on between pages."""

from __future__ import annotations

import base64
from typing import Any

from quart import Quart
from quart.typing import TestClientProtocol as Client

from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, event, message, new_id
from tests.server.test_api import assert_error, get, post


async def pages(client: Client, session: dict[str, Any], limit: int, between: Any = None) -> list[dict[str, Any]]:
    body = await get(client, session, f"/sync/state?limit={limit}")
    found = [body]
    while body["nextPage"] is not None:
        if between is not None:
            await between(len(found))
        body = await get(client, session, f"/sync/state?limit={limit}&upToSeq={found[0]['upToSeq']}&page={body['nextPage']}")
        assert body["upToSeq"] == found[0]["upToSeq"] and body["total"] is None
        found.append(body)
    return found


async def test_chats_first_then_the_newest_written_messages(client: Client) -> None:
    session = await signup(client)
    old, new = new_id(), new_id()
    await post(client, session, [chat_created(old), chat_created(new)])
    first = [new_id() for _ in range(3)]
    await post(client, session, [message("MessageAppended", m, old) for m in first])
    latest = [new_id() for _ in range(3)]
    await post(client, session, [message("MessageAppended", m, new) for m in latest])
    await post(client, session, [message("MessageEdited", first[0], old, "edited last")])

    found = await pages(client, session, 3)
    assert found[0]["total"] == 8
    rows = [(kind, r["id"], r["lastSeq"]) for p in found for kind in ("chats", "messages") for r in p["snapshot"][kind]]
    assert [kind for kind, _, _ in rows] == ["chats"] * 2 + ["messages"] * 6
    messages = [row_id for kind, row_id, _ in rows if kind == "messages"]
    assert messages == [first[0], *reversed(latest), first[2], first[1]]
    seqs = [seq for kind, _, seq in rows if kind == "messages"]
    assert seqs == sorted(seqs, reverse=True)


async def test_paging_is_complete_and_never_repeats_while_writes_go_on(client: Client) -> None:
    session = await signup(client)
    chat = new_id()
    ids = [new_id() for _ in range(12)]
    await post(client, session, [chat_created(chat), *(message("MessageAppended", m, chat) for m in ids)])
    state_seq = 13

    async def between(page: int) -> None:  # edit one row already sent, one not yet sent, add one
        await post(client, session, [
            message("MessageEdited", ids[page], chat, f"edit {page}"),
            message("MessageEdited", ids[-page], chat, f"edit {page}"),
            message("MessageAppended", new_id(), chat),
        ])  # fmt: skip

    found = await pages(client, session, 2, between)
    assert found[0]["upToSeq"] == state_seq
    seen = [r["id"] for p in found for r in p["snapshot"]["messages"]]
    assert len(seen) == len(set(seen))
    assert all(r["lastSeq"] <= state_seq for p in found for r in p["snapshot"]["messages"])
    # Every row of the snapshot at N that was not changed after N came, each once.
    now = (await get(client, session, "/sync/state?limit=1000"))["snapshot"]["messages"]
    unchanged = {r["id"] for r in now if r["lastSeq"] <= state_seq}
    assert unchanged <= set(seen)
    # What was sent and later changed is brought by the events after N.
    changed_after = {e["payload"]["id"] for e in (await get(client, session, f"/sync/updates?afterSeq={state_seq}"))["events"]}
    assert set(ids) <= set(seen) | changed_after


async def test_a_chat_filter_pages_and_counts_one_chat(client: Client) -> None:
    session = await signup(client)
    a, b = new_id(), new_id()
    await post(client, session, [chat_created(a), chat_created(b)])
    await post(client, session, [message("MessageAppended", new_id(), a) for _ in range(3)])
    await post(client, session, [message("MessageAppended", new_id(), b), event("ChatDeleted", {"id": b})])
    found = await pages(client, session, 1)
    assert found[0]["total"] == 4 and sum(len(p["snapshot"]["messages"]) + len(p["snapshot"]["chats"]) for p in found) == 4
    one = await get(client, session, f"/sync/state?chatId={a}&limit=2")
    assert one["total"] == 4 and len(one["snapshot"]["chats"]) == 1


async def test_a_page_token_not_given_out_is_a_400(client: Client) -> None:
    session = await signup(client)
    for raw in (b'["messages", "x"]', b'["chats", -1, ""]', b'["messages", true, ""]', b'["users", 1, ""]', b"{"):
        token = base64.urlsafe_b64encode(raw).decode()
        await assert_error(await client.get(f"/sync/state?page={token}", headers=bearer(session)), 400, "bad_request")


async def test_the_next_page_is_read_ahead_and_answers_the_request_that_names_it(app: Quart, client: Client) -> None:
    store = app.extensions["store"]
    session = await signup(client)
    chat = new_id()
    await post(client, session, [chat_created(chat)])
    await post(client, session, [message("MessageAppended", new_id(), chat) for _ in range(7)])
    reads: list[tuple[str | None, bool]] = []
    real = store._read_state

    async def read_state(account_id: str, up_to: int | None, chat_id: str | None, limit: int, page: str | None, ahead: bool = False) -> Any:
        reads.append((page, ahead))
        return await real(account_id, up_to, chat_id, limit, page, ahead)

    store._read_state = read_state
    first = await get(client, session, "/sync/state?limit=3")
    assert reads == [(None, False), (first["nextPage"], True)]  # the next page read at once
    second = await get(client, session, f"/sync/state?limit=3&upToSeq={first['upToSeq']}&page={first['nextPage']}")
    assert reads[2:] == [(second["nextPage"], True)]  # answered from it, with no read of its own
    # The same rows as a read made when asked.
    store._ahead.clear()
    again = await get(client, session, f"/sync/state?limit=3&upToSeq={first['upToSeq']}&page={first['nextPage']}")
    assert again == second and reads[3] == (first["nextPage"], False)


async def test_a_page_read_ahead_is_not_given_once_the_log_no_longer_reaches_its_upToSeq(app: Quart, client: Client) -> None:
    store = app.extensions["store"]
    session = await signup(client)
    chat = new_id()
    await post(client, session, [chat_created(chat)])
    ids = [new_id() for _ in range(4)]
    await post(client, session, [message("MessageAppended", m, chat) for m in ids])
    first = await get(client, session, "/sync/state?limit=2")
    await post(client, session, [message("MessageEdited", m, chat, "edited") for m in ids])
    # The horizon passes upToSeq: every event is older than a second from now (with 0, an event
    # written in the same millisecond as the compaction was not older, and stayed).
    await store.compact_all(retention_seconds=-1, grace_seconds=-1)
    assert store._ahead  # (the page was read ahead before)
    response = await client.get(f"/sync/state?limit=2&upToSeq={first['upToSeq']}&page={first['nextPage']}", headers=bearer(session))
    await assert_error(response, 410, "cursor_expired")
