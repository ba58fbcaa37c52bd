"""Export and import of an account's chats: one file format for the browser and the operator's CLI.

An export is the account's chats and messages, and its settings and presets, exactly as ``GET
/sync/state`` gives them (lastSeq and updatedAt included, for the record); the settings and
presets are left out when there are none (such a file is the one older versions wrote, and a file
without them still imports). Importing it is submitting ``import_events(export)`` through ``POST
/sync/events`` (or the store's append, which that route uses): a ``SettingsUpdated`` (only into an
account that has no settings yet), a ``PresetCreated`` per preset, a ``ChatCreated`` per chat,
then a ``MessageAppended`` per message. Nothing else: no ``AssistantRunRequested`` (that would
start runs), a reply still ``queued`` or ``streaming`` in the file arrives ``cancelled`` (no run
exists for it where it is imported; its ``finishReason`` says so), and a follow-up still queued
arrives as sent (``completed``, unanswered: sending it would start a run).

Importing is idempotent: each event's id is derived from what it creates (``event_id``), so the
same file imported twice submits the same eventIds, and the second time every event is a
``duplicate`` that changes nothing. An import never overwrites: a chat, message or preset the
account already has (under another eventId) is ``rejected`` ("already exists"), the rest go in,
and the file's settings are left out when the account has its own.

What the server may still refuse, event by event (the others go in): a message longer than its
``--max-content-chars``. A request carries at most ``--max-batch-events`` events (500 by default,
413 above): submit ``batches(events, size)`` one after the other, in order.

Pure: no clock (``now`` is given), no I/O; it runs under CPython and Pyodide.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar

from pydantic import Field

from shared.models import Chat, DomainEvent, EventType, Message, Preset, Settings, Status, Timestamp, Wire

FORMAT: Literal["chat-export"] = "chat-export"
VERSION: Literal[1] = 1
# The namespace of imported events' ids (``event_id``); fixed for ever, or a second import of
# the same file would no longer be a duplicate.
NAMESPACE = uuid.UUID("adcc155f-11f9-4334-8bc3-f8c953f43a07")
# A reply whose run was still going when exported has no run where it is imported: it ends there.
IMPORTED_STATUS: dict[Status, Status] = {"queued": "cancelled", "streaming": "cancelled"}

T = TypeVar("T")
Entity = TypeVar("Entity", Chat, Message, Preset, Settings)
Created = Chat | Message | Preset | Settings


def _none(value: list[Any]) -> bool:
    return not value


class Export(Wire):
    """The file: ``{"format": "chat-export", "version": 1, "exportedAt", "chats", "messages",
    "settings"?, "presets"?}`` (the last two left out when empty)."""

    format: Literal["chat-export"]
    version: Literal[1]
    exported_at: Timestamp
    chats: list[Chat]
    messages: list[Message]
    settings: list[Settings] = Field(default=[], max_length=1, exclude_if=_none)
    presets: list[Preset] = Field(default=[], exclude_if=_none)


def _creation(entity: Created) -> tuple[str, str]:
    return (entity.created_at, entity.id)  # (times are canonical RFC 3339: they sort as strings)


def export_of(
    chats: Iterable[Chat],
    messages: Iterable[Message],
    now: str,
    settings: Iterable[Settings] = (),
    presets: Iterable[Preset] = (),
) -> Export:
    """The export of these entities, taken at ``now``: each kind by createdAt, then id."""
    return Export(
        format=FORMAT,
        version=VERSION,
        exported_at=now,
        chats=sorted(chats, key=_creation),
        messages=sorted(messages, key=_creation),
        settings=sorted(settings, key=_creation),
        presets=sorted(presets, key=_creation),
    )


def import_events(export: Export, now: str, has_settings: bool = False) -> list[DomainEvent]:
    """The events that create the export's entities in an account (see the module).

    First a ``SettingsUpdated`` with the file's settings, unless the account ``has_settings``
    (an import never overwrites), then a ``PresetCreated`` per preset, a ``ChatCreated`` per chat
    (each by createdAt, then id), then a ``MessageAppended`` per
    message whose chat is in the file (the others are skipped), every message after its parent
    when the parent is in the file, whatever their createdAt say (else by createdAt, then id).
    A message whose parent is not in the file (it was deleted) keeps its parentId: the server
    accepts it, and ``shared.thread`` places it as it did where it was exported. An id given twice
    in the file counts once (the first by that order). lastSeq and updatedAt are left to the
    server; ``queued`` and ``streaming`` become ``cancelled``. The eventIds do not depend on
    ``now``, on the file's order, or on lastSeq and updatedAt.
    """
    chats = _first_of_each(export.chats)
    known = {chat.id for chat in chats}
    messages = [m for m in _first_of_each(export.messages) if m.chat_id in known]
    events = []
    if not has_settings:
        events += [_created(EventType.SETTINGS_UPDATED, s.model_copy(update=_SERVER_FILLS), now) for s in export.settings]
    events += [_created(EventType.PRESET_CREATED, p.model_copy(update=_SERVER_FILLS), now) for p in _first_of_each(export.presets)]
    events += [_created(EventType.CHAT_CREATED, chat.model_copy(update=_SERVER_FILLS), now) for chat in chats]
    for message in _parents_first(messages):
        events.append(_created(EventType.MESSAGE_APPENDED, message.model_copy(update={**_SERVER_FILLS, **_ended(message)}), now))
    return events


def _ended(message: Message) -> dict[str, Any]:
    """What a message becomes where it is imported: a follow-up still queued is sent (nothing
    answers it: that would start a run); a reply still being written has ended, cancelled."""
    if message.is_queued_follow_up:
        return {"status": "completed"}
    status = IMPORTED_STATUS.get(message.status)
    return {} if status is None else {"status": status, "finish_reason": "cancelled"}


def batches(events: Sequence[T], size: int) -> Iterator[list[T]]:
    """``events`` in order, at most ``size`` at a time (a server's ``--max-batch-events``).

    Submitted one after the other, each batch finds what it needs (chats, parents) already there."""
    if size < 1:
        raise ValueError("a batch holds at least one event")
    for start in range(0, len(events), size):
        yield list(events[start : start + size])


def event_id(kind: EventType, payload: Created) -> str:
    """The id of the event of ``kind`` that creates ``payload``: a UUIDv5 of the type, the
    entity's id and a digest of its content, so the same entity always gets the same eventId and
    a changed one (an edit made since) a new one."""
    content = json.dumps(payload.wire(), sort_keys=True, separators=(",", ":"))  # (ASCII: any text encodes)
    digest = hashlib.sha256(content.encode()).hexdigest()
    return str(uuid.uuid5(NAMESPACE, f"{kind}:{payload.id}:{digest}"))


_SERVER_FILLS = {"updated_at": None, "last_seq": None}


def _created(kind: EventType, payload: Created, now: str) -> DomainEvent:
    return DomainEvent(event_id=event_id(kind, payload), type=kind, payload=payload, created_at=now)


def _first_of_each(entities: Iterable[Entity]) -> list[Entity]:
    """One entity per id, the first by createdAt then id (then the file's order), in that order."""
    seen: set[str] = set()
    unique: list[Entity] = []
    for entity in sorted(entities, key=_creation):
        if entity.id not in seen:
            seen.add(entity.id)
            unique.append(entity)
    return unique


def _parents_first(messages: list[Message]) -> list[Message]:
    """``messages`` by createdAt then id, except that each comes after its parent when the parent
    is among them (a parent may look newer than its child: devices' clocks differ). A cycle of
    parents (only a broken file has one) is cut where the walk up meets it again."""
    by_id = {m.id: m for m in messages}
    placed: set[str] = set()
    ordered: list[Message] = []
    for message in messages:  # (already in createdAt, id order)
        chain: list[Message] = []  # the message and its ancestors not placed yet, child first
        on_chain: set[str] = set()
        node: Message | None = message
        while node is not None and node.id not in placed and node.id not in on_chain:
            chain.append(node)
            on_chain.add(node.id)
            node = by_id.get(node.parent_id) if node.parent_id is not None else None
        for ancestor in reversed(chain):
            placed.add(ancestor.id)
            ordered.append(ancestor)
    return ordered
