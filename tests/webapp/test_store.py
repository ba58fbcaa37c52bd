"""The local store's durability contract (webapp/store.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shared.models import Chat, DomainEvent, EventType, Message
from tests.waiting import until
from tests.webapp.devices import T, new_id
from webapp.database import Checkpoint
from webapp.store import LocalStore


class RecordingPersistence:
    def __init__(self) -> None:
        self.flushes: list[Checkpoint | None] = []

    async def flush(self, checkpoint: Checkpoint | None) -> None:
        self.flushes.append(checkpoint)


async def test_every_write_is_flushed_and_a_checkpoint_names_the_pages_it_rewrote(tmp_path: Path) -> None:
    persistence = RecordingPersistence()
    path = tmp_path / "local.db"
    store = LocalStore(str(path), persistence)
    await store.open()
    [opened] = persistence.flushes  # the migrations' pages, checkpointed at start-up
    assert opened is not None and opened.pages and opened.page_size == 4096

    chat = Chat(id=new_id(), title="t", created_at=T)
    await store.add_local(DomainEvent(event_id=new_id(), type=EventType.CHAT_CREATED, payload=chat, created_at=T))
    assert persistence.flushes[-1] is None  # a commit touches only the -wal file
    before = path.read_bytes()

    while persistence.flushes[-1] is None:  # write until the -wal passes the limit
        message = Message(id=new_id(), chat_id=chat.id, role="user", content="x" * 4000, created_at=T)
        event = DomainEvent(event_id=new_id(), type=EventType.MESSAGE_APPENDED, payload=message, created_at=T)
        await store.add_local(event)
        assert len(persistence.flushes) < 500
    checkpoint = persistence.flushes[-1]
    assert checkpoint is not None
    after = path.read_bytes()
    size = checkpoint.page_size
    changed = {
        n + 1 for n in range(len(after) // size) if before[n * size : (n + 1) * size] != after[n * size : (n + 1) * size]
    }
    assert changed and changed <= checkpoint.pages  # every page the checkpoint rewrote is named
    wal = Path(str(path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # ...and the -wal was emptied
    assert len(store.messages(chat.id)) == len(persistence.flushes) - 2
    store.close()


class HeldPersistence:
    """A flush that resolves only when the test lets it (IndexedDB taking its time)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()

    async def flush(self, checkpoint: Checkpoint | None) -> None:
        await self.gate.wait()


async def test_a_write_is_said_durable_only_once_its_flush_has_resolved(tmp_path: Path) -> None:
    persistence = HeldPersistence()
    store = LocalStore(str(tmp_path / "local.db"), persistence)
    await store.open()
    assert store.all_durable()
    persistence.gate.clear()
    chat = Chat(id=new_id(), title="t", created_at=T)
    adding = asyncio.ensure_future(store.add_local(_event(EventType.CHAT_CREATED, chat)))
    await until(lambda: store.chat(chat.id) is not None)  # in memory at once...
    assert not store.all_durable()  # ...not durable yet: a reload now would not find it
    persistence.gate.set()
    await adding
    assert store.all_durable()
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


async def test_an_outbox_entry_goes_pending_sending_failed_sent_and_leaves_with_its_seq(tmp_path: Path) -> None:
    from shared.models import EventResult, LoggedEvent

    path = str(tmp_path / "local.db")
    store = LocalStore(path, RecordingPersistence())
    chat = Chat(id=new_id(), title="t", created_at=T)
    event = _event(EventType.CHAT_CREATED, chat)
    await store.add_local(event)

    def entry() -> tuple[str, int, str | None]:
        [pending] = store.outbox()
        return pending.status, pending.attempts, pending.last_error

    assert entry() == ("pending", 0, None)
    await store.mark_attempted([event.event_id])
    assert entry() == ("sending", 1, None)
    await store.record_failure([event.event_id], "offline")
    assert entry() == ("failed", 1, "offline")
    await store.mark_attempted([event.event_id])
    store.close()  # the tab closes with the push under way: after a reload it is sent again
    store = LocalStore(path, RecordingPersistence())
    assert entry() == ("sending", 2, "offline")
    assert store.pending_count() == 1

    await store.record_results([EventResult(event_id=event.event_id, status="accepted", seq=1)])
    assert store.outbox() == [] and store.pending_count() == 0  # nothing left to push...
    assert store.chat(chat.id) is not None and store.chat(chat.id).last_seq == 0  # ...but not confirmed yet
    logged = LoggedEvent(seq=1, origin="d", event_id=event.event_id, type=event.type, payload=chat, created_at=T)
    await store.apply_remote([logged], 1)
    assert store.conn.execute("SELECT count(*) FROM pending_events").fetchone()[0] == 0
    assert store.chat(chat.id).last_seq == 1  # type: ignore[union-attr]
    store.close()


