"""The built-in demo model (shared/assistants.py): its finish reasons, a preset's length limit,
and going on with a cut answer (both ways of asking: prefill and a go-on turn)."""

from __future__ import annotations

import pytest

from shared.assistants import DEFAULT_SAMPLING, DemoModel, Piece, Sampling, Turn, continuing, demo_answer
from shared.continuation import GO_ON, continued


async def _no_wait(seconds: float) -> None:
    return None


async def streamed(turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> list[Piece]:
    return [piece async for piece in DemoModel(sleep=_no_wait).stream(turns, sampling)]


def text_of(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces)


async def test_an_answer_ends_with_stop_then_its_usage_marked_estimated() -> None:
    pieces = await streamed([Turn("system", "Be brief."), Turn("user", "Hello there")])
    assert text_of(pieces) == demo_answer("Hello there", 1)
    *_, finish, cost = pieces
    assert finish == Piece(finish_reason="stop")
    assert cost.usage is not None and cost.usage.estimated
    assert cost.usage.completion_tokens == len(demo_answer("Hello there", 1).split(" "))


async def test_a_length_limit_cuts_the_answer_and_says_so() -> None:
    pieces = await streamed([Turn("user", "Hello there")], Sampling(max_tokens=5))
    assert text_of(pieces) == " ".join(demo_answer("Hello there", 1).split(" ")[:5])
    assert Piece(finish_reason="length") in pieces


@pytest.mark.parametrize("prefill", [True, False])
async def test_going_on_with_a_cut_answer_gives_the_rest_of_it(prefill: bool) -> None:
    turns = [Turn("user", "Tell me everything")]
    whole = demo_answer("Tell me everything", 1)
    partial = " ".join(whole.split(" ")[:9])
    asked = continuing(turns, partial, prefill)
    assert asked[-1] == (Turn("assistant", partial) if prefill else Turn("user", GO_ON))
    pieces = await streamed(asked)
    assert continued(partial, [p.text for p in pieces]) == whole
