"""Rate limits: a token bucket per key (an account, a client address), in this process."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    """``per_minute`` requests a minute on average, in bursts of up to ``burst``.

    Kept per process: with N server processes a client may get up to N times the rate.
    """

    def __init__(
        self,
        per_minute: float,
        burst: float,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self._rate = per_minute / 60.0
        self._burst = burst
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str) -> float | None:
        """Spend one token: None when allowed, else the seconds to wait before trying again."""
        if self._rate <= 0:
            return None  # no limit
        now = self._clock()
        tokens, at = self._buckets.get(key, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self._rate
        self._buckets[key] = (tokens - 1, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return None