async def test_migration_3_gives_old_outbox_entries_their_status(tmp_path: Path) -> None:
    import sqlite3

    path = str(tmp_path / "local.db")
    LocalStore(path, RecordingPersistence()).close()
    conn = sqlite3.connect(path)  # as a database before 0003 had it
    conn.execute("DELETE FROM schema_migrations WHERE name = '0003_outbox_statuses'")
    rows = [("a", "a", 0, None), ("b", "b", 1, None), ("c", "c", 2, "timeout")]
    conn.executemany(
        "INSERT INTO pending_events (event_id, entity_id, body, status, attempts, last_error) VALUES (?, ?, '{}', 'pending', ?, ?)",
        rows,
    )
    conn.commit()
    conn.close()
    store = LocalStore(path, RecordingPersistence())
    statuses = store.conn.execute("SELECT event_id, status FROM pending_events ORDER BY event_id").fetchall()
    assert [tuple(r) for r in statuses] == [("a", "pending"), ("b", "sending"), ("c", "failed")]
    store.close()


async def test_the_sync_state_is_the_cursor_and_when_the_server_last_brought_us_up_to_date(tmp_path: Path) -> None:
    from shared.models import LoggedEvent, Snapshot

    moments = iter(["2026-11-30T12:00:00.000Z", "2026-11-30T12:05:00.000Z"])
    store = LocalStore(str(tmp_path / "local.db"), RecordingPersistence(), now=lambda: next(moments))
    assert (store.last_seq(), store.synced_at()) == (0, None)
    chat = Chat(id=new_id(), title="t", created_at=T)
    await store.add_local(_event(EventType.CHAT_CREATED, chat))  # a local change is no sync
    assert store.synced_at() is None
    logged = LoggedEvent(seq=3, origin="d", event_id=new_id(), type=EventType.CHAT_CREATED, payload=chat, created_at=T)
    await store.apply_remote([logged], 4)
    assert (store.last_seq(), store.synced_at()) == (4, "2026-11-30T12:00:00.000Z")
    await store.replace(Snapshot(chats=[], messages=[]), 9)
    assert (store.last_seq(), store.synced_at()) == (9, "2026-11-30T12:05:00.000Z")
    store.close()


