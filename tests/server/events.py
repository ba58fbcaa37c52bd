"""Builders of wire events for the server tests."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

T = "2026-11-30T12:00:00.000Z"
_counter = itertools.count(1)


def new_id() -> str:
    return str(uuid.uuid4())


def event(kind: str, payload: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    return {"eventId": event_id or new_id(), "type": kind, "payload": payload, "createdAt": T}


def chat_created(chat_id: str, title: str = "A chat") -> dict[str, Any]:
    return event("ChatCreated", {"id": chat_id, "title": title, "createdAt": T})


def message(kind: str, message_id: str, chat_id: str, content: str = "hi") -> dict[str, Any]:
    return event(
        kind,
        {"id": message_id, "chatId": chat_id, "role": "user", "content": content, "createdAt": T},
    )
