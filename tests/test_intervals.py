"""Properties of the vectorised interval helpers, checked against a brute-force timeline."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlagg.timeline import intervals

spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=25)


def arrays(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([p[0] for p in pairs], dtype=np.int64)
    return s, s + np.array([p[1] for p in pairs], dtype=np.int64)


def covered(pairs: list[tuple[int, int]], horizon: int = 300) -> np.ndarray:
    mask = np.zeros(horizon, dtype=bool)
    for s, length in pairs:
        mask[s : s + length] = True
    return mask


@given(spans)
def test_merged_length_equals_brute_force(pairs) -> None:
    s, e = arrays(pairs)
    merged_starts, merged_ends = intervals.merge(s, e)
    assert int((merged_ends - merged_starts).sum()) == covered(pairs).sum()
    assert int((merged_ends - merged_starts).sum()) <= int((e - s).sum())


@given(spans)
def test_merge_gives_sorted_disjoint_blocks(pairs) -> None:
    s, e = intervals.merge(*arrays(pairs))
    assert (e > s).all()
    assert (s[1:] > e[:-1]).all()
    assert covered(list(zip(s.tolist(), (e - s).tolist(), strict=True))).tolist() == covered(pairs).tolist()


# At least two distinct cuts: one window or more, so no case compares two empty lists.
cuts_st = st.lists(st.integers(0, 300), min_size=2, max_size=8, unique=True)


@given(spans, cuts_st)
def test_overlap_per_window(pairs, cuts) -> None:
    bounds = np.sort(np.array(cuts, dtype=np.int64))
    w_start, w_end = bounds[:-1], bounds[1:]
    assert len(w_start) >= 1
    mask = covered(pairs)
    got = intervals.overlap_per_window(*arrays(pairs), w_start, w_end)
    assert got.tolist() == [int(mask[a:b].sum()) for a, b in zip(w_start, w_end, strict=True)]


@settings(max_examples=60)
@given(st.lists(spans, min_size=1, max_size=4), cuts_st)
def test_partition_counts_each_instant_once_in_priority_order(classes, cuts) -> None:
    bounds = np.sort(np.array(cuts, dtype=np.int64))
    w_start, w_end = bounds[:-1], bounds[1:]
    parts = intervals.partition([arrays(c) for c in classes], w_start, w_end)
    assert (parts.sum(axis=0) == w_end - w_start).all()
    assert (parts >= 0).all()
    taken = np.zeros(300, dtype=bool)
    for k, c in enumerate(classes):
        mine = covered(c) & ~taken
        taken |= covered(c)
        assert parts[k].tolist() == [int(mine[a:b].sum()) for a, b in zip(w_start, w_end, strict=True)]
