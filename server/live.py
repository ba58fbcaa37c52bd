"""In-process fan-out: a commit wakes every live socket of its account.

A socket never receives events from here, only a wake-up; it then reads the events after its own
cursor from the store. So a missed or merged wake-up can never cause a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class Hub:
    def __init__(self) -> None:
        self._listeners: dict[str, set[asyncio.Event]] = defaultdict(set)

    def subscribe(self, account_id: str) -> asyncio.Event:
        wake = asyncio.Event()
        self._listeners[account_id].add(wake)
        return wake

    def unsubscribe(self, account_id: str, wake: asyncio.Event) -> None:
        listeners = self._listeners.get(account_id)
        if listeners is not None:
            listeners.discard(wake)
            if not listeners:
                del self._listeners[account_id]

    def notify(self, account_id: str) -> None:
        for wake in self._listeners.get(account_id, ()):
            wake.set()

    def notify_all(self) -> None:
        """Wake every socket (after a notification may have been missed): each re-reads from its
        own cursor, so a spurious wake-up costs one read and nothing else."""
        for listeners in self._listeners.values():
            for wake in listeners:
                wake.set()

    def socket_count(self) -> int:
        return sum(len(s) for s in self._listeners.values())
