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
