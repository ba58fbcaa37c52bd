"""Password hashing (Argon2id) and session tokens. Tokens are random and stored only as their SHA-256."""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from server.config import Settings
from server.store import SessionInfo


@functools.cache
def _hasher(memory_kib: int, time_cost: int) -> PasswordHasher:
    """Argon2id with 4 lanes and the settings' memory and passes; by default argon2-cffi's own
    (64 MiB, 3 passes: RFC 9106's second recommended option), about 0.2 s of CPU a password."""
    return PasswordHasher(time_cost=time_cost, memory_cost=memory_kib, parallelism=4)


def hash_password(password: str, settings: Settings) -> str:
    return _hasher(settings.password_memory_kib, settings.password_time_cost).hash(password)


def verify_password(password: str, stored: str) -> bool:
    """Whatever the settings were when ``stored`` was made: a hash names its own parameters."""
    try:
        return _hasher(Settings.password_memory_kib, Settings.password_time_cost).verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(stored: str, settings: Settings) -> bool:
    """``stored`` was hashed at another cost than the settings' (they were raised, or lowered, since)."""
    return _hasher(settings.password_memory_kib, settings.password_time_cost).check_needs_rehash(stored)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SessionCache:
    """Sessions found lately, kept ``ttl`` seconds, so a burst of requests reads the sessions table
    once. Logging out evicts the token here at once; another server process may still honour a
    logged-out token for at most ``ttl`` seconds. Only found sessions are kept."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic, max_entries: int = 10_000) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[str, tuple[float, SessionInfo]] = OrderedDict()

    def get(self, token_hash: str) -> SessionInfo | None:
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        if entry[0] < self._clock():
            del self._entries[token_hash]
            return None
        return entry[1]

    def put(self, token_hash: str, session: SessionInfo) -> None:
        if self._ttl <= 0:
            return
        self._entries[token_hash] = (self._clock() + self._ttl, session)
        self._entries.move_to_end(token_hash)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def evict(self, token_hash: str) -> None:
        self._entries.pop(token_hash, None)
