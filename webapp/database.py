"""The local database's file: one SQLite connection in WAL mode, its one write path, and how each
commit is made durable (``Persistence``; in the browser the changed chunks go to IndexedDB,
webapp/chunks.py).

Every write is one SQLite transaction (``_transaction``: the search index brought up to date in
it) followed by ``_durable()`` (``Persistence.flush()``, checkpointing the -wal when it is big); a
change counts as saved (and may reach the network) only once that has returned. ``Database`` is the
base of the store's parts (webapp/store.py).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from shared.models import format_time
from webapp import search as fulltext


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint wrote into the database file: these pages (numbered from 1)."""

    pages: frozenset[int]
    page_size: int


class Persistence(Protocol):
    async def flush(self, checkpoint: Checkpoint | None) -> None:
        """Make every committed change durable before returning. In WAL mode a commit only
        appends to the -wal file; the database file changes only at a checkpoint, and then
        ``checkpoint`` says which of its pages it rewrote."""


class FilePersistence:
    """A database file on a real disk is durable once SQLite has committed."""

    async def flush(self, checkpoint: Checkpoint | None) -> None:
        return None


# The -wal file is checkpointed into the database file once it is this large: the bigger, the
# fewer checkpoints, and the more pages each one rewrites.
CHECKPOINT_WAL_BYTES = 512 * 1024
# The same while a snapshot is downloaded (see apply_snapshot_page), and for a second after it: the
# writes on the way to being online (the log after the snapshot, the outbox) do not checkpoint
# the many megabytes it left in the -wal, the first one after that does (the search index's
# first slice, webapp/sync.py, in the background).
SNAPSHOT_WAL_BYTES = 64 * 1024 * 1024
SNAPSHOT_SETTLE_SECONDS = 1.0


def wal_pages(path: str) -> set[int]:
    """The database pages the frames of a -wal file hold (what a checkpoint copies from it).

    Format (sqlite.org/fileformat.html, "WAL file format"): a 32-byte header (page size at
    byte 8, salts at 16..24), then frames: a 24-byte header (page number at 0, the salts again at
    8..16) and the page. Frames with other salts are left from an earlier generation of the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    if len(data) < 32:
        return set()
    page_size, salts = int.from_bytes(data[8:12], "big"), data[16:24]
    pages: set[int] = set()
    for offset in range(32, len(data) - 24 - page_size + 1, 24 + page_size):
        if data[offset + 8 : offset + 16] == salts:
            pages.add(int.from_bytes(data[offset : offset + 4], "big"))
    return pages


def utc_now() -> str:
    return format_time(datetime.now(UTC))


class Database:
    """The connection and its write path; closed once ``close()`` is called (twice is fine)."""

    def __init__(self, path: str, persistence: Persistence, now: Callable[[], str] = utc_now) -> None:
        self._persistence = persistence
        self._now = now
        self._wal_path = path + "-wal"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        # WAL with a small journal: a commit persists the small -wal file, not the whole database.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA journal_size_limit={CHECKPOINT_WAL_BYTES}")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # we checkpoint ourselves: see _durable
        conn.execute("PRAGMA synchronous=NORMAL")
        self._conn: sqlite3.Connection | None = conn
        self._searchable = False  # (until the migration that makes the index has run)
        self._storing: list[asyncio.Future[None]] = []  # a snapshot's pages on their way to storage
        self._settled_at = 0.0  # (time.monotonic()) when a snapshot's -wal may be checkpointed
        self._committed = 0  # write transactions committed
        self._stored = 0  # the first this many are durable (their flush has resolved)
        self._saving: dict[str, int] = {}  # entity -> the commit of its latest local change (outbox.py)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the local store is closed")
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @contextmanager
    def _transaction(self, defer_index: bool = False) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            if self._searchable:
                fulltext.flush(conn, defer_index)  # the search index, in the same transaction
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._committed += 1

    async def open(self) -> None:
        """After opening: checkpoint what the -wal holds (migrations, an earlier session's
        commits) and persist that."""
        await self._flush(self._checkpoint())

    async def _durable(self, wal_bytes: int | None = None) -> None:
        """Called after every write transaction: persist it, checkpointing when the -wal is big."""
        if wal_bytes is None:
            wal_bytes = CHECKPOINT_WAL_BYTES if time.monotonic() >= self._settled_at else SNAPSHOT_WAL_BYTES
        big = os.path.exists(self._wal_path) and os.path.getsize(self._wal_path) > wal_bytes
        await self._flush(self._checkpoint() if big else None)

    async def _flush(self, checkpoint: Checkpoint | None) -> None:
        committed = self._committed
        await self._persistence.flush(checkpoint)
        self._stored = max(self._stored, committed)  # (a flush stores every commit before it)

    def all_durable(self) -> bool:
        """Every write committed so far is durable (its flush has resolved): a reload or a crash
        now loses none of them."""
        return self._stored >= self._committed

    def _checkpoint(self) -> Checkpoint:
        pages = wal_pages(self._wal_path)
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Checkpoint(frozenset(pages), int(self.conn.execute("PRAGMA page_size").fetchone()[0]))

    # --- meta: values kept by key --------------------------------------------------------------

    def _meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def last_seq(self) -> int:
        """The sync cursor: the server's state is known here up to this seq."""
        return int(self._meta("last_seq") or 0)
