"""The hub's copy of the text of every reply streaming now, built from the delta frames that
reached this process: what a live socket gets right after ``caughtUp`` (one delta at offset 0 per
reply, ``server/live_machine.py``'s ``ReadStreams``), and what a run taken over from a dead process
keeps (``server/runs.py``). Pure: the time is passed in."""

from __future__ import annotations

import json
from dataclasses import dataclass

from shared.models import DeltaFrame


@dataclass
class Stream:
    """A reply streaming now, as the delta frames that reached this process built it."""

    run_id: str
    text: str  # from offset 0
    complete: bool  # False: a delta was missed (this process came mid-answer, or lost one)
    touched: float  # the time of its last delta


class Streams:
    """The text of every reply streaming now, per account, from the deltas that reached this
    process: what a socket gets right after ``caughtUp``. ``now`` is passed in (monotonic
    seconds); a stream untouched for ``idle_seconds`` is forgotten (its run's process died, or
    its end was missed while PostgreSQL's listener was away)."""

    def __init__(self, now: float, idle_seconds: float) -> None:
        self._streams: dict[str, dict[str, Stream]] = {}  # account -> message id -> its stream
        self._pruned = now
        self._idle = idle_seconds

    def add(self, account_id: str, delta: DeltaFrame, now: float) -> None:
        if now - self._pruned > self._idle / 10:
            self._prune(now)
        streams = self._streams.setdefault(account_id, {})
        stream = streams.get(delta.message_id)
        if stream is None or delta.offset == 0:
            stream = streams[delta.message_id] = Stream(delta.run_id, "", delta.offset == 0, now)
        stream.touched = now
        if not stream.complete:
            return
        if delta.offset > len(stream.text):
            stream.complete = False  # a gap: what came between is not known here
        elif delta.offset + len(delta.text) > len(stream.text):  # (less: an old piece, repeated)
            stream.text = stream.text[: delta.offset] + delta.text

    def _prune(self, now: float) -> None:
        self._pruned = now
        for account_id, streams in list(self._streams.items()):
            for message_id, stream in list(streams.items()):
                if now - stream.touched > self._idle:
                    del streams[message_id]
            if not streams:
                del self._streams[account_id]

    def end(self, account_id: str, message_id: str) -> None:
        streams = self._streams.get(account_id, {})
        streams.pop(message_id, None)
        if not streams:
            self._streams.pop(account_id, None)

    def interrupted(self) -> None:
        """Deltas may have been missed: no stream is known whole."""
        for streams in self._streams.values():
            for stream in streams.values():
                stream.complete = False

    def text_so_far(self, account_id: str, message_id: str) -> str | None:
        stream = self._streams.get(account_id, {}).get(message_id)
        return stream.text if stream is not None and stream.complete else None

    def streaming(self, account_id: str) -> dict[str, Stream]:
        """The account's replies streaming now whose text is known whole."""
        return {m: s for m, s in self._streams.get(account_id, {}).items() if s.complete and s.text}

    def texts(self, account_id: str) -> dict[str, tuple[str, str]]:
        """Message id -> its run, and a delta frame at offset 0 with the whole text so far
        (``StreamsRead``)."""
        return {
            m: (s.run_id, json.dumps(DeltaFrame(message_id=m, run_id=s.run_id, offset=0, text=s.text).wire()))
            for m, s in self.streaming(account_id).items()
        }
