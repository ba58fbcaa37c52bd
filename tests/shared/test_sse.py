"""The server-sent-events decoder (shared/sse.py) against the HTML standard's framing, and the
chat-completions reading of its events (shared/assistants.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.assistants import Piece, Usage, completion_pieces
from shared.sse import ServerSentEvent, SseDecoder


def decoded(*pieces: str) -> list[ServerSentEvent]:
    decoder = SseDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def test_the_standards_examples() -> None:
    # Three data lines make one event, joined by line feeds.
    assert decoded("data: YHOO\ndata: +2\ndata: 10\n\n") == [ServerSentEvent("YHOO\n+2\n10")]
    # A comment, an id that stays for the events after it, and an event without one.
    stream = ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
    assert decoded(stream) == [
        ServerSentEvent("first event", id="1"),
        ServerSentEvent("second event", id=""),
        ServerSentEvent(" third event", id=""),  # (only the one space after the colon goes)
    ]
    # "data" alone is an empty data line: two of them make one line feed; the last event has no
    # blank line after it, so it never ends.
    assert decoded("data\n\ndata\ndata\n\ndata:") == [ServerSentEvent(""), ServerSentEvent("\n")]
    # The same with and without a space after the colon.
    assert decoded("data:test\n\ndata: test\n\n") == [ServerSentEvent("test"), ServerSentEvent("test")]


def test_event_types_line_endings_and_a_leading_byte_order_mark() -> None:
    assert decoded("\ufeffevent: add\r\ndata: 73857293\r\n\r\nevent: remove\rdata: 2153\r\rdata: 113411\n\n") == [
        ServerSentEvent("73857293", event="add"),
        ServerSentEvent("2153", event="remove"),
        ServerSentEvent("113411"),  # the type was the last event's only
    ]
    assert decoded("retry: 1000\nunknown: field\n\n") == []  # no data: no event
    assert decoded("id: a\0b\ndata: x\n\n") == [ServerSentEvent("x")]  # an id with NUL is ignored


STREAM = st.lists(
    st.sampled_from(["data: ", "data:", "data", "event: e", "id: 7", ": note", "x", "é", "{}", "\n", "\r", "\r\n", "\ufeff"]),
    max_size=40,
).map("".join)


@given(STREAM, st.lists(st.integers(0, 200), max_size=8))
def test_any_split_of_the_stream_decodes_to_the_same_events(stream: str, cuts: list[int]) -> None:
    at = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[i:j] for i, j in zip([0, *at], [*at, len(stream)], strict=True)]
    assert decoded(*pieces) == decoded(stream)


def test_a_chat_completions_stream() -> None:
    events = decoded(
        'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
        'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\ndata: {"choices":[{"delta":{"cont',
        'ent":"lo"}}]}\n\n: keep-alive\n\n',
        'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n',
        'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\ndata: [DONE]\n\n',
    )
    assert [completion_pieces(e.data) for e in events] == [
        [],
        [Piece(text="Hel")],
        [Piece(text="lo")],
        [Piece(finish_reason="length")],
        [Piece(usage=Usage(5, 2))],
        None,
    ]


@pytest.mark.parametrize(("reported", "recorded"), [("stop", "stop"), ("length", "length"), ("content_filter", "stop"), ("tool_calls", "stop")])
def test_a_finish_reason_is_recorded_as_stop_or_length(reported: str, recorded: str) -> None:
    data = json.dumps({"choices": [{"delta": {"content": "x"}, "finish_reason": reported}]})
    assert completion_pieces(data) == [Piece(text="x"), Piece(finish_reason=recorded)]  # type: ignore[arg-type]


@pytest.mark.parametrize("data", ["not json", "[1, 2]", '{"choices": [3]}', '{"choices": [{"delta": "x"}]}', '{"usage": 3}'])
def test_what_is_not_a_chat_completions_chunk_is_a_value_error(data: str) -> None:
    with pytest.raises(ValueError):
        completion_pieces(data)
