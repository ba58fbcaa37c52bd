"""The client's handling of delta frames (webapp/app.py ``_on_delta``) under CPython: the text so
far that a socket gets right after ``caughtUp`` (offset 0), and deltas that repeat, overlap or
skip what the client has. The reply never shows text twice, never goes back, and a checkpoint or
the final event that knows more replaces what the deltas built."""

from __future__ import annotations

from pathlib import Path

from shared.models import DeltaFrame, EventType
from tests.webapp.page import FakePage
from tests.webapp.test_client import confirm_outbox, logged, signed_in
from webapp.app import Client


def shown(client: Client, page: FakePage, reply_id: str) -> str:
    """The reply's text as it is drawn now (after the next frame), checked against the page."""
    page.paint()
    row = client.store.message(reply_id)
    text = client.pane.streaming.get(reply_id) or (row.content if row else "")
    assert f"<p>{text}</p>" in page.messages
    return text


async def test_a_catch_up_delta_shows_the_text_so_far_and_later_deltas_follow_it(tmp_path: Path) -> None:
    client, page = await signed_in(tmp_path)
    await client.dispatch("send", {"text": "hi", "assistant": "demo"})
    *_, reply = client.store.messages(client.selected or "")
    seq = await confirm_outbox(client)
    run = reply.run_id or ""

    def delta(offset: int, text: str) -> None:
        client._on_delta(DeltaFrame(message_id=reply.id, run_id=run, offset=offset, text=text))

    # Joined mid-answer: the log has a checkpoint of the first words; the socket sends the text so
    # far at offset 0 right after caughtUp. (A queued reply whose start the log has not brought
    # yet takes it too.)
    delta(0, "One")
    assert shown(client, page, reply.id) == "One"
    checkpoint = reply.model_copy(update={"status": "streaming", "content": "One two"})
    await client.store.apply_remote([logged(client, seq + 1, EventType.MESSAGE_EDITED, checkpoint)])
    client.redraw()
    delta(0, "One two three four")
    assert shown(client, page, reply.id) == "One two three four"
    assert "One two three four" in page.messages

    delta(18, " five")  # the next delta follows it
    delta(8, "three")  # an old piece again: nothing new
    delta(0, "One two three")  # an older text so far: what the client has is newer
    assert shown(client, page, reply.id) == "One two three four five"
    delta(19, "five six")  # overlaps what it has: only the new part is added
    assert shown(client, page, reply.id) == "One two three four five six"
    delta(40, "far ahead")  # a gap: left for the next text so far, or a checkpoint
    assert shown(client, page, reply.id) == "One two three four five six"
    assert page.messages.count("five") == 1 and "far ahead" not in page.messages

    # Reconnected: the text so far again, longer; then the final event replaces it all.
    delta(0, "One two three four five six seven")
    assert shown(client, page, reply.id) == "One two three four five six seven"
    final = checkpoint.model_copy(update={"status": "completed", "content": "One two three four five six seven."})
    await client.store.apply_remote([logged(client, seq + 2, EventType.MESSAGE_EDITED, final)])
    client.redraw()
    page.paint()
    assert client.pane.streaming == {} and "seven." in page.messages
    delta(0, "One two three four five six seven. And a late delta")  # the run has ended: ignored
    page.paint()
    assert client.pane.streaming == {} and "late delta" not in page.messages
