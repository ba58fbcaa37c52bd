"""The BlobStore contract (server/blobs.py), one suite for every store: the file system (the
default beside SQLite), the database on PostgreSQL, and the same SQL store on SQLite.

"Another process" is a second store over the same files or database (its own connections):
what one wrote, the other reads; their appends to one upload never interleave."""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import mmap
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from server import blobs
from server.blobs import (
    ROW_BYTES,
    SYNC_BYTES,
    BlobMissing,
    BlobStore,
    FileBlobStore,
    HashMismatch,
    OffsetMismatch,
    SqlBlobStore,
    TooMuch,
    first_bytes,
)
from server.databases import open_database
from server.event_store import SqlEventStore
from tests.conftest import drop_schema, postgres_schema
from tests.server.stores import Clock

OWNER, OTHER = "0190e6a2-0000-7000-8000-00000000a001", "0190e6a2-0000-7000-8000-00000000a002"
DATA = bytes(range(256)) * 3 + b"the end"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


Opener = Callable[[], Awaitable[BlobStore]]


@pytest.fixture(params=["file", "postgres", "sql-on-sqlite"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Opener, Clock]]:
    """Opens stores over one backing (each call: as another process would)."""
    clock = Clock()
    closers: list[Callable[[], Awaitable[None]]] = []
    schema = None
    if request.param == "postgres":
        schema, url = await postgres_schema()
    else:
        url = f"sqlite:///{tmp_path / 'chat.db'}"

    async def opener() -> BlobStore:
        store: BlobStore
        if request.param == "file":
            store = FileBlobStore(tmp_path / "data", clock)
        else:
            events = SqlEventStore(open_database(url), clock)  # (its migrations make the tables)
            await events.open()
            closers.append(events.close)
            store = SqlBlobStore(events.db, clock)
        await store.open()
        closers.append(store.close)
        return store

    try:
        yield opener, clock
    finally:
        for close in reversed(closers):
            await close()
        if schema is not None:
            await drop_schema(schema)


async def read_all(store: BlobStore, sha256: str, start: int = 0) -> bytes:
    return b"".join([piece async for piece in store.read(sha256, start)])


