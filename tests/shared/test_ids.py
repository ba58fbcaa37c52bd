from __future__ import annotations

import os
import uuid

from hypothesis import given
from hypothesis import strategies as st

from shared.ids import Uuid7Generator, uuid7_time_ms


@given(st.lists(st.integers(min_value=0, max_value=2**48 - 2), min_size=1, max_size=50))
def test_ids_are_version_7_and_sort_in_creation_order(clock_values: list[int]) -> None:
    ticks = iter(sorted(clock_values))
    generate = Uuid7Generator(lambda: next(ticks), os.urandom)
    made = [generate() for _ in clock_values]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    for value in made:
        parsed = uuid.UUID(value)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_the_timestamp_is_the_clock_and_survives_a_clock_going_back() -> None:
    ticks = iter([1_000, 1_000, 999, 2_000])
    generate = Uuid7Generator(lambda: next(ticks), os.urandom)
    made = [generate() for _ in range(4)]
    assert [uuid7_time_ms(v) for v in made] == [1_000, 1_000, 1_000, 2_000]
    assert made == sorted(made)


def test_a_full_millisecond_borrows_the_next() -> None:
    generate = Uuid7Generator(lambda: 5, os.urandom)
    made = [generate() for _ in range(5000)]
    assert made == sorted(made) and len(set(made)) == 5000
    assert uuid7_time_ms(made[-1]) > 5
