"""Server-sent events, decoded as they arrive: the framing of the WHATWG HTML standard
("Interpreting an event stream", §9.2.6), for the models' streamed answers on the server (httpx)
and in the browser (fetch).

Ours, not a library's: the maintained Python ones are bound to a transport (``httpx-sse`` to
httpx, which the browser does not ship; ``sseclient-py`` pulls from a blocking iterator), while
both sides here push decoded text from their own async reads. tests/shared/test_sse.py holds it to
the standard's examples and to any split of the stream into chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_END_OF_LINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str = ""


class SseDecoder:
    """Feed it the stream's text, in pieces of any size; each feed returns the events completed.
    An event still open when the stream ends is dropped, as the standard says."""

    def __init__(self) -> None:
        self._pending = ""
        self._first = True
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""

    def feed(self, text: str) -> list[ServerSentEvent]:
        pending = self._pending + text
        events: list[ServerSentEvent] = []
        start = 0
        for end in _END_OF_LINE.finditer(pending):
            if end.group() == "\r" and end.end() == len(pending):
                break  # perhaps the first half of a CRLF: decided by the next piece
            event = self._line(pending[start : end.start()])
            if event is not None:
                events.append(event)
            start = end.end()
        self._pending = pending[start:]
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if self._first:
            self._first = False
            line = line.removeprefix("\ufeff")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (a keep-alive)
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._last_id = value
        return None  # "retry" and unknown fields: nothing to do for a reader that does not reconnect

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent("\n".join(data), event or "message", self._last_id)
