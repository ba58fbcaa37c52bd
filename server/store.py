"""The event store contract (``server/event_store.py`` implements it over both backends).

Guarantees every backend keeps (the seed spec's invariants, docs/protocol.md):

* Each account has its own log. ``seq`` is per account, gapless and strictly increasing, and
  commit order equals seq order: the log head is a row in ``logs`` that every append updates in
  its transaction, so a rolled-back append leaves no hole and appends of one account serialize.
* ``append`` handles one batch in one transaction. Each event is checked for a duplicate eventId
  (answered ``duplicate`` with its original seq), validated against the state as it stands after
  the earlier events of the batch (``server/validation.py``), then logged and applied with the
  ``shared`` reducer. A rejected event leaves no trace; it does not stop the others.
* Every state row carries ``last_seq``; the rows with ``last_seq <= N`` plus the events after N
  are exactly the current state.
* eventIds are remembered for ever (they outlive compaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.models import DomainEvent, EventResult, LoggedEvent, Snapshot


class StoreError(Exception):
    """Base of the store's own errors."""


class CursorExpired(StoreError):
    """The events after the asked cursor have been compacted away: the client must resync."""

    def __init__(self, min_available_seq: int, current_seq: int) -> None:
        super().__init__(f"events before seq {min_available_seq} are no longer available")
        self.min_available_seq = min_available_seq
        self.current_seq = current_seq


class UsernameTaken(StoreError):
    pass


class InvalidPage(StoreError):
    pass


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction of an account's log did."""

    account_id: str
    superseded_removed: int
    truncated: int
    min_available_seq: int


@dataclass(frozen=True)
class Rejected:
    """An event that failed schema validation before reaching the store (its eventId is known)."""

    event_id: str
    error: str


@dataclass(frozen=True)
class Commit:
    """What one append committed to an account's log: the events accepted (none duplicate or
    rejected), in seq order, and the log's seq after them."""

    account_id: str
    current_seq: int
    accepted: list[DomainEvent]


@dataclass(frozen=True)
class Updates:
    events: list[LoggedEvent]
    has_more: bool
    current_seq: int


@dataclass(frozen=True)
class StatePage:
    snapshot: Snapshot
    up_to_seq: int
    current_seq: int
    next_page: str | None
    total: int | None = None  # rows in the whole snapshot, on its first page


@dataclass(frozen=True)
class Account:
    id: str
    username: str
    password_hash: str


@dataclass(frozen=True)
class SessionInfo:
    account_id: str
    device_id: str


class EventStore(Protocol):
    async def open(self) -> None:
        """Connect and apply pending migrations."""

    async def close(self) -> None:
        """Release connections; safe to call twice."""

    async def append(
        self, account_id: str, origin: str, events: list[DomainEvent | Rejected]
    ) -> tuple[list[EventResult], int]:
        """Log and apply a batch (see the module docstring); returns the results and current seq.
        After a commit that accepted any event, and before returning, it calls the store's
        ``on_commit`` hook with a ``Commit``: the one place that wakes what follows the log (the
        live sockets, the run worker), whoever appended."""

    async def read_updates(self, account_id: str, after_seq: int, limit: int) -> Updates:
        """Events with seq > after_seq in seq order; raises CursorExpired below the horizon."""

    async def read_state(
        self,
        account_id: str,
        up_to_seq: int | None,
        chat_id: str | None,
        limit: int,
        page: str | None,
    ) -> StatePage:
        """Rows with last_seq <= up_to_seq (default: now), paged; CursorExpired below the horizon."""

    async def read_state_json(
        self,
        account_id: str,
        up_to_seq: int | None,
        chat_id: str | None,
        limit: int,
        page: str | None,
    ) -> bytes:
        """The same page as the JSON of its ``StateResponse`` (what ``GET /sync/state`` sends),
        made from the rows without a model per row; the next page is read ahead meanwhile."""

    async def current_seq(self, account_id: str) -> int: ...

    async def min_available_seq(self, account_id: str) -> int:
        """The lowest seq a cursor may ask to continue from, plus one (``after_seq + 1``)."""

    async def compact(self, account_id: str, retention_seconds: float, grace_seconds: float) -> CompactionResult:
        """Remove superseded events older than the grace period; truncate below the horizon."""

    async def compact_all(self, retention_seconds: float, grace_seconds: float) -> list[CompactionResult]: ...

    async def record_cursor(self, account_id: str, device_id: str, seq: int) -> None:
        """A device has asked for the events after ``seq``: it holds everything up to it."""

    async def create_account(self, account_id: str, username: str, password_hash: str) -> None:
        """Raises UsernameTaken."""

    async def find_account(self, username: str) -> Account | None: ...

    async def set_password_hash(self, account_id: str, password_hash: str) -> None:
        """A new password (``python -m server set-password``), or the same one hashed at the
        settings' cost (a login after they were raised)."""

    async def create_session(
        self, token_hash: str, account_id: str, device_id: str, device_name: str
    ) -> None: ...

    async def find_session(self, token_hash: str) -> SessionInfo | None: ...

    async def delete_session(self, token_hash: str) -> None: ...
