"""Chunked persistence (webapp/chunks.py): whatever happened, the chunks stored so far rebuild the
database exactly as it was at the last durable write. The storage here is a dict standing in for
IndexedDB (static/storage.js keeps the same records: chunks and file sizes, written together)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.models import Chat, DomainEvent, EventType, Message, MessageRef
from tests.webapp.devices import T, new_id
from webapp import database
from webapp.chunks import CHUNK, ChunkPersistence, Writes
from webapp.store import LocalStore


class DictStorage:
    """Chunks and sizes, as IndexedDB holds them; ``writes`` records what each flush stored."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.chunks: dict[tuple[str, int], bytes] = {}
        self.sizes: dict[str, int] = {}
        self.writes: list[Writes] = []

    async def write(self, writes: Writes) -> None:
        for name, indexes in writes:
            path = self.directory / name
            data = path.read_bytes() if path.exists() else b""
            self.sizes[name] = len(data)
            for index in indexes:
                self.chunks[(name, index)] = data[index * CHUNK : (index + 1) * CHUNK]
        self.writes.append(writes)

    def restore(self, directory: Path) -> None:
        """What static/storage.js's load() does at start-up."""
        for name, size in self.sizes.items():
            data = bytearray(size)
            for (file, index), chunk in self.chunks.items():
                if file == name and index * CHUNK < size:
                    data[index * CHUNK : index * CHUNK + len(chunk)] = chunk[: size - index * CHUNK]
            (directory / name).write_bytes(bytes(data))


def _open(directory: Path, storage: DictStorage) -> LocalStore:
    path = str(directory / "chat.db")
    return LocalStore(path, ChunkPersistence(path, dict(storage.sizes), storage.write))


def _picture(store: LocalStore) -> tuple[object, ...]:
    """Everything the user would see or lose."""
    return (
        store.confirmed(),
        [(c, store.messages(c.id), store.draft(c.id)) for c in store.chats()],
        [p.event for p in store.outbox()],
        store.last_seq(),
        store.conn.execute("PRAGMA integrity_check").fetchone()[0],
    )


operations = st.lists(
    st.tuples(st.sampled_from(["say", "edit", "delete", "draft", "reopen"]), st.integers(0, 10**6), st.integers(0, 6000)),
    max_size=60,
)


@settings(max_examples=25, deadline=None)
@given(ops=operations)
def test_the_stored_chunks_rebuild_the_database_of_the_last_durable_write(ops: list[tuple[str, int, int]]) -> None:
    import asyncio

    asyncio.run(_run(ops))


