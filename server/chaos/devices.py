"""Engine devices: the browser's own code under CPython, headless. Each has a local database file
(``webapp.store.LocalStore``), the real sync engine (``webapp.sync.SyncEngine``) and upload
engine (``webapp.uploads.UploadEngine``) running as they run in a page, over the real network
(transport.py) to the world's servers. A change is saved as the app saves it (``add_local``:
the outbox and the tables in one durable transaction), recorded in the history, then the engine
is kicked. The bytes of the files it attaches stay in memory (its ``BlobSource``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server.chaos.history import History
from server.chaos.transport import HttpTransport
from shared.ids import Uuid7Generator
from shared.models import DomainEvent, Message, Payload, format_time
from webapp.database import FilePersistence
from webapp.store import LocalStore
from webapp.sync import SyncEngine
from webapp.uploads import Chunk, UploadEngine

PASSWORD = "chaos is a ladder"


def now() -> str:
    return format_time(datetime.now(UTC))


def row_of(message: Message) -> dict[str, Any]:
    """A message as the history's final reads hold it (checker.py compares these)."""
    return {
        "id": message.id, "chat": message.chat_id, "role": message.role, "content": message.content,
        "status": message.status, "parent": message.parent_id, "run": message.run_id,
        "assistant": message.assistant_id, "created": message.created_at,
        "files": sorted(a.sha256 for a in message.attachments), "seq": message.last_seq,
    }  # fmt: skip


class EngineDevice:
    def __init__(self, name: str, directory: Path, urls: list[str], history: History, rng: random.Random, index: int) -> None:
        self.name = name
        self.path = directory / f"{name}.db"
        self.history = history
        self.rng = rng
        self.transport = HttpTransport(urls, name, history.record, start=index)
        self.new_id = Uuid7Generator(lambda: int(time.time() * 1000), rng.randbytes)
        self.blobs: dict[str, bytes] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.written = 0  # messages written (their tags' numbers)
        self.held = False  # (its person has stopped for a moment: its workload takes no step)
        self.open()

    # --- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        self.store = LocalStore(str(self.path), FilePersistence())
        self.engine = SyncEngine(self.store, self.transport, lambda: None, lambda status: None, min_backoff=0.1, max_backoff=2.0)
        self.uploads = UploadEngine(self.store, self.transport, self, on_change=self._upload_changed, min_backoff=0.2, max_backoff=2.0)

    def _upload_changed(self, sha256: str) -> None:
        """A file's upload done or failed: in the history (an attachments anomaly's first clue)."""
        state = self.store.upload_state(sha256)
        if state is not None and state.state in ("done", "failed"):
            self.history.record({"op": "upload", "device": self.name, "sha256": sha256, "state": state.state, "error": state.error})

    async def sign_in(self, username: str, signup: bool) -> None:
        await self.transport.sign_in(username, PASSWORD, signup)

    def start(self) -> None:
        for job in (self.engine.run(), self.uploads.run()):
            task = asyncio.ensure_future(job)
            task.add_done_callback(_log_failure)
            self.tasks.append(task)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(BaseException):
                await task
        self.tasks = []

    async def close(self) -> None:
        await self.stop()
        self.store.close()
        await self.transport.close()

    def settled(self) -> bool:
        """Nothing unsent: no event in the outbox, no file waiting."""
        return self.store.pending_count() == 0 and not self.store.queued_uploads()

    async def wipe(self) -> bool:
        """Delete the local database (the site's data cleared): the device starts over from a
        snapshot. Only when nothing is unsent (that would be the user throwing away their work)."""
        if not self.settled():
            return False
        await self.stop()
        if not self.settled():  # (saved while its engines stopped: the workload goes on meanwhile)
            self.start()
            return False
        self.store.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(str(self.path) + suffix).unlink()
        self.open()
        self.start()
        self.history.record({"op": "wipe", "device": self.name})
        return True

    # --- saving ---------------------------------------------------------------------------------

    async def save(self, kind: str, payload: Payload, **fields: Any) -> DomainEvent:
        event = DomainEvent.model_validate({"eventId": self.new_id(), "type": kind, "payload": payload, "createdAt": now()})
        entity = event.entity_id()
        # What it may be folded into (webapp/outbox.py coalesces a change into its entity's unsent
        # events), read before: while the save waits for its flush, the engine may take that
        # event to send, and it is no longer unsent after.
        unsent = self.store.conn.execute(
            "SELECT event_id FROM pending_events WHERE entity_id = ? AND status = 'pending' ORDER BY id LIMIT 1", (entity,)
        ).fetchone()
        await self.store.add_local(event)
        record: dict[str, Any] = {"op": "save", "device": self.name, "event": event.event_id, "type": kind, "entity": entity, **fields}
        queued = self.store.conn.execute("SELECT 1 FROM pending_events WHERE event_id = ?", (event.event_id,)).fetchone()
        if queued is None and unsent is not None:  # coalesced into a change not sent yet, or withdrawn with it
            record["into"] = unsent[0]
        self.history.record(record)
        self.engine.kick()
        return event

    def attach(self, size: int) -> tuple[str, int]:
        """A file of ``size`` random bytes, kept here; (its SHA-256, its size)."""
        data = self.rng.randbytes(size)
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = data
        return sha, size

    # --- BlobSource -----------------------------------------------------------------------------

    async def size(self, sha256: str) -> int | None:
        data = self.blobs.get(sha256)
        return None if data is None else len(data)

    async def read(self, sha256: str, offset: int, length: int) -> Chunk:
        part = self.blobs[sha256][offset : offset + length]
        return Chunk(len(part), part)

    # --- the final read -------------------------------------------------------------------------

    def final(self) -> dict[str, Any]:
        return {
            "op": "final",
            "who": self.name,
            "chats": {c.id: {"title": c.title} for c in self.store.chats()},
            "messages": {m.id: row_of(m) for m in self.store.all_messages()},
            "outbox": self.store.pending_count(),
            "uploads": len(self.store.queued_uploads()),
            "lastSeq": self.store.last_seq(),
        }


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger(__name__).error("a device's engine stopped", exc_info=task.exception())
