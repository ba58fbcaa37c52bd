"""The SQLite backend of ``server/db.py``: the standard library's module, one writer connection
used from the event loop and a few readers, in WAL mode with checkpoints of our own."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from server.db import DatabaseUnavailable, Param, Row, Tx, UniqueViolation
from shared.schema import Dialect

log = logging.getLogger(__name__)

# Idle read connections kept open (more are opened while more read transactions are in flight).
IDLE_READERS = 4
# How long a transaction waits for another process's write lock (a CLI command, say).
BUSY_TIMEOUT_MS = 5000
# The most often the WAL is copied into the database file (a checkpoint), while there are writes.
CHECKPOINT_SECONDS = 1.0
WAL_SIZE_LIMIT = 16 * 1024 * 1024


class _SqliteTx:
    """Statements run at once on the caller's thread, the event loop's. A statement of ours here
    is a point read or write by key, or one page of the log or the state; handing
    each to a worker thread cost ten times that in thread switches and, while the loop was busy,
    up to a GIL switch interval (5 ms) before the loop took the result back."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, *params: Param) -> None:
        self._conn.execute(sql, params)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None:
        self._conn.executemany(sql, rows)

    async def fetchone(self, sql: str, *params: Param) -> Row | None:
        row: Row | None = self._conn.execute(sql, params).fetchone()
        return row

    async def fetchall(self, sql: str, *params: Param) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()


class _SqliteThreadTx(_SqliteTx):
    """The same in a worker thread, for the transactions that may take long (``slow=True``:
    compaction), which would hold up every request meanwhile if they ran on the loop."""

    async def execute(self, sql: str, *params: Param) -> None:
        await asyncio.to_thread(self._conn.execute, sql, params)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None:
        await asyncio.to_thread(self._conn.executemany, sql, rows)

    async def fetchone(self, sql: str, *params: Param) -> Row | None:
        row: Row | None = await asyncio.to_thread(lambda: self._conn.execute(sql, params).fetchone())
        return row

    async def fetchall(self, sql: str, *params: Param) -> list[Row]:
        rows: list[Row] = await asyncio.to_thread(lambda: self._conn.execute(sql, params).fetchall())
        return rows


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


