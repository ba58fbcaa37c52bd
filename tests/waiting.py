"""Waiting for a condition, never for time: a test that sleeps and then asserts proves nothing on a
slow machine (too short: it fails for nothing; long enough: it is slow everywhere)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def until(predicate: Callable[[], Any], why: Any = "", timeout: float = 10.0) -> Any:
    """Poll ``predicate`` until it is truthy and return its value; fail after ``timeout`` seconds
    with ``why`` (a sentence, or a callable giving one: what was there instead)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {why() if callable(why) else why}")
        await asyncio.sleep(0.01)


async def loop_turn() -> None:
    """Return once the event loop has run every callback scheduled before this call (it runs them
    first in, first out): what the caller set in motion, a task's cancellation say, has taken its
    step. The marker after which something that would have happened by then can be checked absent."""
    loop = asyncio.get_running_loop()
    turn = loop.create_future()
    loop.call_soon(turn.set_result, None)
    await turn
