"""``GET /sync/state``'s JSON made from the rows (server/state_wire.py) is the models' JSON, for the
rows a random history makes (tests/server/test_store_properties.py checks every page of those)
and here for what those histories never hold: attachments, an answer's usage, and rows written
by an older server (a usage without ``estimated``), on both stores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from server import event_store
from server.event_store import SqlEventStore
from shared.models import StateResponse
from tests.server.events import T, chat_created, event, message, new_id
from tests.server.test_store_contract import clock_store, parse, store

__all__ = ["clock_store", "store"]  # (the suite's fixtures, both backends)

SHA = "ab" * 32


async def same_json(store: SqlEventStore, account: str, limit: int) -> list[dict[str, Any]]:
    """Every page of the account's state both ways, compared; the pages' JSON."""
    pages, token, up_to = [], None, None
    while True:
        page = await store.read_state(account, up_to, None, limit, token)
        body = json.loads(await store.read_state_json(account, up_to, None, limit, token))
        models = StateResponse(
            snapshot=page.snapshot, up_to_seq=page.up_to_seq, current_seq=page.current_seq, next_page=page.next_page, total=page.total
        )
        assert body == models.model_dump(mode="json", by_alias=True)
        pages.append(body)
        token, up_to = page.next_page, page.up_to_seq
        if token is None:
            return pages


async def test_attachments_usage_and_an_older_rows_json_come_out_as_the_models_make_them(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_store, "AHEAD_SLICE", 1)  # (a page read ahead is made JSON a row at a time)
    account, chat, question, answer, old = new_id(), new_id(), new_id(), new_id(), new_id()
    asked = message("MessageAppended", question, chat, "what is in these?")
    asked["payload"]["attachments"] = [
        {"sha256": SHA, "name": "a.png", "mime": "image/png", "size": 10, "width": 4, "height": 3},
        {"sha256": "cd" * 32, "name": "notes.txt", "mime": "text/plain", "size": 5},
    ]
    run = new_id()
    ended = event(
        "MessageEdited",
        {"id": answer, "chatId": chat, "role": "assistant", "content": "two files", "status": "completed", "assistantId": "demo",
         "runId": run, "createdAt": T, "finishReason": "stop", "usage": {"promptTokens": 3, "completionTokens": 2, "estimated": True}},
    )  # fmt: skip
    chat_event = chat_created(chat)
    chat_event["payload"] |= {"instructions": "be brief"}
    await store.append(
        account,
        "dev",
        parse(
            chat_event,
            asked,
            event(
                "AssistantRunRequested", {"runId": run, "chatId": chat, "parentId": question, "messageId": answer, "assistantId": "demo"}
            ),
            ended,
            message("MessageAppended", old, chat, "from an older server"),
            event("PresetCreated", {"id": new_id(), "name": "p", "instructions": "", "temperature": 1.0, "maxTokens": 50, "createdAt": T}),
        ),
    )
    async with store.db.transaction(write=True) as tx:  # (as an older server wrote it: no "estimated")
        await tx.execute("UPDATE messages SET usage_json = ? WHERE id = ?", '{"promptTokens":1,"completionTokens":7}', old)
    for limit in (1, 2, 3, 100):
        pages = await same_json(store, account, limit)
    [page] = pages
    messages = {m["id"]: m for m in page["snapshot"]["messages"]}
    assert [a.get("width") for a in messages[question]["attachments"]] == [4, None]
    assert messages[answer]["usage"] == {"promptTokens": 3, "completionTokens": 2, "estimated": True}
    assert messages[old]["usage"] == {"promptTokens": 1, "completionTokens": 7, "estimated": False}
    assert "attachments" not in messages[answer] and "presetId" not in messages[answer]
    assert page["snapshot"]["chats"][0]["instructions"] == "be brief" and page["snapshot"]["presets"][0]["temperature"] == 1.0