async def test_migration_9_keeps_each_row_once_and_the_overlay_on_top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database of two full copies (confirmed and shown) becomes one of each row once, with
    the server's version of the rows the outbox changed kept aside: nothing shown changes, the
    confirmed state is the same, and the overlay still comes off and goes back on as before."""
    import json
    import sqlite3

    from shared.models import EventResult, LoggedEvent, MessageRef
    from webapp import store as local

    path = str(tmp_path / "local.db")
    monkeypatch.setattr(local, "MIGRATIONS", local.MIGRATIONS[:8])
    LocalStore(path, RecordingPersistence()).close()  # as a database before 0009 had it
    monkeypatch.undo()

    chat = Chat(id=new_id(), title="t", created_at=T, last_seq=1)
    m1, m2 = (Message(id=new_id(), chat_id=chat.id, role="user", content=f"m{i}", created_at=T, last_seq=1 + i) for i in (1, 2))
    edited = m1.model_copy(update={"content": "edited", "last_seq": 0})
    m3 = Message(id=new_id(), chat_id=chat.id, role="user", content="new here", created_at=T, last_seq=0)
    edit = DomainEvent(event_id=new_id(), type=EventType.MESSAGE_EDITED, payload=edited, created_at=T)
    delete = DomainEvent(event_id=new_id(), type=EventType.MESSAGE_DELETED, payload=MessageRef(id=m2.id, chat_id=chat.id), created_at=T)
    append = DomainEvent(event_id=new_id(), type=EventType.MESSAGE_APPENDED, payload=m3, created_at=T)

    def insert(conn: sqlite3.Connection, table: str, row: Chat | Message) -> None:
        values = row.model_dump()
        values["updated_at"] = T
        conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})", list(values.values()))

    conn = sqlite3.connect(path)
    for table, row in (("chats", chat), ("messages", m1), ("messages", m2)):
        insert(conn, table, row)
        insert(conn, "confirmed_" + table, row)
    conn.execute("DELETE FROM messages WHERE id IN (?, ?)", (m1.id, m2.id))  # what the outbox made of them
    insert(conn, "messages", edited)
    insert(conn, "messages", m3)
    for event in (edit, delete, append):
        conn.execute(
            "INSERT INTO pending_events (event_id, entity_id, body) VALUES (?, ?, ?)",
            (event.event_id, event.entity_id(), json.dumps(event.wire())),
        )
    conn.execute("INSERT INTO meta VALUES ('last_seq', '3')")
    conn.commit()
    conn.close()

    store = LocalStore(path, RecordingPersistence())
    shown = lambda: [(m.id, m.content) for m in store.messages(chat.id)]  # noqa: E731
    assert shown() == [(m1.id, "edited"), (m3.id, "new here")]
    server = [(m.id, m.content) for m in store.confirmed().messages]
    assert sorted(server) == sorted([(m1.id, "m1"), (m2.id, "m2")]) and len(store.confirmed().chats) == 1
    kept = store.conn.execute("SELECT count(*) FROM confirmed_messages").fetchone()[0]
    assert kept == 2 and store.conn.execute("SELECT count(*) FROM confirmed_chats").fetchone()[0] == 0

    # The delete refused: the message is back as the server has it; the edit confirmed by the log.
    await store.record_results([EventResult(event_id=delete.event_id, status="rejected", error="no")])
    assert sorted(shown()) == sorted([(m1.id, "edited"), (m2.id, "m2"), (m3.id, "new here")])
    logged = LoggedEvent(seq=4, origin="d", event_id=edit.event_id, type=EventType.MESSAGE_EDITED, payload=edited, created_at=T)
    await store.apply_remote([logged])
    assert ("edited", 4) in [(m.content, m.last_seq) for m in store.confirmed().messages]
    assert [tuple(r) for r in store.conn.execute("SELECT tbl, id FROM overlaid")] == [("messages", m3.id)]
    store.close()


async def test_migration_13_keeps_the_rows_and_the_outbox_and_takes_settings_and_presets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database of the release before it (rows, a chat kept aside under a pending rename, the
    outbox's JSON as that release wrote it): the rows read as they did, with the new fields
    null, the overlay comes off and goes back on, and the new tables take their rows."""
    import json
    import sqlite3

    from shared.models import SETTINGS_ID, EventResult, Preset, Settings
    from webapp import store as local

    path = str(tmp_path / "local.db")
    monkeypatch.setattr(local, "MIGRATIONS", local.MIGRATIONS[:12])
    LocalStore(path, RecordingPersistence()).close()  # as a database before 0013 had it
    monkeypatch.undo()

    chat, message, rename = new_id(), new_id(), new_id()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO chats (id, title, created_at, updated_at, last_seq) VALUES (?, 'Renamed', ?, ?, 0)", (chat, T, T))
    conn.execute("INSERT INTO confirmed_chats (id, title, created_at, updated_at, last_seq) VALUES (?, 'Old', ?, ?, 1)", (chat, T, T))
    conn.execute(
        "INSERT INTO messages (id, chat_id, role, content, status, created_at, updated_at, last_seq) VALUES (?, ?, 'user', 'hi', 'completed', ?, ?, 2)",
        (message, chat, T, T),
    )
    conn.execute("INSERT INTO overlaid VALUES ('chats', ?)", (chat,))
    body = {"eventId": rename, "type": "ChatUpdated", "payload": {"id": chat, "title": "Renamed", "createdAt": T}, "createdAt": T}
    conn.execute("INSERT INTO pending_events (event_id, entity_id, body) VALUES (?, ?, ?)", (rename, chat, json.dumps(body)))
    conn.execute("INSERT INTO meta VALUES ('last_seq', '2')")
    conn.commit()
    conn.close()

    store = LocalStore(path, RecordingPersistence())
    [row] = store.messages(chat)
    assert (row.content, row.preset_id, row.instructions, row.finish_reason, row.usage) == ("hi", None, None, None, None)
    shown = store.chat(chat)
    assert shown is not None and (shown.title, shown.instructions, shown.preset_id) == ("Renamed", None, None)
    assert [c.title for c in store.confirmed().chats] == ["Old"] and store.settings() is None and store.presets() == []
    await store.record_results([EventResult(event_id=rename, status="rejected", error="no")])  # the overlay comes off
    assert [c.title for c in store.chats()] == ["Old"]
    await store.add_local(_event(EventType.SETTINGS_UPDATED, Settings(id=SETTINGS_ID, instructions="Metric.", created_at=T)))
    await store.add_local(_event(EventType.PRESET_CREATED, Preset(id=new_id(), name="Terse", temperature=0.5, created_at=T)))
    settings = store.settings()
    assert settings is not None and settings.instructions == "Metric." and [p.temperature for p in store.presets()] == [0.5]
    store.close()
