"""The bytes of attachments: blobs, content-addressed by their SHA-256, behind one contract
(``BlobStore``) with two implementations, and the one sniffing of what a blob is (``sniff``).

Guarantees every store keeps (tests/server/test_blob_store_contract.py runs them on each):

* An upload belongs to an ``owner`` (an account) and names the blob it will be: each owner sends
  the bytes of its own upload (no one completes another's, or learns of it), while the complete
  blob is stored once, however many owners uploaded it.
* ``append_from`` adds bytes at ``offset`` only when that is exactly what the upload has
  received (else ``OffsetMismatch`` with the store's offset, before a byte is read): so
  concurrent appends to one upload, from any process, never interleave, and a retried chunk is
  never stored twice. It stores the bytes as they come (a request's body, streamed), so a chunk
  is never held whole in memory; ``append`` is the same with bytes at hand. The offset an append
  returns, and the one ``received`` tells, is durable: a crash after it keeps those bytes. An
  append cut off (its source failing: a client gone mid-chunk; a process killed) keeps a prefix
  of what came, which ``received`` tells.
* ``complete`` checks the SHA-256 of the whole upload. A mismatch discards the upload
  (``HashMismatch``); a match makes the blob readable. Until then, no reader sees any of it:
  there is no half blob, whatever crashes.
* ``delete`` removes a complete blob, but not one made or completed again after
  ``created_before`` (garbage collection passes over what is new, see server/attachments.py).

``FileBlobStore`` (the default beside SQLite) keeps files under a directory, sharded by digest;
``SqlBlobStore`` (with PostgreSQL) keeps chunks in the database, so that every server process
sees every blob. ``open_blob_store`` picks the one for the configured database.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from server.db import Database, Tx, integer, text
from shared.models import SHA256_PATTERN, format_time
from shared.sniff import IMAGE_TYPES as IMAGE_TYPES  # (what a blob is: shared/sniff.py)
from shared.sniff import OTHER_TYPE as OTHER_TYPE
from shared.sniff import PDF_TYPE as PDF_TYPE
from shared.sniff import SNIFF_BYTES as SNIFF_BYTES
from shared.sniff import TEXT_TYPE as TEXT_TYPE
from shared.sniff import sniff as sniff

# A chunk of the SQL store: one row of ``blob_chunks``. A PATCH's body is split into rows of at
# most this many bytes, so reading a blob holds one row in memory at a time.
ROW_BYTES = 1024 * 1024
# What a file store reads at a time (hashing, serving).
READ_BYTES = 256 * 1024
# What a file store writes at a time: the pieces of a request's body gathered until there are
# this many bytes, written (and hashed beside) in a thread while the event loop receives the next.
WRITE_BYTES = 1024 * 1024
# How many bytes of an append a file store writes before it has them flushed to disk (fdatasync,
# in a helper thread, while it writes on), so the fsync that makes the answered offset durable
# finds little left to write. (50 MB in one PATCH here: 150 ms with this, hashing beside the
# writes; 207 ms with an fdatasync every 32 MiB in the writing thread, hashing after each write.)
SYNC_BYTES = 4 * 1024 * 1024
# Uploads a store's process keeps the running digest of (a file store's each hold their partial
# file open).
MAX_HASHED = 64

# A file store's helper threads: an append's batch is hashed in one while it is written, and its
# bytes flushed to disk in one while the next are written.
_HELPERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="blob-helper")

T = TypeVar("T")

_SHA256 = re.compile(SHA256_PATTERN)
_OWNER = re.compile(r"^[A-Za-z0-9_-]{1,100}$")  # (an account's id: it names a directory)


class BlobError(Exception):
    """Base of the blob stores' own errors."""


class OffsetMismatch(BlobError):
    def __init__(self, offset: int) -> None:
        super().__init__(f"the upload has {offset} bytes")
        self.offset = offset


class HashMismatch(BlobError):
    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"the bytes' SHA-256 is {actual}, not {expected}")
        self.expected, self.actual = expected, actual


class BlobMissing(BlobError):
    """No complete blob (or no upload) with this digest."""


class TooMuch(BlobError):
    """An append's bytes went past the most it was to take (the first ``most`` are kept)."""

    def __init__(self, most: int) -> None:
        super().__init__(f"more than {most} bytes")
        self.most = most


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int
    created_at: datetime  # when it was completed last


