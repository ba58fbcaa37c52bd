"""Continue's prefix rule (shared/continuation.py): the text so far is the start of the result,
byte for byte, and a continuation that repeats it (whole, or its end) is trimmed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.continuation import MIN_OVERLAP, Continuation, continued

TEXT = st.text(alphabet="ab .\n", max_size=60)
NEW = st.text(alphabet="xyz ", min_size=1, max_size=30).filter(lambda s: s[0] in "xyz")  # (no letter of TEXT's)


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    at = sorted({min(c, len(text)) for c in cuts})
    return [text[i:j] for i, j in zip([0, *at], [*at, len(text)], strict=True)]


@given(TEXT, TEXT, st.lists(st.integers(0, 80), max_size=6))
def test_the_result_is_the_same_however_the_stream_is_cut(prefix: str, output: str, cuts: list[int]) -> None:
    assert continued(prefix, pieces_of(output, cuts)) == continued(prefix, [output])


@given(TEXT, TEXT)
def test_the_text_so_far_starts_the_result_and_only_a_start_of_the_continuation_is_dropped(prefix: str, output: str) -> None:
    result = continued(prefix, [output])
    assert result.startswith(prefix)
    assert output.endswith(result[len(prefix) :])


@given(st.text(alphabet="ab .\n", min_size=MIN_OVERLAP, max_size=60), st.data(), NEW)
def test_a_repeated_end_of_the_text_is_trimmed(prefix: str, data: st.DataObject, new: str) -> None:
    start = data.draw(st.integers(0, len(prefix) - MIN_OVERLAP))
    assert continued(prefix, [prefix[start:] + new]) == prefix + new


@given(TEXT.filter(bool), NEW)
def test_a_whole_repeat_is_trimmed_however_short(prefix: str, new: str) -> None:
    assert continued(prefix, [prefix, new]) == prefix + new
    assert continued(prefix, [prefix]) == prefix


@given(TEXT, NEW)
def test_new_text_passes_as_it_is(prefix: str, new: str) -> None:
    trim = Continuation(prefix)
    assert trim.feed(new) == new  # (nothing held back: it cannot be a repeat)
    assert trim.end() == ""


def test_examples() -> None:
    prefix = "The cat sat quietly on the warm mat and then"
    assert continued(prefix, [" it slept."]) == prefix + " it slept."
    assert continued(prefix, ["on the warm mat and then", " it slept."]) == prefix + " it slept."
    # A short overlap is chance, not a repeat: " then" again is the model's own word.
    assert continued(prefix, [" then then"]) == prefix + " then then"
    assert continued("", ["Anything"]) == "Anything"
