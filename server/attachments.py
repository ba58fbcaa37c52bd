"""Attachments, account by account: uploads of blobs (server/blobs.py holds the bytes), which
blobs an account holds and so may download, the limits, and garbage collection.

* An account **holds** a blob once it has uploaded it whole (or an import restored it):
  ``blob_holdings``. Only then may it download it; knowing a digest gives nothing (a blob
  another account holds is answered as one that does not exist). An account that holds a blob
  never sends it again: its offset is its length.
* An **upload** is the account's own (``blob_uploads`` has its length; the store, its bytes so
  far), so no account learns what another is uploading, while the bytes are stored once.
  When the last byte arrives its SHA-256 is checked: a mismatch discards it.
* **Limits**: a file of at most ``max_file_bytes``; what an account holds and is uploading
  together at most ``max_account_bytes``.
* **Garbage collection** (with each compaction pass): a holding that no message of its account
  has referenced for the retention window goes, and so does an upload untouched that long (plus
  ``TOUCH_SECONDS``, by which its updated_at may lag its last chunk); a
  blob no account holds any more is deleted (unless it was completed within the grace period:
  an upload finishing meanwhile keeps it). A holding no message has referenced yet waits at
  least ``UNSENT_MESSAGE_SECONDS`` for one: a device uploads a file beside sending the message
  that names it, and the message may come later (found by ``python -m server chaos``: with a
  retention of seconds, a file uploaded while its message waited on a paused server was let go,
  and the message then named a file the server no longer had).

Bytes never go through the event log: a message carries references (``Attachment``) only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from server.blobs import BlobMissing, BlobStore, HashMismatch, OffsetMismatch, TooMuch, first_bytes, one_piece
from server.db import Database, integer, optional_text, text
from shared.models import format_time

log = logging.getLogger(__name__)

# The largest PATCH body. A chunk is stored as it comes, never held whole, so this bounds only
# what Quart may gather of a body its upload is not taking yet (the app sends a file of up to
# this in one: webapp/uploads.py).
MAX_CHUNK_BYTES = 64 * 1024 * 1024
# How often an upload's updated_at is written while its chunks come (garbage collection drops an
# upload untouched for the retention window, days: a minute's lag is nothing to it).
TOUCH_SECONDS = 60.0
# How long a request that found the upload taken by another one completing it waits for that one
# to hold the blob (a commit or two) before it says the upload starts again.
COMPLETING_SECONDS = 5.0
# How long a holding no message has named yet is kept, at least, for its message to arrive.
UNSENT_MESSAGE_SECONDS = 86400.0


class AttachmentError(Exception):
    """Base of the errors of uploads (server/routes/blobs.py answers each)."""


class TooLarge(AttachmentError):
    """Over ``max_file_bytes`` (``account`` False) or ``max_account_bytes`` (True)."""

    def __init__(self, limit: int, account: bool) -> None:
        what = "what one account may keep" if account else "the largest file this server takes"
        super().__init__(f"this is over {what} ({limit:,} bytes)")
        self.limit, self.account = limit, account


class LengthRequired(AttachmentError):
    pass


class LengthMismatch(AttachmentError):
    def __init__(self, length: int) -> None:
        super().__init__(f"the upload's Upload-Length is {length}")
        self.length = length


class PastTheEnd(AttachmentError):
    def __init__(self, length: int) -> None:
        super().__init__(f"the chunk goes past the upload's length ({length} bytes)")
        self.length = length


@dataclass(frozen=True)
class Progress:
    """How far an account's upload of a blob is: ``offset`` of ``length`` bytes (equal: held)."""

    offset: int
    length: int

    @property
    def done(self) -> bool:
        return self.offset == self.length


@dataclass(frozen=True)
class Collected:
    """What one garbage collection did."""

    holdings_dropped: int
    uploads_dropped: int
    blobs_deleted: int


def referenced(attachments_json: str | None) -> dict[str, str]:
    """The digests a message row's ``attachments_json`` names, each with its (first) name."""
    found: dict[str, str] = {}
    for item in json.loads(attachments_json) if attachments_json else []:
        found.setdefault(item["sha256"], item["name"])
    return found