def _check(owner: str | None, sha256: str) -> None:
    if not _SHA256.fullmatch(sha256):
        raise ValueError(f"not a SHA-256 in lowercase hex: {sha256!r}")
    if owner is not None and not _OWNER.fullmatch(owner):
        raise ValueError(f"not an owner: {owner!r}")


class BlobStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None:
        """Safe to call twice."""

    async def begin(self, owner: str, sha256: str) -> int:
        """Start ``owner``'s upload of the blob (nothing when started already); its offset."""

    async def received(self, owner: str, sha256: str) -> int | None:
        """The bytes ``owner``'s upload of the blob has, or None when none is under way."""

    async def append(self, owner: str, sha256: str, offset: int, data: bytes) -> int:
        """``append_from`` with the bytes at hand."""

    async def append_from(self, owner: str, sha256: str, offset: int, pieces: AsyncIterable[bytes], most: int) -> int:
        """Add the bytes ``pieces`` yields at ``offset``, stored as they come (starting the upload
        if need be); the new offset, once every byte is durable. ``OffsetMismatch`` when the upload
        has another count of bytes (``pieces`` untouched); ``TooMuch`` past ``most`` bytes.
        Should ``pieces`` fail meanwhile, or the caller be cancelled, what came is kept (a prefix
        of it, at least) and the failure goes on."""

    async def complete(self, owner: str, sha256: str, size: int) -> int:
        """Check the upload's SHA-256 and make it the blob; its size (``size``, the bytes the
        caller saw it reach). ``HashMismatch`` (the upload is gone) when the bytes are not the
        blob's; ``BlobMissing`` when there is no upload; ``OffsetMismatch`` (the upload left as it
        is) when it has another count of bytes: another caller completed it meanwhile, and a
        third began it again (its bytes are not checked: they are not the ones the caller saw)."""

    async def discard(self, owner: str, sha256: str) -> None:
        """Forget ``owner``'s upload of the blob, if any."""

    async def size(self, sha256: str) -> int | None:
        """The complete blob's size, or None when there is none."""

    def read(self, sha256: str, start: int = 0) -> AsyncGenerator[bytes, None]:
        """The blob's bytes from ``start``, in pieces. ``BlobMissing`` when there is none."""

    async def delete(self, sha256: str, created_before: datetime | None = None) -> bool:
        """Remove the blob (only if completed before ``created_before``, when given); whether it did."""

    async def blobs(self) -> list[StoredBlob]:
        """Every complete blob."""


async def one_piece(data: bytes) -> AsyncIterator[bytes]:
    """``data`` as the pieces of an ``append_from``."""
    yield data


async def whole(work: Callable[[], T], undo: Callable[[T], object] | None = None) -> T:
    """``work`` in a thread, awaited to its end even should the caller be cancelled meanwhile
    (the cancellation goes on after it, and ``undo`` is given what ``work`` made, in a thread):
    what it does with an open file, or a digest, is over before the caller's cleanup closes
    them, and a file it opened for a caller gone is closed."""
    task = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        if not task.cancelled() and task.exception() is None and undo is not None:
            made = task.result()
            undoing = asyncio.ensure_future(asyncio.to_thread(undo, made))
            while not undoing.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([undoing])
        raise


