"""The nemesis: faults on a seeded schedule, each recorded in the history (``fault``) and each
undone by itself after a while (``heal`` undoes at once whatever is still under way).

Kinds: ``kill`` (SIGKILL a server process, restarted 0.5-3 s later on its port), ``pause``
(SIGSTOP a server past the run lease, then SIGCONT: another process takes its runs over),
``cut`` (abort a device's live sockets' TCP connections), ``offline`` (a device's network gone for
0-10 s), ``wipe`` (a device's local database deleted: a full resync), ``compact`` (``python -m
server compact`` with a short retention: cursors below it expire), ``upstream`` (every model fails
or stalls mid-stream for a few seconds), and ``browser`` (a browser SIGKILLed and reopened on its
profile, or its page reloaded at once, browsers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from server.chaos.devices import EngineDevice
from server.chaos.history import History
from server.chaos.options import KINDS
from server.chaos.world import World

# The longest a wipe waits for its device to have sent what it has.
WIPE_WAIT = 30.0


class Nemesis:
    def __init__(
        self,
        world: World,
        devices: list[EngineDevice],
        history: History,
        rng: random.Random,
        kinds: tuple[str, ...] = KINDS,
        browser_fault: Callable[[random.Random], Awaitable[str | None]] | None = None,
    ) -> None:
        self.world = world
        self.devices = devices
        self.history = history
        self.rng = rng
        self.kinds = [k for k in kinds if k != "browser" or browser_fault is not None]
        self.browser_fault = browser_fault
        self.faults: Counter[str] = Counter()
        self.under_way: set[asyncio.Task[None]] = set()
        self._server_down = False  # (one server process down at a time: the others carry on)
        self._healing = asyncio.Event()

    async def _sleep(self, seconds: float) -> None:
        """Wait, less when the heal begins."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._healing.wait()

    def _record(self, kind: str, target: str, **more: Any) -> None:
        self.faults[kind] += 1
        self.history.record({"op": "fault", "kind": kind, "target": target, **more})

    async def run(self, until: float, interval: float) -> None:
        """A fault every ``interval`` seconds on average until ``until``: the kinds in rounds, each
        round every kind once in a shuffled order (so a short run sees every kind)."""
        round_: list[str] = []
        while self.kinds and time.monotonic() < until:
            await asyncio.sleep(self.rng.uniform(interval / 2, interval * 1.5))
            if time.monotonic() >= until:
                return
            if not round_:
                round_ = self.rng.sample(self.kinds, len(self.kinds))
            kind = round_.pop()
            if not self._possible(kind):  # (tried again at the next turn)
                round_.append(kind)
                continue
            task = asyncio.ensure_future(self._fault(kind))
            self.under_way.add(task)
            task.add_done_callback(self.under_way.discard)

    def _possible(self, kind: str) -> bool:
        """Whether the fault can be made now: one server process down at a time, a device
        online to take offline, the model service answering."""
        if kind in ("kill", "pause"):
            return not self._server_down
        if kind == "offline":
            return any(not d.transport.offline for d in self.devices)
        if kind == "upstream":
            return self.world.upstream.override is None
        return True

    async def _fault(self, kind: str) -> None:
        try:
            await getattr(self, "_" + kind)()
        except Exception as e:  # (recorded: a fault that could not be made is not a finding)
            self.history.record({"op": "error", "fault": kind, "error": repr(e)})

    async def _kill(self) -> None:
        if self._server_down:
            return
        server = self.rng.choice(self.world.servers)
        self._server_down = True
        try:
            server.kill()
            seconds = round(self.rng.uniform(0.5, 3), 2)
            self._record("kill", server.name, seconds=seconds)
            await self._sleep(seconds)
            await asyncio.to_thread(server.start)
        finally:
            self._server_down = False

    async def _pause(self) -> None:
        if self._server_down:
            return
        server = self.rng.choice(self.world.servers)
        self._server_down = True
        try:
            server.pause()
            seconds = round(self.rng.uniform(4, 7), 2)  # (past the run lease, world.py)
            self._record("pause", server.name, seconds=seconds)
            await self._sleep(seconds)
        finally:
            server.resume()
            self._server_down = False

    async def _cut(self) -> None:
        device = self.rng.choice(self.devices)
        cut = device.transport.cut()
        self._record("cut", device.name, sockets=cut)

    async def _offline(self) -> None:
        online = [d for d in self.devices if not d.transport.offline]
        if not online:
            return
        device = self.rng.choice(online)
        seconds = round(self.rng.uniform(0, 10), 2)
        await device.transport.set_offline(True)
        self._record("offline", device.name, seconds=seconds)
        try:
            await self._sleep(seconds)
        finally:
            await device.transport.set_offline(False)
            device.engine.retry_now()
            device.uploads.kick()

    async def _wipe(self) -> None:
        """A device's site data cleared, once it has nothing unsent (clearing it before would be
        its person throwing their work away): one settled now, or else one whose person stops
        for a moment (its workload held) until what it has is sent, ``WIPE_WAIT`` seconds at
        most. (Waiting for a device to settle by itself, a loaded machine's minute had none.)"""
        settled = [d for d in self.devices if d.settled()]
        device = self.rng.choice(settled or self.devices)
        device.held = True
        try:
            deadline = time.monotonic() + WIPE_WAIT
            while not device.settled() and not self._healing.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if await device.wipe():
                self._record("wipe", device.name)
            else:
                self.history.record({"op": "error", "fault": "wipe", "error": f"{device.name} did not settle"})
        finally:
            device.held = False

    async def _compact(self) -> None:
        said = await self.world.compact()
        self._record("compact", "database", said=said)

    async def _upstream(self) -> None:
        if self.world.upstream.override is not None:
            return
        mode = self.rng.choice(["broken", "stall", "502"])
        seconds = round(self.rng.uniform(2, 6), 2)
        self.world.upstream.override = mode
        self._record("upstream", mode, seconds=seconds)
        try:
            await self._sleep(seconds)
        finally:
            self.world.upstream.override = None

    async def _browser(self) -> None:
        assert self.browser_fault is not None
        target = await self.browser_fault(self.rng)
        if target is not None:
            self._record("browser", target)

    async def heal(self) -> None:
        """Undo every fault under way: servers running and resumed, devices online, the model
        service answering."""
        self._healing.set()
        await asyncio.gather(*self.under_way, return_exceptions=True)
        self.world.upstream.override = None
        for server in self.world.servers:
            server.resume()
            if not server.alive:
                await asyncio.to_thread(server.start)
        for device in self.devices:
            await device.transport.set_offline(False)
            device.engine.retry_now()
            device.uploads.kick()
