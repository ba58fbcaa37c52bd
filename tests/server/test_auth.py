from __future__ import annotations

import pytest

from server.auth import SessionCache, hash_password, verify_password
from server.config import Settings
from server.store import SessionInfo


def test_passwords_verify_and_hashes_are_salted() -> None:
    first, second = hash_password("correct horse", Settings()), hash_password("correct horse", Settings())
    assert first != second
    assert first.startswith("$argon2id$v=19$m=65536,t=3,p=4$")  # (the defaults: RFC 9106's second option)
    assert verify_password("correct horse", first) and not verify_password("wrong", first)
    assert not verify_password("correct horse", "garbage")


def test_the_hashing_cost_is_a_setting_and_any_hash_verifies_whatever_the_settings_now() -> None:
    light = hash_password("correct horse", Settings(password_memory_kib=1024, password_time_cost=1))
    assert light.startswith("$argon2id$v=19$m=1024,t=1,p=4$")
    assert verify_password("correct horse", light) and not verify_password("wrong", light)
    for wrong in ({"password_memory_kib": 31}, {"password_time_cost": 0}):
        with pytest.raises(SystemExit, match="password-time-cost is 1 or more, and password-memory-kib 32 or more"):
            Settings(**wrong)  # type: ignore[arg-type]


def test_the_session_cache_expires_evicts_and_is_bounded() -> None:
    now = [0.0]
    cache = SessionCache(ttl=5, clock=lambda: now[0], max_entries=2)
    session = SessionInfo("account", "device")
    cache.put("a", session)
    assert cache.get("a") == session
    now[0] = 6
    assert cache.get("a") is None  # expired
    cache.put("a", session)
    cache.evict("a")
    assert cache.get("a") is None  # logged out
    for key in "xyz":
        cache.put(key, session)
    assert cache.get("x") is None and cache.get("z") == session  # the oldest went
    off = SessionCache(ttl=0)
    off.put("a", session)
    assert off.get("a") is None


def test_the_rate_limiter_refills_over_time() -> None:
    from server.limits import RateLimiter

    now = [0.0]
    limiter = RateLimiter(per_minute=60, burst=2, clock=lambda: now[0])
    assert limiter.take("a") is None and limiter.take("a") is None
    wait = limiter.take("a")
    assert wait is not None and 0 < wait <= 1
    assert limiter.take("b") is None  # keys are separate
    now[0] = 1.0
    assert limiter.take("a") is None
    assert RateLimiter(per_minute=0, burst=1).take("a") is None  # 0: no limit