class _Turns:
    """One at a time per upload, within a process (an asyncio lock each, while in use)."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._users: dict[tuple[str, str], int] = {}

    @asynccontextmanager
    async def turn(self, owner: str, sha256: str) -> AsyncIterator[None]:
        _check(owner, sha256)
        key = (owner, sha256)
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]


async def first_bytes(store: BlobStore, sha256: str, count: int) -> bytes:
    """Up to ``count`` bytes of the blob's start (for ``sniff``, and what a model reads of a
    text file)."""
    head, have = [], 0
    pieces = store.read(sha256)
    try:
        async for piece in pieces:
            head.append(piece[: count - have])
            have += len(head[-1])
            if have >= count:
                break
    finally:
        await pieces.aclose()
    return b"".join(head)


# --- the file system -------------------------------------------------------------------------


class FileBlobStore:
    """Blobs as files: ``<root>/blobs/ab/cd/<sha256>``; an upload in progress is
    ``<root>/uploads/<owner>/<sha256>.part``, written in place as the bytes come, hashed as they
    are written (in a thread, while the event loop receives the next), fsynced before an append
    returns (and then let go of from the page cache), and renamed into ``blobs/`` only once its
    digest is checked (then the directory is fsynced too). A file's modification time is when
    it was completed (``clock``). Appends to an upload take turns by a lock of its file
    (``flock``), so several processes may share the directory; within a process an asyncio
    lock keeps them from each holding a thread. The running SHA-256 of an upload stays with this
    process, so the last append checks the digest without reading the file again; the file is
    read (once) only when another process, or this one before a restart, wrote part of it."""

    def __init__(self, root: Path, clock: Callable[[], datetime]) -> None:
        self.root = root
        self._clock = clock
        self._turns = _Turns()
        # The SHA-256 of each upload so far, kept beside its partial file as this process's
        # appends wrote it, so completing it reads nothing again (see ``_Hashed``).
        self._hashed: dict[Path, _Hashed] = {}
        self._hashed_lock = threading.Lock()  # (appends of different uploads run in threads at once)

    async def open(self) -> None:
        for sub in ("blobs", "uploads"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    async def close(self) -> None:
        with self._hashed_lock:
            held, self._hashed = list(self._hashed.values()), {}
        for hashed in held:
            hashed.close()

    def _blob(self, sha256: str) -> Path:
        return self.root / "blobs" / sha256[:2] / sha256[2:4] / sha256

    def _part(self, owner: str, sha256: str) -> Path:
        return self.root / "uploads" / owner / f"{sha256}.part"

    async def _in_turn(self, owner: str, sha256: str, work: Callable[[], int | None]) -> int | None:
        """``work`` in a thread, one at a time per upload in this process."""
        async with self._turns.turn(owner, sha256):
            return await whole(work)

    async def begin(self, owner: str, sha256: str) -> int:
        offset = await self._in_turn(owner, sha256, lambda: self._begin(self._part(owner, sha256)))
        assert offset is not None
        return offset

    @staticmethod
    def _begin(part: Path) -> int:
        with _locked_file(part, create=True) as f:
            assert f is not None
            return os.fstat(f.fileno()).st_size

    async def received(self, owner: str, sha256: str) -> int | None:
        _check(owner, sha256)
        return await asyncio.to_thread(self._received, self._part(owner, sha256))

    @staticmethod
    def _received(part: Path) -> int | None:
        try:
            fd = os.open(part, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            # (Durable before it is told: bytes of an append still under way, or of one cut off
            # by a process killed before its fsync, are in the file but perhaps not on disk yet.)
            os.fsync(fd)
            return size
        finally:
            os.close(fd)

    async def append(self, owner: str, sha256: str, offset: int, data: bytes) -> int:
        return await self.append_from(owner, sha256, offset, one_piece(data), len(data))

    async def append_from(self, owner: str, sha256: str, offset: int, pieces: AsyncIterable[bytes], most: int) -> int:
        part = self._part(owner, sha256)
        async with self._turns.turn(owner, sha256):
            appending = await whole(lambda: self._appending(part, offset), undo=_Appending.close)
            batch: list[bytes] = []  # (pieces gathered, written together: a thread's turn each)
            gathered = 0
            try:
                async for piece in pieces:
                    room = most - appending.written - gathered
                    if len(piece) > room:
                        batch.append(piece[:room])
                        raise TooMuch(most)
                    if piece:
                        batch.append(piece)
                        gathered += len(piece)
                    if gathered >= WRITE_BYTES:
                        ready, batch, gathered = batch, [], 0
                        await whole(partial(appending.write, ready))
            finally:  # (also when cut off: what came is written, and made durable)
                try:
                    if batch and not appending.broken:
                        ready, batch = batch, []
                        await whole(partial(appending.write, ready))
                finally:
                    await whole(appending.close)
        return offset + appending.written

    def _appending(self, part: Path, offset: int) -> _Appending:
        """The upload's file at ``part``, open and locked for an append at ``offset``."""
        files = ExitStack()
        try:
            f = files.enter_context(_locked_file(part, create=offset == 0))  # (only a first append starts one)
            if f is None:
                raise OffsetMismatch(0)
            have = os.fstat(f.fileno()).st_size
            if have != offset:
                raise OffsetMismatch(have)
            hashed = self._take_hashed(part, f)
            if hashed is None and offset == 0:
                hashed = _Hashed.start(part)  # (else: hashed once, from the file, when it completes)
            return _Appending(self, part, f.fileno(), offset, hashed, files)
        except BaseException:
            files.close()
            raise

    def _take_hashed(self, part: Path, f: BinaryIO) -> _Hashed | None:
        """The running digest of the upload at ``part`` (now open as ``f``), if this process has
        one that holds for the file as it is; no longer kept (it is put back by the caller)."""
        with self._hashed_lock:
            hashed = self._hashed.pop(part, None)
        if hashed is not None and not hashed.fits(f):
            hashed.close()
            return None
        return hashed

    def _keep_hashed(self, part: Path, hashed: _Hashed) -> None:
        with self._hashed_lock:
            self._hashed[part] = hashed
            dropped = []
            while len(self._hashed) > MAX_HASHED:  # (uploads left unfinished: the oldest let go)
                dropped.append(self._hashed.pop(next(iter(self._hashed))))
        for old in dropped:
            old.close()

    def _forget_hashed(self, part: Path) -> None:
        with self._hashed_lock:
            hashed = self._hashed.pop(part, None)
        if hashed is not None:
            hashed.close()

    async def complete(self, owner: str, sha256: str, size: int) -> int:
        await self._in_turn(owner, sha256, lambda: self._complete(owner, sha256, size))
        return size

    def _complete(self, owner: str, sha256: str, size: int) -> None:
        part = self._part(owner, sha256)
        target = self._blob(sha256)
        with _locked_file(part, create=False) as f:
            if f is None:
                self._forget_hashed(part)
                raise BlobMissing(sha256)
            have = os.fstat(f.fileno()).st_size
            if have != size:
                raise OffsetMismatch(have)
            hashed = self._take_hashed(part, f)
            if hashed is not None:
                digest = hashed.digest
                hashed.close()
            else:  # (appended to by another process, or before a restart: read once)
                digest = _Hashed.of(f, size)
            if digest.hexdigest() != sha256:
                part.unlink()
                raise HashMismatch(sha256, digest.hexdigest())
            target.parent.mkdir(parents=True, exist_ok=True)
            moment = self._clock().timestamp()
            os.utime(f.fileno(), (moment, moment))
            # (Over a blob another owner completed: the same bytes, and the time is renewed, so a
            # garbage collection that listed the old one passes over it.)
            os.replace(part, target)
        _sync_dir(target.parent)

    async def discard(self, owner: str, sha256: str) -> None:
        await self._in_turn(owner, sha256, lambda: self._discard(self._part(owner, sha256)))

    def _discard(self, part: Path) -> None:
        with _locked_file(part, create=False) as f:
            self._forget_hashed(part)
            if f is not None:
                part.unlink()

    async def size(self, sha256: str) -> int | None:
        _check(None, sha256)
        try:
            return self._blob(sha256).stat().st_size
        except FileNotFoundError:
            return None

    async def read(self, sha256: str, start: int = 0) -> AsyncGenerator[bytes, None]:
        _check(None, sha256)
        try:
            f = await asyncio.to_thread(self._blob(sha256).open, "rb")
        except FileNotFoundError:
            raise BlobMissing(sha256) from None
        try:  # (an open file reads on when the blob is deleted meanwhile)
            f.seek(start)
            while piece := await asyncio.to_thread(f.read, READ_BYTES):
                yield piece
        finally:
            f.close()

    async def delete(self, sha256: str, created_before: datetime | None = None) -> bool:
        _check(None, sha256)
        path = self._blob(sha256)
        try:
            if created_before is not None and path.stat().st_mtime >= created_before.timestamp():
                return False
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    async def blobs(self) -> list[StoredBlob]:
        return await asyncio.to_thread(self._list)

    def _list(self) -> list[StoredBlob]:
        found = []
        for path in (self.root / "blobs").glob("*/*/*"):
            if _SHA256.fullmatch(path.name):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found.append(StoredBlob(path.name, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC)))
        return sorted(found, key=lambda b: b.sha256)


