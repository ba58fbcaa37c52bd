"""The chaos run's own devices (server/chaos/devices.py) do to the app only what a person could:
a wipe (the site's data cleared) throws away nothing unsent, even when the workload saves while
the device's engines are stopping for it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from server.chaos.devices import EngineDevice
from server.chaos.history import History
from shared.models import Chat, DomainEvent, Message


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


async def test_an_edit_folded_into_an_append_the_engine_takes_during_the_flush_is_recorded_as_folded(tmp_path: Path) -> None:
    """CI's run of seed 22 (`lost 2`): an edit was folded into its message's unsent append; while
    the save waited for its flush, the engine took the append (with the edit's text) to send; the
    device then found no unsent event it had gone into and recorded none, so the checker held the
    append's first text as the latest and called the server's (the edit's) lost."""
    history = History()
    device = EngineDevice("d1", tmp_path, ["http://127.0.0.1:9"], history, random.Random(1), 0)  # (offline: nothing sends)
    chat = Chat(id=device.new_id(), title="t", created_at="2026-12-05T12:00:00.000Z")
    message = Message(id=device.new_id(), chat_id=chat.id, role="user", content="[q1] first", created_at=chat.created_at)
    await device.save("ChatCreated", chat)
    append = await device.save("MessageAppended", message, text=message.content)
    add_local = device.store.add_local

    async def taken_to_send_during_the_flush(*events: DomainEvent, **kwargs: Any) -> None:
        await add_local(*events, **kwargs)
        await device.store.mark_attempted([append.event_id])  # (what SyncEngine.push does first)

    device.store.add_local = taken_to_send_during_the_flush  # type: ignore[method-assign]
    edit = await device.save("MessageEdited", message.model_copy(update={"content": "[q1] edited"}), text="[q1] edited")
    [body] = [p.event for p in device.store.outbox() if p.event.event_id == append.event_id]
    assert body.payload.content == "[q1] edited"  # (folded in)
    [record] = [r for r in history.records if r.get("event") == edit.event_id]
    assert record["into"] == append.event_id
    await device.transport.close()
    device.store.close()
