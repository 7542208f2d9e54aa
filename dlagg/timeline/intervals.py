"""Vectorised interval arithmetic on int64 nanosecond arrays (numpy only, no Python loops).

Intervals are half-open ``[start, end)``; zero-length ones contribute nothing.
"""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint, non-touching ``(starts, ends)``."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return starts, ends
    if not (starts[1:] >= starts[:-1]).all():  # event tables come by start: often nothing to sort
        # stable sort is timsort here: runs already in order (merged sets, per-thread rows) cost O(n)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A new block begins where an interval starts after everything before it has ended.
    new_block = np.empty(len(starts), dtype=bool)
    new_block[0] = True
    new_block[1:] = starts[1:] > reach[:-1]
    block_starts = starts[new_block]
    last_of_block = np.r_[np.flatnonzero(new_block)[1:] - 1, len(starts) - 1]
    return block_starts, reach[last_of_block]


def coverage(merged_starts: np.ndarray, merged_ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the (already merged) union that lies before each time in `t`."""
    t = np.asarray(t, dtype=np.int64)
    if len(merged_starts) == 0:
        return np.zeros(len(t), dtype=np.int64)
    lengths = merged_ends - merged_starts
    before = np.concatenate(([0], np.cumsum(lengths)))
    k = np.searchsorted(merged_starts, t, side="right")  # intervals starting at or before t
    last = np.maximum(k - 1, 0)
    partial = np.clip(t - merged_starts[last], 0, lengths[last])
    return np.where(k > 0, before[last] + partial, 0)


def overlap_per_window(starts: np.ndarray, ends: np.ndarray, win_starts: np.ndarray,
                       win_ends: np.ndarray) -> np.ndarray:
    """For each window ``[win_start, win_end)``, the length of the intervals' union inside it."""
    s, e = merge(starts, ends)
    return coverage(s, e, win_ends) - coverage(s, e, win_starts)


def partition(classes: list[tuple[np.ndarray, np.ndarray]], win_starts: np.ndarray, win_ends: np.ndarray) -> np.ndarray:
    """Split each window's time among classes in priority order (first class wins an instant).

    Returns an array ``(len(classes) + 1, n_windows)``: time of each class, then the remainder.
    Uses |A1 ∪ ... ∪ Ak| - |A1 ∪ ... ∪ Ak-1| for class k, so each instant is counted once.
    """
    win_starts = np.asarray(win_starts, dtype=np.int64)
    win_ends = np.asarray(win_ends, dtype=np.int64)
    out = np.zeros((len(classes) + 1, len(win_starts)), dtype=np.int64)
    acc_s = np.empty(0, dtype=np.int64)
    acc_e = np.empty(0, dtype=np.int64)
    covered = np.zeros(len(win_starts), dtype=np.int64)
    for k, (s, e) in enumerate(classes):
        s, e = merge(s, e)  # the class alone first: the union of the classes before is two sorted runs
        acc_s, acc_e = merge(np.concatenate((acc_s, s)), np.concatenate((acc_e, e)))
        now = overlap_per_window(acc_s, acc_e, win_starts, win_ends)
        out[k] = now - covered
        covered = now
    out[-1] = (win_ends - win_starts) - covered
    return out
