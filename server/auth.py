"""Password hashing (Argon2id) and session tokens. Tokens are random and stored only as their SHA-256."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from server.store import SessionInfo

# Argon2id with argon2-cffi's defaults (RFC 9106's second recommended option).
_HASHER = PasswordHasher()


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def verify_password(password: str, stored: str) -> bool:
    try:
        return _HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


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