async def test_an_upload_resumes_at_every_offset(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    first = await opener()
    data = DATA[:64] + b"the end"  # (every offset of a short blob: each is a few durable writes)
    sha = digest(data)
    owners = [f"owner-{k}" for k in range(len(data) + 1)]
    for k, owner in enumerate(owners):
        assert await first.received(owner, sha) is None
        assert await first.append(owner, sha, 0, data[:k]) == k
    later = await opener()  # the process restarted: the offsets are what was appended
    for k, owner in enumerate(owners):
        assert await later.received(owner, sha) == k
        assert await later.size(sha) is None or k > 0  # (nothing readable before a complete)
        assert await later.append(owner, sha, k, data[k:]) == len(data)
        assert await later.complete(owner, sha, len(data)) == len(data)
        assert await later.received(owner, sha) is None  # the upload is the blob now
    assert await read_all(later, sha) == data
    assert await read_all(first, sha) == data  # (the other "process" sees it too)
    assert [(b.sha256, b.size) for b in await later.blobs()] == [(sha, len(data))]  # stored once


async def test_nothing_of_an_upload_is_readable_before_it_is_complete(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(DATA)
    assert await store.begin(OWNER, sha) == 0
    assert await store.begin(OWNER, sha) == 0  # (again: nothing changes)
    assert await store.received(OWNER, sha) == 0
    await store.append(OWNER, sha, 0, DATA[:-1])
    assert await store.size(sha) is None and await store.blobs() == []
    with pytest.raises(BlobMissing):
        await read_all(store, sha)
    assert await store.received(OTHER, sha) is None  # another owner has no upload of it
    await store.append(OWNER, sha, len(DATA) - 1, DATA[-1:])
    assert await store.size(sha) is None
    await store.complete(OWNER, sha, len(DATA))
    assert await store.size(sha) == len(DATA)


async def test_an_append_at_another_offset_is_refused_with_the_store_s(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(DATA)
    await store.append(OWNER, sha, 0, DATA[:10])
    for wrong in (0, 5, 11, 1000):
        with pytest.raises(OffsetMismatch) as refused:
            await store.append(OWNER, sha, wrong, DATA[wrong : wrong + 10])
        assert refused.value.offset == 10
    assert await store.received(OWNER, sha) == 10
    with pytest.raises(OffsetMismatch) as refused:
        await store.append(OTHER, sha, 10, DATA[10:])  # (another owner's upload starts at 0)
    assert refused.value.offset == 0


async def test_a_wrong_hash_discards_the_upload(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(DATA)
    await store.append(OWNER, sha, 0, DATA[:-1] + b"?")
    with pytest.raises(HashMismatch) as refused:
        await store.complete(OWNER, sha, len(DATA))
    assert refused.value.expected == sha and refused.value.actual == digest(DATA[:-1] + b"?")
    assert await store.received(OWNER, sha) is None  # gone: it starts again from 0
    assert await store.size(sha) is None and await store.blobs() == []
    with pytest.raises(BlobMissing):
        await store.complete(OWNER, sha, len(DATA))
    await store.append(OWNER, sha, 0, DATA)
    assert await store.complete(OWNER, sha, len(DATA)) == len(DATA)
    assert await read_all(store, sha) == DATA


async def test_concurrent_appends_at_one_offset_store_one(stores: tuple[Opener, Clock]) -> None:
    """Two devices of an account send the same chunk at once, through two processes: one append
    is stored, the others are told the new offset."""
    opener, _ = stores
    one, two = await opener(), await opener()
    sha = digest(DATA)
    results = await asyncio.gather(
        *(store.append(OWNER, sha, 0, DATA[:100]) for store in (one, two) * 4), return_exceptions=True
    )
    assert results.count(100) == 1, results
    assert all(isinstance(r, OffsetMismatch) and r.offset == 100 for r in results if r != 100)
    assert await one.received(OWNER, sha) == await two.received(OWNER, sha) == 100


async def upload(store: BlobStore, owner: str, data: bytes, stop: Callable[[], Awaitable[bool]]) -> None:
    """Send ``data`` in chunks of 1,000 bytes from the store's offset until ``stop`` says it is
    there, going on from the store's offset whenever an append is refused."""
    sha = digest(data)
    while not await stop():
        offset = await store.received(owner, sha) or 0
        if offset == len(data):
            try:
                await store.complete(owner, sha, len(data))
            except (BlobMissing, OffsetMismatch):  # (a racing device completed it, and another began it again)
                pass
            continue
        try:
            await store.append(owner, sha, offset, data[offset : offset + 1000])
        except OffsetMismatch:
            pass
        await asyncio.sleep(0)


async def test_concurrent_uploads_of_one_blob_by_two_accounts_store_it_once(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    one, two = await opener(), await opener()
    data = bytes(range(251)) * 40  # (10 KB)
    sha = digest(data)
    finished: set[str] = set()

    async def uploaded(owner: str) -> bool:  # (what the account's layer knows: server/attachments.py)
        return owner in finished

    async def account(store: BlobStore, owner: str) -> None:
        while await store.received(owner, sha) != len(data):
            offset = await store.received(owner, sha) or 0
            await store.append(owner, sha, offset, data[offset : offset + 1000])
            await asyncio.sleep(0)
        await store.complete(owner, sha, len(data))
        finished.add(owner)

    await asyncio.gather(account(one, OWNER), account(two, OTHER))
    assert await read_all(one, sha) == data and await read_all(two, sha) == data
    assert [(b.sha256, b.size) for b in await one.blobs()] == [(sha, len(data))]
    assert await one.received(OWNER, sha) is None and await two.received(OTHER, sha) is None
    assert await uploaded(OWNER) and await uploaded(OTHER)


async def test_two_devices_racing_one_upload_through_two_processes_store_the_right_bytes(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    one, two = await opener(), await opener()
    data = bytes(range(253)) * 40
    sha = digest(data)

    async def there() -> bool:
        return await one.size(sha) is not None

    await asyncio.gather(upload(one, OWNER, data, there), upload(two, OWNER, data, there), upload(one, OWNER, data, there))
    assert await read_all(one, sha) == data and await read_all(two, sha) == data
    assert [(b.sha256, b.size) for b in await two.blobs()] == [(sha, len(data))]


async def test_a_completion_that_finds_the_upload_begun_again_leaves_it_alone(stores: tuple[Opener, Clock]) -> None:
    """A device saw every byte there and asks for its completion; meanwhile another device
    completed the upload, and a third, its chunk sent before that, began it again: the first is
    told the new upload's offset, which is neither checked nor discarded (as a loaded run of the
    race above once found: the new upload's first chunk was hashed, and its file thrown away)."""
    opener, _ = stores
    one, two = await opener(), await opener()
    sha = digest(DATA)
    await one.append(OWNER, sha, 0, DATA)
    assert await one.received(OWNER, sha) == len(DATA)
    assert await two.complete(OWNER, sha, len(DATA)) == len(DATA)
    await two.append(OWNER, sha, 0, DATA[:100])
    with pytest.raises(OffsetMismatch) as refused:
        await one.complete(OWNER, sha, len(DATA))
    assert refused.value.offset == 100
    assert await one.received(OWNER, sha) == 100 and await read_all(one, sha) == DATA
    await one.append(OWNER, sha, 100, DATA[100:])
    assert await one.complete(OWNER, sha, len(DATA)) == len(DATA)
    assert [(b.sha256, b.size) for b in await two.blobs()] == [(sha, len(DATA))]


async def test_large_chunks_and_reads_from_an_offset(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    data = bytes(range(256)) * (ROW_BYTES * 5 // 2 // 256 + 3)  # two and a half rows of the SQL store
    sha = digest(data)
    await store.append(OWNER, sha, 0, data[:ROW_BYTES + 7])
    await store.append(OWNER, sha, ROW_BYTES + 7, data[ROW_BYTES + 7 :])
    assert await store.complete(OWNER, sha, len(data)) == len(data)
    assert await read_all(store, sha) == data
    for start in (1, ROW_BYTES, ROW_BYTES + 8, len(data) - 1, len(data)):
        assert await read_all(store, sha, start) == data[start:], start
    assert await first_bytes(store, sha, 12) == data[:12]


async def test_an_empty_file_is_a_blob(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(b"")
    assert await store.begin(OWNER, sha) == 0
    assert await store.complete(OWNER, sha, 0) == 0
    assert await store.size(sha) == 0 and await read_all(store, sha) == b""


async def test_delete_passes_over_a_blob_completed_since(stores: tuple[Opener, Clock]) -> None:
    opener, clock = stores
    store = await opener()
    old, new = DATA, DATA + b"!"
    for data in (old, new):
        await store.append(OWNER, digest(data), 0, data)
        await store.complete(OWNER, digest(data), len(data))
        clock.now += timedelta(hours=1)
    cutoff = clock.now - timedelta(minutes=90)  # after the old one, before the new one
    made = {b.sha256: b.created_at for b in await store.blobs()}
    assert made[digest(old)] < cutoff <= made[digest(new)]  # (the store's clock: when completed)
    assert await store.delete(digest(new), created_before=cutoff) is False
    assert await store.size(digest(new)) == len(new)
    # Completed again (another account uploaded the same file): new again.
    await store.append(OTHER, digest(old), 0, old)
    await store.complete(OTHER, digest(old), len(old))
    assert await store.delete(digest(old), created_before=cutoff) is False
    clock.now += timedelta(hours=2)
    assert await store.delete(digest(old), created_before=clock.now) is True
    assert await store.size(digest(old)) is None and await store.delete(digest(old)) is False
    with pytest.raises(BlobMissing):
        await read_all(store, digest(old))
    assert [b.sha256 for b in await store.blobs()] == [digest(new)]


async def test_a_discarded_upload_starts_again(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(DATA)
    await store.append(OWNER, sha, 0, DATA[:50])
    await store.discard(OWNER, sha)
    assert await store.received(OWNER, sha) is None
    await store.discard(OWNER, sha)  # (twice: nothing)
    assert await store.append(OWNER, sha, 0, DATA) == len(DATA)


async def test_names_that_are_not_digests_are_refused(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    for bad in ("../etc/passwd", "AB" * 32, "ab" * 31):
        with pytest.raises(ValueError):
            await store.received(OWNER, bad)
    with pytest.raises(ValueError):
        await store.append("../x", digest(DATA), 0, DATA)


async def test_appends_through_two_processes_in_turn_are_checked_whole(stores: tuple[Opener, Clock]) -> None:
    """Chunks of one upload land on two processes in turn (and the last on either): the
    digest checked is the whole file's, right or wrong."""
    opener, _ = stores
    one, two = await opener(), await opener()
    sha = digest(DATA)
    for last, other in ((one, two), (two, one)):
        await last.append(OWNER, sha, 0, DATA[:100])
        await other.append(OWNER, sha, 100, DATA[100:300])
        await last.append(OWNER, sha, 300, DATA[300:])
        assert await last.complete(OWNER, sha, len(DATA)) == len(DATA)
    wrong = DATA[:200] + b"?" + DATA[201:]
    await one.append(OTHER, sha, 0, wrong[:100])
    await two.append(OTHER, sha, 100, wrong[100:300])
    await one.append(OTHER, sha, 300, wrong[300:])
    with pytest.raises(HashMismatch):
        await one.complete(OTHER, sha, len(DATA))


async def test_an_upload_begun_again_elsewhere_is_checked_for_its_new_bytes(stores: tuple[Opener, Clock]) -> None:
    """One process appended the right start; another discarded the upload and began it again
    with other bytes of the same length; the first goes on at the same offset: the file is
    checked as it is, not as the first process wrote it."""
    opener, _ = stores
    one, two = await opener(), await opener()
    sha = digest(DATA)
    await one.append(OWNER, sha, 0, DATA[:300])
    await two.discard(OWNER, sha)
    await two.append(OWNER, sha, 0, b"?" * 300)
    await one.append(OWNER, sha, 300, DATA[300:])
    with pytest.raises(HashMismatch) as refused:
        await one.complete(OWNER, sha, len(DATA))
    assert refused.value.actual == digest(b"?" * 300 + DATA[300:])


async def test_a_file_store_completes_an_upload_of_its_own_without_reading_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each append hashes its chunk as it writes it: completing reads the partial file only when
    another process (or this one before a restart) wrote some of it."""
    reads: list[int] = []
    whole = blobs._Hashed.of
    monkeypatch.setattr(blobs._Hashed, "of", staticmethod(lambda f, size: reads.append(size) or whole(f, size)))
    store = FileBlobStore(tmp_path / "data", Clock())
    await store.open()
    sha = digest(DATA)
    for start in range(0, len(DATA), 100):
        await store.append(OWNER, sha, start, DATA[start : start + 100])
    assert await store.complete(OWNER, sha, len(DATA)) == len(DATA) and reads == []
    again = FileBlobStore(tmp_path / "data", Clock())  # (a restart mid-upload)
    await store.append(OTHER, sha, 0, DATA[:100])
    await again.append(OTHER, sha, 100, DATA[100:])
    assert await again.complete(OTHER, sha, len(DATA)) == len(DATA) and reads == [len(DATA)]
    await store.close()
    await again.close()


def resident_pages(path: Path) -> int:
    """How many of the file's pages the page cache holds now (mincore(2), on a mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    with path.open("rb") as f:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            held = (ctypes.c_ubyte * pages)()
            assert libc.mincore(address, size, held) == 0, os.strerror(ctypes.get_errno())
        finally:
            libc.munmap(address, size)
    return sum(page & 1 for page in held)


async def test_a_file_store_lets_go_of_an_upload_s_pages_once_they_are_on_disk(tmp_path: Path) -> None:
    """Nothing reads an upload's bytes again soon, so they leave the page cache once durable
    (server/blobs.py: _settle): a 50 MB upload does not take 50 MB of pages the system has not
    used yet, which cost this machine ten times as much to write into as pages it let go of."""
    data = os.urandom(3 * SYNC_BYTES + 12345)
    cached = tmp_path / "cached"
    cached.write_bytes(data)
    assert resident_pages(cached) > 0  # (this file system keeps what is written in its cache)
    store = FileBlobStore(tmp_path / "data", Clock())
    await store.open()
    sha = digest(data)
    half = len(data) // 2
    assert await store.append_from(OWNER, sha, 0, pieces_of(data[:half], 64 * 1024), half) == half
    assert resident_pages(store._part(OWNER, sha)) == 0  # (an append's bytes, when it returns)
    await store.append_from(OWNER, sha, half, pieces_of(data[half:], 64 * 1024), len(data) - half)
    await store.complete(OWNER, sha, len(data))
    assert resident_pages(store._blob(sha)) == 0
    assert await read_all(store, sha) == data
    await store.close()


async def pieces_of(data: bytes, size: int, then: BaseException | None = None) -> AsyncIterator[bytes]:
    """``data`` in pieces of ``size`` bytes, as a request's body comes (then ``then`` raised, as a
    client gone mid-chunk)."""
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]
    if then is not None:
        raise then


class Gone(Exception):
    """The client went away mid-chunk."""


async def test_a_streamed_chunk_is_stored_as_it_comes_not_held_whole(stores: tuple[Opener, Clock]) -> None:
    """Another process sees the bytes of a chunk still arriving: the store writes them as they
    come (a row, or a batch of the file store's, at a time), never holding the chunk whole."""
    opener, _ = stores
    store, other = await opener(), await opener()
    data = bytes(range(256)) * (4 * ROW_BYTES // 256) + b"the end"
    sha = digest(data)
    seen: list[int] = []

    async def watched() -> AsyncIterator[bytes]:
        async for piece in pieces_of(data, 64 * 1024):
            seen.append(await other.received(OWNER, sha) or 0)
            yield piece

    assert await store.append_from(OWNER, sha, 0, watched(), len(data)) == len(data)
    assert max(seen) >= 2 * ROW_BYTES  # (written while the last pieces were still to come)
    assert await store.complete(OWNER, sha, len(data)) == len(data)
    assert await read_all(other, sha) == data


async def test_a_chunk_cut_off_keeps_what_came_and_the_upload_goes_on_from_there(stores: tuple[Opener, Clock]) -> None:
    """A client gone mid-chunk (its body failing, or the request cancelled): the bytes that came
    are kept, durable (another process, or this one after a restart, tells them), the failure
    goes on, and the upload resumes from there to the right blob."""
    opener, _ = stores
    store = await opener()
    data = bytes(range(251)) * (3 * ROW_BYTES // 251)
    sha = digest(data)
    came = ROW_BYTES + ROW_BYTES // 2
    with pytest.raises(Gone):
        await store.append_from(OWNER, sha, 0, pieces_of(data[:came], 100 * 1024, then=Gone()), len(data))
    later = await opener()
    assert await later.received(OWNER, sha) == came

    stalled = asyncio.Event()

    async def stalling() -> AsyncIterator[bytes]:
        async for piece in pieces_of(data[came : came + ROW_BYTES], 100 * 1024):
            yield piece
        stalled.set()
        await asyncio.Event().wait()  # (the rest never comes)

    cut = asyncio.ensure_future(store.append_from(OWNER, sha, came, stalling(), len(data) - came))
    await stalled.wait()
    cut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cut
    assert await later.received(OWNER, sha) == came + ROW_BYTES
    rest = came + ROW_BYTES
    assert await store.append_from(OWNER, sha, rest, pieces_of(data[rest:], 300 * 1024), len(data) - rest) == len(data)
    assert await store.complete(OWNER, sha, len(data)) == len(data)
    assert await read_all(later, sha) == data


async def test_a_streamed_chunk_at_another_offset_is_refused_before_a_byte_is_read(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(DATA)
    await store.append(OWNER, sha, 0, DATA[:10])
    read: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        read.append(b"")
        yield DATA[20:]

    with pytest.raises(OffsetMismatch) as refused:
        await store.append_from(OWNER, sha, 20, body(), len(DATA))
    assert refused.value.offset == 10 and read == []


async def test_a_chunk_past_the_most_it_may_take_keeps_that_much(stores: tuple[Opener, Clock]) -> None:
    opener, _ = stores
    store = await opener()
    sha = digest(DATA)
    with pytest.raises(TooMuch):
        await store.append_from(OWNER, sha, 0, pieces_of(DATA + b"more", 100), len(DATA))
    assert await store.received(OWNER, sha) == len(DATA)
    assert await store.complete(OWNER, sha, len(DATA)) == len(DATA)
    assert await read_all(store, sha) == DATA


def counting_reads(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    """Calls of ``owner.name`` (a store's way of hashing an upload from what it stored), recorded."""
    calls: list[object] = []
    original = getattr(owner, name)

    def counted(*args: object) -> object:
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(owner, name, staticmethod(counted))
    return calls


async def test_a_sql_store_completes_an_upload_of_its_own_without_reading_its_rows_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row is hashed as it is stored: completing reads the rows only when another process
    (or this one before a restart) stored some, or the upload was begun again elsewhere."""
    reads = counting_reads(monkeypatch, SqlBlobStore, "_digest_of_rows")
    events = SqlEventStore(open_database(f"sqlite:///{tmp_path / 'chat.db'}"), Clock())
    await events.open()
    try:
        store, again = SqlBlobStore(events.db, Clock()), SqlBlobStore(events.db, Clock())
        data = bytes(range(256)) * (ROW_BYTES * 5 // 2 // 256)
        sha = digest(data)
        for start in range(0, len(data), ROW_BYTES // 3):
            await store.append(OWNER, sha, start, data[start : start + ROW_BYTES // 3])
        assert await store.complete(OWNER, sha, len(data)) == len(data) and reads == []
        await store.append(OTHER, sha, 0, data[:100])  # (a restart mid-upload)
        await again.append(OTHER, sha, 100, data[100:])
        assert await again.complete(OTHER, sha, len(data)) == len(data) and len(reads) == 1
        await store.append(OWNER, digest(DATA), 0, DATA[:300])  # (begun again elsewhere, as long)
        await again.discard(OWNER, digest(DATA))
        await again.append(OWNER, digest(DATA), 0, DATA[:300])
        await store.append(OWNER, digest(DATA), 300, DATA[300:])
        assert await store.complete(OWNER, digest(DATA), len(DATA)) == len(DATA) and len(reads) == 2
    finally:
        await events.close()