class Attachments:
    def __init__(
        self,
        db: Database,
        blobs: BlobStore,
        clock: Callable[[], datetime],
        max_file_bytes: int,
        max_account_bytes: int,
    ) -> None:
        self.db = db
        self.blobs = blobs
        self._clock = clock
        self.max_file_bytes = max_file_bytes
        self.max_account_bytes = max_account_bytes
        # An upload of an account completed (in this process): runs waiting for it may go.
        self.on_uploaded: Callable[[str], None] = lambda account_id: None
        self._seen: set[tuple[str, str]] = set()  # uploads this process has had a chunk of
        self._touched: dict[tuple[str, str], datetime] = {}  # uploads' updated_at as this process last wrote it

    def _now(self) -> str:
        return format_time(self._clock())

    async def open(self) -> None:
        await self.blobs.open()

    async def close(self) -> None:
        await self.blobs.close()

    # --- what an account holds -------------------------------------------------------------

    async def held_size(self, account_id: str, sha256: str) -> int | None:
        """The blob's size when the account holds it (and it is there), else None."""
        row = await self.db.read_one(
            "SELECT size FROM blob_holdings WHERE account_id = ? AND sha256 = ?", account_id, sha256
        )
        if row is None:
            return None
        return await self.blobs.size(sha256)

    async def held(self, account_id: str) -> dict[str, int]:
        """Every blob the account holds (that is there), with its size."""
        async with self.db.transaction() as tx:
            rows = await tx.fetchall("SELECT sha256, size FROM blob_holdings WHERE account_id = ?", account_id)
        return {text(r[0]): integer(r[1]) for r in rows}

    async def missing(self, account_id: str, digests: set[str]) -> set[str]:
        """Which of ``digests`` the account does not hold (not uploaded whole yet)."""
        if not digests:
            return set()
        held = await self.held(account_id)
        return {d for d in digests if d not in held or await self.blobs.size(d) is None}

    async def name_of(self, account_id: str, sha256: str) -> str | None:
        """The name a message of the account gives the blob (for a download's file name)."""
        async with self.db.transaction() as tx:
            rows = await tx.fetchall(
                "SELECT attachments_json FROM messages WHERE account_id = ? AND attachments_json LIKE ? LIMIT 10",
                account_id,
                f'%"{sha256}"%',
            )
        for row in rows:
            name = referenced(optional_text(row[0])).get(sha256)
            if name is not None:
                return name
        return None

    def read(self, sha256: str) -> AsyncGenerator[bytes, None]:
        return self.blobs.read(sha256)

    async def bytes_of(self, account_id: str, sha256: str, most: int | None = None) -> bytes | None:
        """The blob (with ``most``: no more than its first ``most`` bytes), if the account holds
        it (for a model's request: shared/prompt.py)."""
        if await self.held_size(account_id, sha256) is None:
            return None
        try:
            if most is not None:
                return await first_bytes(self.blobs, sha256, most)
            return b"".join([piece async for piece in self.blobs.read(sha256)])
        except BlobMissing:
            return None

    # --- uploading ---------------------------------------------------------------------------

    async def progress(self, account_id: str, sha256: str) -> Progress | None:
        """How far the account's upload is (held: offset = length); None when it has none."""
        size = await self.held_size(account_id, sha256)
        if size is not None:
            return Progress(size, size)
        length = await self._upload_length(account_id, sha256)
        if length is None:
            return None
        offset = await self.blobs.received(account_id, sha256) or 0
        if offset == length:  # every byte came, and the process stopped before checking them
            try:
                return await self._complete(account_id, sha256, length)
            except HashMismatch:
                return None  # (discarded: the upload starts again from nothing)
        return Progress(offset, length)

    async def _upload_length(self, account_id: str, sha256: str) -> int | None:
        row = await self.db.read_one(
            "SELECT length FROM blob_uploads WHERE account_id = ? AND sha256 = ?", account_id, sha256
        )
        return None if row is None else integer(row[0])

    async def _account_bytes(self, account_id: str, besides: str) -> int:
        """What the account holds and is uploading, but for the upload of ``besides``."""
        async with self.db.transaction() as tx:
            held = await tx.fetchone(
                "SELECT CAST(coalesce(sum(size), 0) AS BIGINT) FROM blob_holdings WHERE account_id = ?", account_id
            )
            uploading = await tx.fetchone(
                "SELECT CAST(coalesce(sum(length), 0) AS BIGINT) FROM blob_uploads WHERE account_id = ? AND sha256 <> ?",
                account_id,
                besides,
            )
        assert held is not None and uploading is not None
        return integer(held[0]) + integer(uploading[0])

    async def free_bytes(self, account_id: str) -> int:
        """How many more bytes the account may upload: ``max_account_bytes`` less what it holds
        and is uploading, as ``start`` counts them (never below 0)."""
        return max(0, self.max_account_bytes - await self._account_bytes(account_id, besides=""))

    async def start(self, account_id: str, sha256: str, length: int) -> None:
        """Begin the account's upload of ``length`` bytes (its bytes begin in the store with the
        first append); TooLarge over a limit."""
        if length > self.max_file_bytes:
            raise TooLarge(self.max_file_bytes, account=False)
        if await self._account_bytes(account_id, sha256) + length > self.max_account_bytes:
            raise TooLarge(self.max_account_bytes, account=True)
        now = self._now()
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                """INSERT INTO blob_uploads (account_id, sha256, length, started_at, updated_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (account_id, sha256) DO NOTHING""",
                account_id,
                sha256,
                length,
                now,
                now,
            )

    async def append(self, account_id: str, sha256: str, offset: int, length: int | None, data: bytes) -> Progress:
        """``append_from`` with the chunk's bytes at hand."""
        return await self.append_from(account_id, sha256, offset, length, one_piece(data), len(data))

    async def append_from(
        self, account_id: str, sha256: str, offset: int, length: int | None, pieces: AsyncIterable[bytes], size: int | None
    ) -> Progress:
        """Add a chunk at ``offset`` to the account's upload (``length``: its Upload-Length, needed
        by the first one), stored as ``pieces`` yields it (``size`` bytes, when known before);
        the upload's progress after it (at its end: checked, and held). ``pieces`` is not read
        when the answer comes before it (the blob is held already; any error but a PastTheEnd
        found as the bytes come); a chunk cut off keeps what came of it (the store's
        ``append_from``).

        Raises TooLarge, LengthRequired, LengthMismatch, PastTheEnd, and the store's
        OffsetMismatch and HashMismatch (the upload is discarded)."""
        held = await self.held_size(account_id, sha256)
        if held is not None:  # (it is never sent again)
            if length is not None and length != held:
                raise LengthMismatch(held)
            return Progress(held, held)
        known = await self._upload_length(account_id, sha256)
        if known is None:
            if length is None:
                raise LengthRequired("the first chunk of an upload says its Upload-Length")
            await self.start(account_id, sha256, length)
            known = length
        elif length is not None and length != known:
            raise LengthMismatch(known)
        if offset + (size or 0) > known:
            raise PastTheEnd(known)
        if offset > 0 and (account_id, sha256) not in self._seen:
            log.info("upload of %s resumed at offset %d of %d", sha256, offset, known)
        self._seen.add((account_id, sha256))
        try:
            received = await self.blobs.append_from(account_id, sha256, offset, pieces, known - offset)
        except TooMuch:
            raise PastTheEnd(known) from None
        if received < known:
            await self._touch(account_id, sha256)
            return Progress(received, known)
        return await self._complete(account_id, sha256, known)

    async def _touch(self, account_id: str, sha256: str) -> None:
        """The upload is going on (garbage collection leaves it): written at most once a
        ``TOUCH_SECONDS`` per upload by this process, not at every chunk (a commit each)."""
        now = self._clock()
        key = (account_id, sha256)
        last = self._touched.get(key)
        if last is not None and (now - last).total_seconds() < TOUCH_SECONDS:
            return
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                "UPDATE blob_uploads SET updated_at = ? WHERE account_id = ? AND sha256 = ?", format_time(now), account_id, sha256
            )
        if len(self._touched) >= 10_000:  # (uploads left unfinished: forgotten, written again)
            self._touched.clear()
        self._touched[key] = now

    async def _complete(self, account_id: str, sha256: str, length: int) -> Progress:
        """Every byte is there: check them and hold the blob (HashMismatch: it is gone)."""
        self._seen.discard((account_id, sha256))
        self._touched.pop((account_id, sha256), None)
        try:
            size = await self.blobs.complete(account_id, sha256, length)
        except (BlobMissing, OffsetMismatch):
            # (another request of the account completed it just now; with OffsetMismatch, a
            # third, sent before it was held, began it again)
            return await self._completed_elsewhere(account_id, sha256, length)
        except Exception:
            await self._forget_upload(account_id, sha256)
            raise
        await self.hold(account_id, sha256, size)
        await self._forget_upload(account_id, sha256)
        log.info("upload of %s complete (%d bytes)", sha256, size)
        return Progress(size, size)

    async def _completed_elsewhere(self, account_id: str, sha256: str, length: int) -> Progress:
        """The upload's bytes were taken by another request of the account completing it (two
        devices sending the same file: a HEAD or PATCH of one as the other's last chunk came),
        which then holds the blob, or forgets the upload when they were not the file: its
        outcome, once it has one. Until the account holds the blob, this request never says it
        does (a digest known is not a file uploaded); with no outcome (the other's process
        stopped between the two, or its bytes were not the file), the upload starts again from
        nothing, as after a crash."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COMPLETING_SECONDS
        while True:
            held = await self.held_size(account_id, sha256)
            if held is not None:
                return Progress(held, held)
            if await self._upload_length(account_id, sha256) is None or loop.time() > deadline:
                return Progress(0, length)
            await asyncio.sleep(0.02)

    async def _forget_upload(self, account_id: str, sha256: str) -> None:
        async with self.db.transaction(write=True) as tx:
            await tx.execute("DELETE FROM blob_uploads WHERE account_id = ? AND sha256 = ?", account_id, sha256)

    async def hold(self, account_id: str, sha256: str, size: int) -> None:
        """The account holds the blob (uploaded whole, or restored); its runs waiting for
        attachments may go (server/runs.py)."""
        now = self._now()
        async with self.db.transaction(write=True) as tx:
            await tx.execute(
                """INSERT INTO blob_holdings (account_id, sha256, size, first_at, referenced_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (account_id, sha256) DO UPDATE SET referenced_at = excluded.referenced_at""",
                account_id,
                sha256,
                size,
                now,
                now,
            )
            await tx.execute("UPDATE runs SET waiting = 0 WHERE account_id = ? AND waiting = 1", account_id)
        self.on_uploaded(account_id)

    async def restore(self, account_id: str, sha256: str, data: bytes) -> bool:
        """A blob from an export: held by the account if ``data`` is its bytes (False if not)."""
        if hashlib.sha256(data).hexdigest() != sha256:
            return False
        if await self.held_size(account_id, sha256) is None:
            await self.blobs.discard(account_id, sha256)
            await self.blobs.append(account_id, sha256, 0, data)
            await self.hold(account_id, sha256, await self.blobs.complete(account_id, sha256, len(data)))
        return True

    # --- garbage collection ----------------------------------------------------------------

    async def collect_garbage(self, retention_seconds: float, grace_seconds: float) -> Collected:
        """One pass over every account (see the module docstring)."""
        now = self._clock()
        cutoff = format_time(now - timedelta(seconds=retention_seconds))
        # (an upload's updated_at lags its last chunk by up to TOUCH_SECONDS)
        untouched = format_time(now - timedelta(seconds=retention_seconds + TOUCH_SECONDS))
        async with self.db.transaction() as tx:
            accounts = [text(r[0]) for r in await tx.fetchall("SELECT DISTINCT account_id FROM blob_holdings")]
            stale = [
                (text(r[0]), text(r[1]))
                for r in await tx.fetchall("SELECT account_id, sha256 FROM blob_uploads WHERE updated_at < ?", untouched)
            ]
        unsent = format_time(now - timedelta(seconds=max(retention_seconds, UNSENT_MESSAGE_SECONDS)))
        dropped = 0
        for account_id in accounts:
            dropped += await self._drop_unreferenced(account_id, format_time(now), cutoff, unsent)
        for account_id, sha256 in stale:
            await self.blobs.discard(account_id, sha256)
            async with self.db.transaction(write=True) as tx:
                await tx.execute(
                    "DELETE FROM blob_uploads WHERE account_id = ? AND sha256 = ? AND updated_at < ?", account_id, sha256, untouched
                )
        async with self.db.transaction() as tx:
            still = {text(r[0]) for r in await tx.fetchall("SELECT DISTINCT sha256 FROM blob_holdings")}
        deleted = 0
        settled = now - timedelta(seconds=grace_seconds)
        for blob in await self.blobs.blobs():
            if blob.sha256 not in still and await self.blobs.delete(blob.sha256, created_before=settled):
                deleted += 1
        return Collected(dropped, len(stale), deleted)

    async def _drop_unreferenced(self, account_id: str, now: str, cutoff: str, unsent: str) -> int:
        """Mark the account's holdings its messages reference as referenced now; drop those
        unreferenced since before ``cutoff``, and those never referenced (``referenced_at`` still
        ``first_at``) only once held since before ``unsent``. How many it dropped."""
        async with self.db.transaction(write=True, slow=True) as tx:
            rows = await tx.fetchall(
                "SELECT attachments_json FROM messages WHERE account_id = ? AND attachments_json IS NOT NULL", account_id
            )
            digests = {d for row in rows for d in referenced(optional_text(row[0]))}
            if digests:
                await tx.executemany(
                    "UPDATE blob_holdings SET referenced_at = ? WHERE account_id = ? AND sha256 = ?",
                    [(now, account_id, d) for d in sorted(digests)],
                )
            gone = await tx.fetchall(
                """DELETE FROM blob_holdings WHERE account_id = ? AND referenced_at < ?
                AND (referenced_at <> first_at OR first_at < ?) RETURNING sha256""",
                account_id,
                cutoff,
                unsent,
            )
        return len(gone)
