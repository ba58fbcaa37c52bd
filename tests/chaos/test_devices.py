"""The chaos run's own devices (server/chaos/devices.py) do to the app only what a person could:
a wipe (the site's data cleared) throws away nothing unsent, even when the workload saves while
the device's engines are stopping for it."""

from __future__ import annotations

import random
from pathlib import Path

from server.chaos.devices import EngineDevice
from server.chaos.history import History
from shared.models import Chat


async def test_a_wipe_does_not_throw_away_what_was_saved_while_it_stopped_the_engines(tmp_path: Path) -> None:
    """Found by a 10-minute run (seed 12): the nemesis found a device settled and stopped its
    engines; the workload saved a message meanwhile; the wipe then deleted it unsent (`lost 1`;
    with files, the message got out and its files did not: `attachments 2`)."""
    history = History()
    device = EngineDevice("d1", tmp_path, ["http://127.0.0.1:9"], history, random.Random(1), 0)  # (nothing listens: offline)
    stop = device.stop

    async def stop_while_the_workload_saves() -> None:
        await device.save("ChatCreated", Chat(id=device.new_id(), title="typed meanwhile", created_at="2026-12-05T12:00:00.000Z"))
        await stop()

    device.stop = stop_while_the_workload_saves  # type: ignore[method-assign]
    device.start()
    assert device.settled()
    assert await device.wipe() is False
    assert device.store.pending_count() == 1 and [c.title for c in device.store.chats()] == ["typed meanwhile"]
    assert not [r for r in history.records if r["op"] == "wipe"]

    device.stop = stop  # type: ignore[method-assign]
    await device.stop()
    await device.transport.close()
    device.store.close()
