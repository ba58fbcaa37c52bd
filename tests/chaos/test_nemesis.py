"""The nemesis's wipe (server/chaos/nemesis.py): a device's site data cleared once it has nothing
unsent, under a workload that never stops writing."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from server.chaos.devices import EngineDevice
from server.chaos.history import History
from server.chaos.nemesis import Nemesis
from server.chaos.workload import drive
from shared.models import Chat
from tests.waiting import until


async def test_a_wipe_holds_its_devices_workload_until_what_it_has_is_sent(tmp_path: Path) -> None:
    """A loaded machine's chaos minute (2026-12-07) never wiped: at each of the wipe's turns every
    device had something unsent, as every workload went on writing, so the check that each kind
    of fault was made failed. The wipe now holds one device's workload until it has sent what it
    has, and only then clears its data."""
    history = History()
    device = EngineDevice("d1", tmp_path, ["http://127.0.0.1:9"], history, random.Random(1), 0)  # (offline: nothing sends)
    await device.save("ChatCreated", Chat(id=device.new_id(), title="unsent", created_at="2026-12-05T12:00:00.000Z"))
    assert not device.settled()
    sent = False  # (until the test says its pushes got through: nothing listens at that address)
    device.settled = lambda: sent  # type: ignore[method-assign]
    nemesis = Nemesis(None, [device], history, random.Random(1))  # type: ignore[arg-type]  # (a wipe needs no world)

    wiping = asyncio.ensure_future(nemesis._wipe())
    await asyncio.sleep(0.3)
    assert device.held and not wiping.done() and not [r for r in history.records if r["op"] == "wipe"]
    sent = True
    await asyncio.wait_for(wiping, 10)
    assert not device.held
    assert [r["target"] for r in history.records if r["op"] == "fault"] == ["d1"]
    assert device.store.chats() == []  # (wiped: it starts over from the server's state)

    await device.stop()
    await device.transport.close()
    device.store.close()


async def test_a_held_device_takes_no_step() -> None:
    steps: list[float] = []

    async def step() -> None:
        steps.append(time.monotonic())

    device = SimpleNamespace(held=True, name="d1", history=History())
    workload: Any = SimpleNamespace(rng=random.Random(1), step=step, device=device)
    driving = asyncio.ensure_future(drive(workload, time.monotonic() + 0.5, 0.01))
    await asyncio.sleep(0.2)
    assert steps == []
    device.held = False
    await until(lambda: steps, "a step once the device is let go")
    await driving