class SqliteDatabase:
    """SQLite in WAL mode (synchronous=NORMAL: a commit survives the process crashing; the WAL is
    synced at checkpoints), used from the event loop itself (see ``_SqliteTx``).

    Checkpoints: the one connection that writes does not checkpoint (SQLite's automatic
    checkpoint runs in the commit that fills 1,000 pages, and its two fsyncs held the loop for up
    to 50 ms); after a commit, at most every ``CHECKPOINT_SECONDS``, a connection of its own
    checkpoints in a worker thread, beside the reads and the writes (PASSIVE: it waits for none).

    Writes: one connection, and an asyncio lock that makes each write transaction exclusive, so
    appends are serialized (SQLite has one writer anyway) and commit order is seq order; the
    appender groups concurrent appends into one transaction. A write transaction never blocks
    the loop waiting for another process's write lock: when that is taken, the wait for it goes
    to a worker thread.

    Reads: connections of their own (idle ones are kept), each read transaction one WAL snapshot:
    a read never waits for the writer's lock or for a write transaction in flight, and sees
    only committed transactions. (``:memory:`` is one database per connection: there reads use
    the writer's connection, under its lock.)"""

    dialect: Dialect = "sqlite"

    def __init__(self, path: str) -> None:
        self._path = path
        self._writer: sqlite3.Connection | None = None
        self._readers: list[sqlite3.Connection] = []  # idle
        self._lock = asyncio.Lock()
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint: asyncio.Future[None] | None = None  # the one running
        self._checkpoint_timer: asyncio.TimerHandle | None = None  # the next one, when due
        self._checkpoint_again = False  # a commit came while one ran: another after it
        self._checkpoint_began = 0.0

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN and COMMIT ourselves. check_same_thread=False:
        # a slow transaction runs its statements in a worker thread.
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, cached_statements=512)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        return conn

    async def open(self) -> None:
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = self._connect(0)
            conn.execute("PRAGMA journal_mode=WAL")
            if self._path != ":memory:":
                conn.execute("PRAGMA wal_autocheckpoint=0")
                conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")  # (a WAL started again is cut to this)
                self._checkpointer = self._connect(BUSY_TIMEOUT_MS)
        except sqlite3.Error as e:
            raise DatabaseUnavailable(f"cannot open {self._path}: {e}") from e
        self._writer = conn

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        checkpointer, self._checkpointer = self._checkpointer, None
        if self._checkpoint_timer is not None:
            self._checkpoint_timer.cancel()
            self._checkpoint_timer = None
        if self._checkpoint is not None:
            await asyncio.wait([self._checkpoint])  # (its failure is logged)
        if checkpointer is not None:
            checkpointer.close()
        if writer is not None:
            async with self._lock:  # (a transaction in flight ends first)
                writer.close()  # (the last connection to close checkpoints what is left)

    def _committed(self) -> None:
        """After a write commit: a checkpoint takes it to the database file, at once or when
        ``CHECKPOINT_SECONDS`` have passed since the last one began."""
        if self._checkpointer is None or self._checkpoint_timer is not None:
            return  # (the one due takes this commit too)
        if self._checkpoint is not None:
            self._checkpoint_again = True  # (the one running may have begun before this commit)
            return
        self._schedule_checkpoint()

    def _schedule_checkpoint(self) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._checkpoint_began + CHECKPOINT_SECONDS - loop.time())
        self._checkpoint_timer = loop.call_later(delay, self._start_checkpoint)

    def _start_checkpoint(self) -> None:
        self._checkpoint_timer = None
        if self._checkpointer is None:
            return
        loop = asyncio.get_running_loop()
        self._checkpoint_began, self._checkpoint_again = loop.time(), False
        self._checkpoint = asyncio.ensure_future(self._run_checkpoint(self._checkpointer))
        self._checkpoint.add_done_callback(self._checkpointed)

    async def _run_checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database file in two passes, both in a thread: the first while
        writes go on (most of the copying), the second with writes held (what came meanwhile,
        so the WAL is copied whole and the next write starts it again from its beginning; a
        checkpoint that writes always overtake never finishes, and the WAL grows for ever)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _checkpoint, conn)
        async with self._lock:
            if self._writer is not None:
                await loop.run_in_executor(None, _checkpoint, conn)

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpoint = None
        if not done.cancelled() and done.exception() is not None:  # (the next commit tries again)
            log.warning("SQLite checkpoint failed: %s", done.exception())
        if self._checkpoint_again and self._checkpointer is not None:
            self._schedule_checkpoint()

    async def _begin_write(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:  # (begun by a wait in a thread whose caller was cancelled meanwhile)
            conn.rollback()
        try:
            conn.execute("BEGIN IMMEDIATE")  # (the writer's busy timeout is 0: this never waits)
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
        else:
            return
        waiting = asyncio.ensure_future(asyncio.to_thread(self._wait_to_begin, conn))
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            # The thread still has the connection: keep the lock until it lets go, and end
            # whatever it began.
            await asyncio.wait([waiting])
            if waiting.exception() is None:
                conn.rollback()
            raise

    @staticmethod
    def _wait_to_begin(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute("PRAGMA busy_timeout=0")

    @asynccontextmanager
    async def transaction(self, write: bool = False, slow: bool = False) -> AsyncIterator[Tx]:
        if self._writer is None:
            raise DatabaseUnavailable("the database is not open")
        if write or self._path == ":memory:":
            async with self._lock:
                conn = self._writer
                if conn is None:
                    raise DatabaseUnavailable("the database is not open")
                if write:
                    await self._begin_write(conn)
                else:
                    conn.execute("BEGIN")
                async with self._statements(conn, slow) as tx:
                    yield tx
                if write:
                    self._committed()
            return
        with self._reader() as conn:
            conn.execute("BEGIN")
            async with self._statements(conn, slow) as tx:
                yield tx

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A read connection of the pool (a new one when none is idle), given back after."""
        conn = self._readers.pop() if self._readers else self._connect(BUSY_TIMEOUT_MS)
        try:
            yield conn
        finally:
            if self._writer is not None and len(self._readers) < IDLE_READERS:
                self._readers.append(conn)
            else:
                conn.close()

    @asynccontextmanager
    async def _statements(self, conn: sqlite3.Connection, slow: bool) -> AsyncIterator[Tx]:
        """The body of a begun transaction: commits, or rolls back on error."""
        try:
            yield _SqliteThreadTx(conn) if slow else _SqliteTx(conn)
        except sqlite3.IntegrityError as e:
            conn.rollback()
            raise UniqueViolation(str(e)) from e
        except BaseException:
            conn.rollback()
            raise
        conn.commit()

    async def read_one(self, sql: str, *params: Param) -> Row | None:
        if self._path == ":memory:":
            async with self.transaction() as tx:
                return await tx.fetchone(sql, *params)
        if self._writer is None:
            raise DatabaseUnavailable("the database is not open")
        with self._reader() as conn:
            row: Row | None = conn.execute(sql, params).fetchone()  # (one statement: its own snapshot)
            return row


