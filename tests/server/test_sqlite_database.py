"""The SQLite backend (server/sqlite_db.py) runs its statements on the event loop: these are the promises
that makes it keep. Reads never wait for the writer; a write waiting for another process's lock
leaves the loop free; checkpoints happen (in a thread of their own); and the append's one read
finds its rows through indexes, so its cost does not grow with the log."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from server.append_sql import _prefetch_query
from server.appender import _Request
from server.db import integer, optional_text, text
from server.sqlite_db import SqliteDatabase
from shared.models import DomainEvent
from tests.server.events import chat_created, event, message, new_id
from tests.waiting import loop_turn, until


async def opened(path: Path) -> SqliteDatabase:
    db = SqliteDatabase(str(path))
    await db.open()
    async with db.transaction(write=True) as tx:
        await tx.execute("CREATE TABLE t (x INTEGER)")
    return db


def lock_waits(db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when a write transaction, finding another process's lock taken, has gone to wait for
    it (in a worker thread: the real wait, only watched)."""
    began = threading.Event()
    wait_to_begin = db._wait_to_begin

    def watched(conn: sqlite3.Connection) -> None:
        began.set()
        wait_to_begin(conn)

    monkeypatch.setattr(db, "_wait_to_begin", watched)
    return began


async def test_a_read_does_not_wait_for_a_write_transaction_in_flight(tmp_path: Path) -> None:
    db = await opened(tmp_path / "chat.db")
    try:
        async with db.transaction(write=True) as tx:
            await tx.execute("INSERT INTO t VALUES (1)")
            # (With reads behind the writer's lock, these would wait for this very transaction.)
            assert await asyncio.wait_for(db.read_one("SELECT count(*) FROM t"), 5) == (0,)
            async with asyncio.timeout(5):
                async with db.transaction() as read:
                    assert await read.fetchone("SELECT count(*) FROM t") == (0,)
        assert await db.read_one("SELECT count(*) FROM t") == (1,)
        async with db.transaction() as read:
            assert await read.fetchall("SELECT x FROM t") == [(1,)]
    finally:
        await db.close()


async def test_a_write_waiting_for_another_process_leaves_the_loop_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "chat.db"
    db = await opened(path)
    waiting = lock_waits(db, monkeypatch)
    other = sqlite3.connect(path, isolation_level=None)  # as another process would: its own lock
    try:
        other.execute("BEGIN IMMEDIATE")

        async def write() -> None:
            async with db.transaction(write=True) as tx:
                await tx.execute("INSERT INTO t VALUES (1)")

        task = asyncio.ensure_future(write())
        # The write waits in a thread, the loop free meanwhile (a wait on the loop would hold it for 5 s, then fail).
        await until(lambda: waiting.is_set() or task.done(), "the write neither waits for the lock nor is done")
        assert not task.done()
        assert await db.read_one("SELECT count(*) FROM t") == (0,)
        other.execute("COMMIT")  # the other process lets go: the write goes through
        await asyncio.wait_for(task, 5)
        assert await db.read_one("SELECT count(*) FROM t") == (1,)
    finally:
        other.close()
        await db.close()


async def test_a_write_cancelled_while_it_waits_for_another_process_leaves_nothing_begun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chat.db"
    db = await opened(path)
    waiting = lock_waits(db, monkeypatch)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")

        async def write(value: int) -> None:
            async with db.transaction(write=True) as tx:
                await tx.execute("INSERT INTO t VALUES (?)", value)

        cancelled = asyncio.ensure_future(write(1))
        await until(waiting.is_set, "the write waits for the lock")
        cancelled.cancel()  # (its wait for the lock goes on in a thread)
        # The write has taken its cancellation (the other process still holds the lock), and keeps the
        # connection until its thread lets go: asserted last, once the thread is done with it.
        await loop_turn()
        held = not cancelled.done()
        other.execute("COMMIT")
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(cancelled, 5)
        await asyncio.wait_for(write(2), 5)
        assert await db.read_one("SELECT group_concat(x) FROM t") == ("2",)
        assert held, "the cancelled write let go of the connection while its thread still waited with it"
    finally:
        other.close()
        await db.close()


async def test_commits_reach_the_database_file_through_checkpoints(tmp_path: Path) -> None:
    """The writer does not checkpoint (that would hold the loop): a thread does, after commits."""
    path = tmp_path / "chat.db"
    db = await opened(path)
    try:
        async with db.transaction(write=True) as tx:
            await tx.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
        rows = None
        for _ in range(100):
            await asyncio.sleep(0.05)
            shutil.copyfile(path, tmp_path / "file-only.db")  # the database file without its WAL
            alone = sqlite3.connect(tmp_path / "file-only.db")
            try:
                rows = alone.execute("SELECT count(*) FROM t").fetchone()
            except sqlite3.OperationalError:  # no table t yet: its commit is still in the WAL only
                rows = None
            finally:
                alone.close()
            if rows == (100,):
                break
        assert rows == (100,)
    finally:
        await db.close()


async def test_the_appends_read_searches_indexes_and_scans_no_table(tmp_path: Path) -> None:
    db = await opened(tmp_path / "chat.db")
    try:
        from server.event_store import SqlEventStore
        from tests.server.stores import Clock

        store = SqlEventStore(db, Clock())
        await store._migrate()
        loop = asyncio.get_running_loop()
        chat, question, reply = new_id(), new_id(), new_id()
        run = {"runId": new_id(), "chatId": chat, "parentId": question, "messageId": reply, "assistantId": "fake"}
        preset = {"id": new_id(), "name": "Terse", "createdAt": "2026-11-30T12:00:00.000Z"}
        events = [
            chat_created(chat), message("MessageAppended", question, chat), event("AssistantRunRequested", run),
            event("PresetUpdated", preset),
        ]  # fmt: skip
        group = [
            _Request(account, "device", [DomainEvent.model_validate(e) for e in events], loop.create_future())
            for account in (new_id(), new_id())
        ]
        query, params = _prefetch_query("sqlite", group)
        async with db.transaction() as tx:
            plan = [str(row[3]) for row in await tx.fetchall("EXPLAIN QUERY PLAN " + query, *params)]
            assert await tx.fetchall(query, *params) == []
        tables = [step for step in plan if step.startswith(("SCAN", "SEARCH")) and "CONSTANT ROW" not in step]
        assert {step.split()[1] for step in tables} == {"event_ids", "messages", "chats", "runs", "presets"}, plan
        assert all(step.startswith("SEARCH") for step in tables), plan
    finally:
        await db.close()


async def test_a_rows_values_are_narrowed_to_what_the_column_must_hold(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "values.db"))
    await db.open()
    try:
        row = await db.read_one("SELECT 'a', 7, NULL, 1.5")
        assert row is not None
        assert (text(row[0]), integer(row[1]), optional_text(row[2])) == ("a", 7, None)
        for narrow, value in ((text, row[1]), (text, row[2]), (integer, row[0]), (integer, row[3])):
            with pytest.raises(TypeError):
                narrow(value)
    finally:
        await db.close()
