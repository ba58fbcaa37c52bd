"""Persistence of the local database as fixed-size chunks of its files (the browser keeps them in
IndexedDB, ``static/storage.js``): a durable commit stores only the chunks that changed, so its
cost does not grow with the database.

What changed is known without comparing anything: SQLite in WAL mode only appends to the -wal
file between checkpoints (so the chunks from the last stored end of the -wal onwards), and a
checkpoint rewrites exactly the database pages the -wal held (``Checkpoint.pages``). A -wal file
that starts over (new header) is stored from its start.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from webapp.database import Checkpoint

CHUNK = 65536  # a multiple of every SQLite page size up to 64 KiB: a page never spans two chunks

# (file name, the indexes of its chunks to store); the store records each named file's size too.
Writes = list[tuple[str, list[int]]]


class ChunkPersistence:
    """``write(writes)`` must store the named chunks and the files' sizes in one atomic, durable
    step, reading them before it yields (the files as this flush found them: a later commit may
    change them while the write waits its turn), and writes must be stored in the order asked; ``stored`` is {file name: size} of what the
    storage held when the database was opened (empty the first time: everything is stored then)."""

    def __init__(self, path: str, stored: dict[str, int], write: Callable[[Writes], Awaitable[None]]) -> None:
        self._database = path
        self._wal = path + "-wal"
        self._write = write
        self._everything = os.path.basename(path) not in stored
        self._wal_stored = stored.get(os.path.basename(self._wal), 0)
        self._wal_header = _header(self._wal)

    async def flush(self, checkpoint: Checkpoint | None) -> None:
        writes: Writes = []
        if self._everything:
            writes.append((os.path.basename(self._database), _chunks(0, _size(self._database))))
        elif checkpoint is not None:
            pages = sorted({(p - 1) * checkpoint.page_size // CHUNK for p in checkpoint.pages})
            writes.append((os.path.basename(self._database), pages))
        size, header = _size(self._wal), _header(self._wal)
        start = self._wal_stored if header == self._wal_header and size >= self._wal_stored and not self._everything else 0
        writes.append((os.path.basename(self._wal), _chunks(start, size)))
        # The next flush goes on from here, even if it is asked before this one is stored (the
        # writes are stored in the order asked); if this one fails, the next stores everything.
        self._everything, self._wal_stored, self._wal_header = False, size, header
        try:
            await self._write(writes)
        except BaseException:
            self._everything = True
            raise


def _chunks(start: int, end: int) -> list[int]:
    """The chunks that hold bytes start..end (none when the range is empty)."""
    return list(range(start // CHUNK, -(-end // CHUNK)))


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def _header(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(32)
    except FileNotFoundError:
        return b""