class _Appending:
    """An append under way to an upload's partial file (its calls run in the store's threads,
    one at a time): the file open under its lock, this process's running digest of it (None when
    the file will be hashed whole at completion), and the bytes written so far. Each batch is
    hashed in a helper thread while it is written, and the bytes written go to disk behind the
    writes (an fdatasync in a helper thread each ``SYNC_BYTES``), all of them by ``close``; the
    bytes on disk leave the page cache (``_settle``)."""

    def __init__(self, store: FileBlobStore, part: Path, fd: int, offset: int, hashed: _Hashed | None, files: ExitStack) -> None:
        self._store, self._part, self._fd, self._offset = store, part, fd, offset
        self._hashed = hashed
        self._files = files  # (closing it closes the file, which lets go of its lock)
        self.written = 0
        self._unsynced = 0
        self._flushing: Future[None] | None = None  # (an fdatasync under way)
        self.broken = False  # a write failed: what the file holds is for ``received`` to say

    def write(self, pieces: list[bytes]) -> None:
        hashed = self._hashed
        hashing = _HELPERS.submit(hashed.add, pieces) if hashed is not None else None
        try:
            try:
                self._write(pieces)
            finally:
                if hashing is not None:
                    hashing.result()  # (waited for, whatever happened: the digest is not touched after)
        except BaseException:
            self.broken = True
            if self._hashed is not None:
                self._hashed.close()
                self._hashed = None
            raise

    def _write(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            view = memoryview(piece)
            while view:
                done = os.pwrite(self._fd, view, self._offset + self.written)
                view = view[done:]
                self.written += done
                self._unsynced += done
        if self._unsynced >= SYNC_BYTES and (self._flushing is None or self._flushing.done()):
            if self._flushing is not None:
                self._flushing.result()  # (it failed: so does the append)
            self._flushing = _HELPERS.submit(_settle, self._fd, self._offset + self.written)
            self._unsynced = 0

    def close(self) -> None:
        """Every byte written made durable, the running digest kept for the next append, and the
        file closed (its lock let go)."""
        hashed, self._hashed = self._hashed, None
        try:
            try:
                if self._flushing is not None:
                    self._flushing.result()
            finally:
                self._flushing = None  # (over, whatever happened: the file may be closed)
            _settle(self._fd, self._offset + self.written, fsync=True)
            if hashed is not None:
                self._store._keep_hashed(self._part, hashed)
                hashed = None
        finally:
            if hashed is not None:
                hashed.close()
            self._files.close()


def _settle(fd: int, end: int, fsync: bool = False) -> None:
    """The file's first ``end`` bytes made durable (``fsync``: its size and times too), then
    let go of from the page cache: nothing reads an upload's bytes again soon (its digest is
    kept as it is written), and the next ones take the pages these had, warm, rather than pages
    the system has not used yet. (Those cost this machine's VM ten times as much to write
    into, 150-200 ms of CPU for 50 MB against 15: README, "The upload's 0.5 of a plain PUT".)"""
    (os.fsync if fsync else os.fdatasync)(fd)
    if hasattr(os, "posix_fadvise"):  # (Linux; elsewhere the cache keeps them)
        os.posix_fadvise(fd, 0, end, os.POSIX_FADV_DONTNEED)


@dataclass
class _Hashed:
    """The SHA-256 of an upload's partial file so far (``size`` bytes), with the file itself
    held open (``fd``): while it is open no other file can take its inode, so the digest holds
    for the file at the upload's path exactly when that is still this file at this size (no
    other process appended to it, or discarded it and began it again). Else the file is hashed
    again from its start when it completes."""

    digest: hashlib._Hash
    fd: int
    size: int

    @classmethod
    def start(cls, part: Path) -> _Hashed:
        """For the upload's file at ``part``, empty, which the caller has open and locked (a
        descriptor of its own, not a duplicate: the file's lock goes with the caller's)."""
        return cls(hashlib.sha256(), os.open(part, os.O_RDONLY), 0)

    @staticmethod
    def of(f: BinaryIO, size: int) -> hashlib._Hash:
        """The digest of the file's first ``size`` bytes, read from it."""
        digest = hashlib.sha256()
        f.seek(0)
        left = size
        while left and (piece := f.read(min(READ_BYTES, left))):
            digest.update(piece)
            left -= len(piece)
        return digest

    def add(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            self.digest.update(piece)
            self.size += len(piece)

    def fits(self, f: BinaryIO) -> bool:
        mine, now = os.fstat(self.fd), os.fstat(f.fileno())
        return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino) and now.st_size == self.size

    def close(self) -> None:
        os.close(self.fd)


@contextmanager
def _locked_file(path: Path, create: bool) -> Iterator[BinaryIO | None]:
    """The file at ``path``, open for reading and writing, under an exclusive lock of the whole
    file (``flock``: every process's work on one upload takes turns); None when there is no file
    (and ``create`` is false). Should another process have renamed or removed the file while
    this one waited for the lock, the file now at ``path`` is taken instead."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
        except FileNotFoundError:
            if not create:
                yield None
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        with os.fdopen(fd, "r+b") as f:  # (closing it lets go of the lock)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                if create:
                    _sync_dir(path.parent)  # (a new file's name is durable too)
                yield f
                return


def _sync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the database ----------------------------------------------------------------------------

COMPLETE = ""  # the owner of a complete blob's chunks
BEGUN = -1  # the start of the empty row that says an upload has begun (its data: the upload's generation)
GENERATION_BYTES = 16


@dataclass
class _RowsHashed:
    """The SHA-256 of an upload's first ``size`` bytes as this process stored them, for the
    upload begun as ``generation`` (random bytes in its BEGUN row): it holds for the rows in the
    database exactly when the upload is still that one at that size (appends only add rows at
    the end, and a discarded upload begun again has a new generation)."""

    generation: bytes
    size: int
    digest: hashlib._Hash


class SqlBlobStore:
    """Blobs in the database (``server/db.py``; made for PostgreSQL, where every server process
    sees every blob; it runs on SQLite as well): ``blob_chunks`` rows of at most ``ROW_BYTES``,
    ``owner`` the uploading account while the upload is partial (an empty row at start -1 says
    it has begun, and holds its generation), '' once complete; ``blobs`` lists the complete ones.
    An append stores each row as its bytes come, in a transaction of its own (no connection is
    held while a body arrives), under a transaction-scoped advisory lock of the upload (SQLite's
    write transactions are one at a time anyway) that checks the row goes at the upload's end; a
    blob's completion and deletion take one of the blob's. The running SHA-256 of an upload
    stays with this process, so completing it reads no row again unless another process (or
    this one before a restart) stored some."""

    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self._db = db
        self._clock = clock
        self._turns = _Turns()
        self._hashed: dict[tuple[str, str], _RowsHashed] = {}

    async def open(self) -> None:
        pass  # (the database is the event store's: opened, and migrated, with it)

    async def close(self) -> None:
        self._hashed.clear()

    async def _lock(self, tx: Tx, key: str) -> None:
        if self._db.dialect == "postgres":
            await tx.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", key)

    @staticmethod
    async def _received(tx: Tx, owner: str, sha256: str) -> int | None:
        row = await tx.fetchone(
            "SELECT count(*), max(start + size) FROM blob_chunks WHERE owner = ? AND sha256 = ?", owner, sha256
        )
        assert row is not None
        if not integer(row[0]):
            return None
        return max(0, integer(row[1]))

    @staticmethod
    async def _generation(tx: Tx, owner: str, sha256: str) -> bytes:
        """The upload's generation (b"" for one begun before generations were kept)."""
        row = await tx.fetchone(
            "SELECT data FROM blob_chunks WHERE owner = ? AND sha256 = ? AND start = ?", owner, sha256, BEGUN
        )
        return row[0] if row is not None and isinstance(row[0], bytes) else b""

    @staticmethod
    async def _start(tx: Tx, owner: str, sha256: str) -> bytes:
        generation = os.urandom(GENERATION_BYTES)
        await tx.execute(
            "INSERT INTO blob_chunks (owner, sha256, start, size, data) VALUES (?, ?, ?, 0, ?)", owner, sha256, BEGUN, generation
        )
        return generation

    async def begin(self, owner: str, sha256: str) -> int:
        _check(owner, sha256)
        async with self._db.transaction(write=True) as tx:
            await self._lock(tx, f"upload {owner} {sha256}")
            have = await self._received(tx, owner, sha256)
            if have is not None:
                return have
            await self._start(tx, owner, sha256)
            return 0

    async def received(self, owner: str, sha256: str) -> int | None:
        _check(owner, sha256)
        async with self._db.transaction() as tx:
            return await self._received(tx, owner, sha256)

    async def append(self, owner: str, sha256: str, offset: int, data: bytes) -> int:
        return await self.append_from(owner, sha256, offset, one_piece(data), len(data))

    async def append_from(self, owner: str, sha256: str, offset: int, pieces: AsyncIterable[bytes], most: int) -> int:
        async with self._turns.turn(owner, sha256):
            async with self._db.transaction(write=True) as tx:
                await self._lock(tx, f"upload {owner} {sha256}")
                have = await self._received(tx, owner, sha256)
                if have is None:
                    have, generation = 0, await self._start(tx, owner, sha256)
                else:
                    generation = await self._generation(tx, owner, sha256)
                if have != offset:
                    raise OffsetMismatch(have)  # (and the start, if it was one, is rolled back)
            hashed = self._take_hashed(owner, sha256, generation, offset)
            at = offset
            row = bytearray()  # (the bytes of the next row, as they come)
            try:
                async for piece in pieces:
                    room = most - (at - offset) - len(row)
                    if len(piece) > room:
                        row += piece[:room]
                        raise TooMuch(most)
                    row += piece
                    while len(row) >= ROW_BYTES:
                        data = bytes(row[:ROW_BYTES])
                        del row[:ROW_BYTES]
                        at = await self._store_row(owner, sha256, generation, at, data, hashed)
            finally:  # (also when cut off: what came is stored)
                try:
                    if row:
                        data, row = bytes(row), bytearray()
                        at = await self._store_row(owner, sha256, generation, at, data, hashed)
                finally:
                    if hashed is not None and hashed.size == at:
                        self._keep_hashed(owner, sha256, hashed)
        return at

    async def _store_row(self, owner: str, sha256: str, generation: bytes, start: int, data: bytes, hashed: _RowsHashed | None) -> int:
        """One row at ``start``, committed, if the upload is still the one begun as
        ``generation`` and ends there (else ``OffsetMismatch``); its end."""
        async with self._db.transaction(write=True) as tx:
            await self._lock(tx, f"upload {owner} {sha256}")
            have = await self._received(tx, owner, sha256)
            if have != start or await self._generation(tx, owner, sha256) != generation:
                raise OffsetMismatch(have or 0)
            await tx.execute(
                "INSERT INTO blob_chunks (owner, sha256, start, size, data) VALUES (?, ?, ?, ?, ?)", owner, sha256, start, len(data), data
            )
        if hashed is not None and hashed.size == start:
            await whole(lambda: hashed.digest.update(data))
            hashed.size += len(data)
        return start + len(data)

    def _take_hashed(self, owner: str, sha256: str, generation: bytes, size: int) -> _RowsHashed | None:
        """This process's running digest of the upload, if it holds for the upload as it is
        (begun as ``generation``, ``size`` bytes); a new one for an upload at 0. No longer kept
        (the caller puts it back)."""
        hashed = self._hashed.pop((owner, sha256), None)
        if not generation:
            return None  # (an upload begun before generations were kept: hashed from its rows)
        if hashed is not None and hashed.generation == generation and hashed.size == size:
            return hashed
        return _RowsHashed(generation, 0, hashlib.sha256()) if size == 0 else None

    def _keep_hashed(self, owner: str, sha256: str, hashed: _RowsHashed) -> None:
        self._hashed[(owner, sha256)] = hashed
        while len(self._hashed) > MAX_HASHED:  # (uploads left unfinished: the oldest let go)
            del self._hashed[next(iter(self._hashed))]

    @staticmethod
    async def _digest_of_rows(tx: Tx, owner: str, sha256: str) -> hashlib._Hash:
        """The SHA-256 of the upload's rows, read a row at a time (in ``tx``, whose lock of the
        upload keeps appends out meanwhile)."""
        starts = await tx.fetchall(
            "SELECT start FROM blob_chunks WHERE owner = ? AND sha256 = ? AND start >= 0 ORDER BY start", owner, sha256
        )
        digest = hashlib.sha256()
        for (start,) in starts:
            chunk = await tx.fetchone(
                "SELECT data FROM blob_chunks WHERE owner = ? AND sha256 = ? AND start = ?", owner, sha256, start
            )
            assert chunk is not None and isinstance(chunk[0], bytes)
            digest.update(chunk[0])
        return digest

    async def complete(self, owner: str, sha256: str, size: int) -> int:
        _check(owner, sha256)
        mismatch: HashMismatch | None = None
        async with self._turns.turn(owner, sha256):
            hashed = self._hashed.pop((owner, sha256), None)
            async with self._db.transaction(write=True) as tx:
                await self._lock(tx, f"upload {owner} {sha256}")
                received = await self._received(tx, owner, sha256)
                if received is None:
                    raise BlobMissing(sha256)
                if received != size:
                    if hashed is not None:
                        self._keep_hashed(owner, sha256, hashed)
                    raise OffsetMismatch(received)
                generation = await self._generation(tx, owner, sha256)
                if hashed is not None and generation and hashed.generation == generation and hashed.size == received:
                    digest = hashed.digest  # (every row stored by this process: none read again)
                else:
                    digest = await self._digest_of_rows(tx, owner, sha256)
                if digest.hexdigest() != sha256:
                    await tx.execute("DELETE FROM blob_chunks WHERE owner = ? AND sha256 = ?", owner, sha256)
                    mismatch = HashMismatch(sha256, digest.hexdigest())
                else:
                    await self._lock(tx, f"blob {sha256}")
                    now = format_time(self._clock())
                    if await tx.fetchone("SELECT 1 FROM blobs WHERE sha256 = ?", sha256) is not None:
                        # (another owner completed it: the same bytes; its time renewed, as the files' is)
                        await tx.execute("DELETE FROM blob_chunks WHERE owner = ? AND sha256 = ?", owner, sha256)
                        await tx.execute("UPDATE blobs SET created_at = ? WHERE sha256 = ?", now, sha256)
                    else:
                        await tx.execute("DELETE FROM blob_chunks WHERE owner = ? AND sha256 = ? AND start = ?", owner, sha256, BEGUN)
                        await tx.execute("UPDATE blob_chunks SET owner = ? WHERE owner = ? AND sha256 = ?", COMPLETE, owner, sha256)
                        await tx.execute("INSERT INTO blobs (sha256, size, created_at) VALUES (?, ?, ?)", sha256, size, now)
        if mismatch is not None:  # (raised after the commit: the upload is gone for good)
            raise mismatch
        return size

    async def discard(self, owner: str, sha256: str) -> None:
        _check(owner, sha256)
        async with self._turns.turn(owner, sha256):
            self._hashed.pop((owner, sha256), None)
            async with self._db.transaction(write=True) as tx:
                await self._lock(tx, f"upload {owner} {sha256}")
                await tx.execute("DELETE FROM blob_chunks WHERE owner = ? AND sha256 = ?", owner, sha256)

    async def size(self, sha256: str) -> int | None:
        _check(None, sha256)
        row = await self._db.read_one("SELECT size FROM blobs WHERE sha256 = ?", sha256)
        return None if row is None else integer(row[0])

    async def read(self, sha256: str, start: int = 0) -> AsyncGenerator[bytes, None]:
        if await self.size(sha256) is None:
            raise BlobMissing(sha256)
        async with self._db.transaction() as tx:
            pieces = await tx.fetchall(
                "SELECT start, size FROM blob_chunks WHERE owner = ? AND sha256 = ? ORDER BY start", COMPLETE, sha256
            )
        for piece_start, piece_size in ((integer(r[0]), integer(r[1])) for r in pieces):
            if piece_start + piece_size <= start:
                continue
            row = await self._db.read_one(
                "SELECT data FROM blob_chunks WHERE owner = ? AND sha256 = ? AND start = ?", COMPLETE, sha256, piece_start
            )
            if row is None or not isinstance(row[0], bytes):
                raise BlobMissing(sha256)  # (deleted while it was read)
            yield row[0][max(0, start - piece_start) :]

    async def delete(self, sha256: str, created_before: datetime | None = None) -> bool:
        _check(None, sha256)
        async with self._db.transaction(write=True) as tx:
            await self._lock(tx, f"blob {sha256}")
            row = await tx.fetchone("SELECT created_at FROM blobs WHERE sha256 = ?", sha256)
            if row is None or (created_before is not None and text(row[0]) >= format_time(created_before)):
                return False
            await tx.execute("DELETE FROM blob_chunks WHERE owner = ? AND sha256 = ?", COMPLETE, sha256)
            await tx.execute("DELETE FROM blobs WHERE sha256 = ?", sha256)
        return True

    async def blobs(self) -> list[StoredBlob]:
        async with self._db.transaction() as tx:
            rows = await tx.fetchall("SELECT sha256, size, created_at FROM blobs ORDER BY sha256")
        return [StoredBlob(text(r[0]), integer(r[1]), datetime.fromisoformat(text(r[2]))) for r in rows]


def open_blob_store(db: Database, blob_dir: str, database_url: str, clock: Callable[[], datetime]) -> BlobStore:
    """The store for this server: files under ``blob_dir`` (default: ``blobs`` beside the SQLite
    database) with SQLite, the database itself with PostgreSQL."""
    if db.dialect == "postgres":
        return SqlBlobStore(db, clock)
    if blob_dir:
        return FileBlobStore(Path(blob_dir), clock)
    path = database_url.removeprefix("sqlite:///")
    if path == ":memory:":  # (nothing else would be in memory too: the blobs keep to the database)
        return SqlBlobStore(db, clock)
    return FileBlobStore(Path(path).resolve().parent / "blobs", clock)
