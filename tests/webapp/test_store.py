"""The local store's durability contract (webapp/store.py)."""

from __future__ import annotations

from pathlib import Path

from shared.models import Chat, DomainEvent, EventType, Message
from tests.webapp.devices import T, new_id
from webapp.store import CHECKPOINT_WAL_BYTES, LocalStore


class RecordingPersistence:
    def __init__(self) -> None:
        self.flushes: list[bool] = []

    async def flush(self, database_file_changed: bool) -> None:
        self.flushes.append(database_file_changed)


async def test_every_write_is_flushed_and_the_database_file_only_after_a_checkpoint(tmp_path: Path) -> None:
    persistence = RecordingPersistence()
    path = tmp_path / "local.db"
    store = LocalStore(str(path), persistence)
    await store.open()
    assert persistence.flushes == [True]  # everything once at start-up

    chat = Chat(id=new_id(), title="t", created_at=T)
    await store.add_local(DomainEvent(event_id=new_id(), type=EventType.CHAT_CREATED, payload=chat, created_at=T))
    assert persistence.flushes[-1] is False  # a commit touches only the -wal file
    size_before = path.stat().st_size

    while persistence.flushes[-1] is False:  # write until the -wal passes the limit
        message = Message(id=new_id(), chat_id=chat.id, role="user", content="x" * 4000, created_at=T)
        event = DomainEvent(event_id=new_id(), type=EventType.MESSAGE_APPENDED, payload=message, created_at=T)
        await store.add_local(event)
        assert len(persistence.flushes) < 500
    assert path.stat().st_size > size_before  # the checkpoint wrote into the database file...
    wal = Path(str(path) + "-wal")
    assert not wal.exists() or wal.stat().st_size < CHECKPOINT_WAL_BYTES  # ...and emptied the -wal
    assert len(store.messages(chat.id)) == len(persistence.flushes) - 2
    store.close()


def _event(kind: EventType, payload: object) -> DomainEvent:
    return DomainEvent(event_id=new_id(), type=kind, payload=payload, created_at=T)  # type: ignore[arg-type]


async def test_the_outbox_coalesces_what_never_left_the_device(tmp_path: Path) -> None:
    from shared.models import ChatRef, MessageRef

    store = LocalStore(str(tmp_path / "local.db"), RecordingPersistence())
    chat = Chat(id=new_id(), title="t", created_at=T)
    await store.add_local(_event(EventType.CHAT_CREATED, chat))
    message = Message(id=new_id(), chat_id=chat.id, role="user", content="first", created_at=T)
    await store.add_local(_event(EventType.MESSAGE_APPENDED, message))

    # An edit before sending rewrites the queued message: one event goes out, with the new text.
    await store.add_local(_event(EventType.MESSAGE_EDITED, message.model_copy(update={"content": "second"})))
    queued = [p.event for p in store.outbox()]
    assert [e.type for e in queued] == ["ChatCreated", "MessageAppended"]
    assert queued[1].payload.content == "second"  # type: ignore[union-attr]
    assert [m.content for m in store.messages(chat.id)] == ["second"]

    # Withdrawn before sending: nothing about it goes out, and it is gone from the screen.
    await store.add_local(_event(EventType.MESSAGE_DELETED, MessageRef(id=message.id, chat_id=chat.id)))
    assert [e.type for e in (p.event for p in store.outbox())] == ["ChatCreated"]
    assert store.messages(chat.id) == []

    # Once an event may have reached the server, changes are new events of their own.
    other = Message(id=new_id(), chat_id=chat.id, role="user", content="kept", created_at=T)
    await store.add_local(_event(EventType.MESSAGE_APPENDED, other))
    await store.mark_attempted([p.event.event_id for p in store.outbox()])
    await store.add_local(_event(EventType.MESSAGE_EDITED, other.model_copy(update={"content": "kept, edited"})))
    assert [e.type for e in (p.event for p in store.outbox())] == ["ChatCreated", "MessageAppended", "MessageEdited"]

    # A chat created here and deleted unsent takes its queued messages along.
    fresh = Chat(id=new_id(), title="u", created_at=T)
    await store.add_local(_event(EventType.CHAT_CREATED, fresh))
    inside = Message(id=new_id(), chat_id=fresh.id, role="user", content="in it", created_at=T)
    await store.add_local(_event(EventType.MESSAGE_APPENDED, inside))
    await store.add_local(_event(EventType.CHAT_DELETED, ChatRef(id=fresh.id)))
    assert all(e.entity_id() not in (fresh.id, inside.id) for e in (p.event for p in store.outbox()))
    assert store.chat(fresh.id) is None
    store.close()