async def _run(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(database, "CHECKPOINT_WAL_BYTES", 24 * 1024)  # many checkpoints
        directory, generation = Path(tmp), 0
        storage = DictStorage(directory / "0")
        storage.directory.mkdir()
        store = _open(storage.directory, storage)
        await store.open()
        chat = Chat(id=new_id(), title="t", created_at=T)
        await store.add_local(DomainEvent(event_id=new_id(), type=EventType.CHAT_CREATED, payload=chat, created_at=T))
        messages: list[str] = []
        for op, pick, size in ops:
            if op == "say" or not messages:
                message = Message(id=new_id(), chat_id=chat.id, role="user", content="x" * size or "-", created_at=T)
                kind, payload = EventType.MESSAGE_APPENDED, message
                messages.append(message.id)
            elif op == "edit":
                message_id = messages[pick % len(messages)]
                kind = EventType.MESSAGE_EDITED
                payload = Message(id=message_id, chat_id=chat.id, role="user", content="y" * size or "-", created_at=T)
            elif op == "delete":
                kind, payload = EventType.MESSAGE_DELETED, MessageRef(id=messages.pop(pick % len(messages)), chat_id=chat.id)
            elif op == "draft":
                await store.save_draft(chat.id, "d" * size)
                continue
            else:  # the tab closes (memory lost) and opens again from what was stored
                store.close()
                generation += 1
                storage.directory = directory / str(generation)
                storage.directory.mkdir()
                storage.restore(storage.directory)
                store = _open(storage.directory, storage)
                await store.open()
                continue
            await store.add_local(DomainEvent(event_id=new_id(), type=kind, payload=payload, created_at=T))  # type: ignore[arg-type]

            # A crash now: only what was stored survives, and it is exactly what was written.
            crashed = directory / f"crash{generation}"
            crashed.mkdir(exist_ok=True)
            for leftover in crashed.iterdir():
                leftover.unlink()
            storage.restore(crashed)
            restored = LocalStore(str(crashed / "chat.db"), ChunkPersistence(str(crashed / "chat.db"), {}, _ignore))
            assert _picture(restored) == _picture(store)
            restored.close()
        store.close()


async def _ignore(writes: Writes) -> None:
    return None


async def test_a_commit_stores_a_few_chunks_whatever_the_size_of_the_database(tmp_path: Path) -> None:
    storage = DictStorage(tmp_path)
    store = _open(tmp_path, storage)
    await store.open()
    chat = Chat(id=new_id(), title="t", created_at=T)
    await store.add_local(DomainEvent(event_id=new_id(), type=EventType.CHAT_CREATED, payload=chat, created_at=T))
    rows = [(new_id(), chat.id, "user", "x" * 1000, None, "completed", None, None, T, T, 1, None) for _ in range(20_000)]
    with store._transaction() as conn:
        conn.executemany("INSERT INTO confirmed_messages (id, chat_id, role, content, parent_id, status, assistant_id, run_id, created_at, updated_at, last_seq, attachments_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    await store._durable()
    while os.path.exists(str(tmp_path / "chat.db-wal")) and os.path.getsize(tmp_path / "chat.db-wal") > 0:
        await store.open()  # checkpoint the bulk insert
    assert os.path.getsize(tmp_path / "chat.db") > 20 * 1024 * 1024

    storage.writes.clear()
    for i in range(50):
        message = Message(id=new_id(), chat_id=chat.id, role="user", content=f"m{i}", created_at=T)
        await store.add_local(DomainEvent(event_id=new_id(), type=EventType.MESSAGE_APPENDED, payload=message, created_at=T))
    # Each commit stores the new end of the -wal (one chunk, two across a boundary); a checkpoint
    # the chunks of the pages the -wal held: a few of the database's 320 and more.
    for writes in storage.writes:
        for name, indexes in writes:
            assert len(indexes) <= (2 if name == "chat.db-wal" else 8), storage.writes
    assert any(name == "chat.db" for writes in storage.writes for name, _ in writes)  # a checkpoint came
    store.close()


async def test_writes_asked_before_the_last_is_stored_go_on_from_it_and_a_failed_one_is_made_good(tmp_path: Path) -> None:
    """Flushes may overlap (a snapshot's pages are stored while the next is taken): each goes on
    from where the one asked before it ends, and after one that failed, the next stores every file
    whole, so what was stored rebuilds the last durable write again."""
    import asyncio

    storage = DictStorage(tmp_path)
    failing: list[bool] = []
    asked: list[Writes] = []
    real_write = storage.write

    async def write(writes: Writes) -> None:
        asked.append(writes)
        await asyncio.sleep(0)  # stored later, in order
        if failing and failing.pop():
            raise RuntimeError("the storage refused")
        await real_write(writes)

    path = str(tmp_path / "chat.db")
    store = LocalStore(path, ChunkPersistence(path, {}, write))
    await store.open()

    async def commit(key: str) -> None:
        with store._transaction() as conn:
            store._set_meta(conn, key, "x" * 100_000)

    await commit("first")
    failing.append(True)
    refused = asyncio.ensure_future(store._durable())
    await commit("second")
    stored = asyncio.ensure_future(store._durable())
    with pytest.raises(RuntimeError):
        await refused
    await stored
    [(_, lost)], [(_, kept)] = asked[-2:]
    assert kept[0] == lost[-1] > 0  # (from the end of the one asked before it, not of the last stored)
    await commit("third")
    await store._durable()
    assert [name for name, _ in storage.writes[-1]] == ["chat.db", "chat.db-wal"]  # everything
    assert storage.writes[-1][1][1][0] == 0

    restored_dir = tmp_path / "restored"
    restored_dir.mkdir()
    storage.restore(restored_dir)
    restored = LocalStore(str(restored_dir / "chat.db"), ChunkPersistence(str(restored_dir / "chat.db"), {}, _ignore))
    assert all(restored._meta(k) == "x" * 100_000 for k in ("first", "second", "third"))
    restored.close()
    store.close()
