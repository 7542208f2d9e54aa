"""Which push/pop ranges cross (dlagg/reader/validate.py), against the definition checked pair by pair."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlagg.reader.validate import crossing, nest

# Few distinct times and threads: ties (equal starts, equal ends, a range ending where another begins, ranges of no
# length) are the cases a fast check gets wrong.
ranges = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 8), st.integers(-1, 8)), max_size=14)


def crossing_pairs(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """Pairs of one thread where one range begins while the other is open and ends after it."""
    count = 0
    for i in range(len(tid)):
        for j in range(len(tid)):
            if i != j and tid[i] == tid[j] and start[i] < start[j] < end[i] < end[j]:
                count += 1
    return count


def arrays(rows: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tid, start, length = (np.array(column, dtype=np.int64) for column in zip(*rows, strict=True)) if rows else (
        np.empty(0, np.int64),) * 3
    return tid, start, start + length


@settings(max_examples=400)
@given(ranges)
def test_ranges_nest_exactly_when_no_pair_crosses(rows: list[tuple[int, int, int]]) -> None:
    tid, start, end = arrays(rows)
    order = np.lexsort((-end, start, tid))
    assert nest(tid[order], start[order], end[order]) == (crossing_pairs(tid, start, end) == 0)


@settings(max_examples=200)
@given(ranges)
def test_the_ranges_left_after_crossing_ones_are_taken_out_nest(rows: list[tuple[int, int, int]]) -> None:
    tid, start, end = arrays(rows)
    out = crossing(tid, start, end)
    kept = ~out
    assert crossing_pairs(tid[kept], start[kept], end[kept]) == 0
    assert out.any() == (crossing_pairs(tid, start, end) > 0)
