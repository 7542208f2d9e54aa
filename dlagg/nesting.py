"""Ranges of threads as trees: their order, each one's depth and parent, and whether they nest.

Contract: ``thread_order(tid, start, end) -> (order, threads)`` sorts ranges by (thread, start, longest first),
threads in order of first appearance, and gives each thread's ``(tid, begin, end)`` slice of that order;
``nesting(start, end, threads) -> Nesting`` takes ranges in that order and gives each its depth (the ranges of its
thread open at its start), the ranges grouped by depth, its parent, and whether the ranges nest.

Depth is "ranges of the thread begun before me minus those ended by my start", and the candidate parent the last
range before me one level up: for ranges that nest, the innermost enclosing one. Ranges that cross fail the test
"the candidate encloses me" somewhere: at the first range (in order) that crosses an earlier one, the earlier ranges
nest, so its candidate is the innermost range open at its start, the one that ends first, and that ends before it
does. So the ranges nest exactly when every range below the top level keeps its candidate. Loops run over threads
and nesting levels, never over events. The reader checks push/pop ranges with it (reader/validate.py), op discovery
builds its forest on it (ops/tree.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def index_dtype(n: int) -> type[np.int32] | type[np.int64]:
    """Row indices as int32 when they fit: half the memory of int64 over millions of ranges."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def small_codes(codes: np.ndarray) -> np.ndarray:
    """Non-negative codes as int16 when they fit: numpy sorts 16-bit integers with a stable O(n) radix sort."""
    return codes.astype(np.int16) if len(codes) and codes.max() < np.iinfo(np.int16).max else codes


def thread_order(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Order by (thread, start, longest first), threads in order of appearance; and each thread's
    (tid, begin, end) slice of that order."""
    n = len(start)
    if n > 1 and (start[1:] > start[:-1]).all():  # nsys writes NVTX rows by start: nothing to sort
        by_start = np.arange(n, dtype=index_dtype(n))
        tid_by_start = tid
    else:
        by_start = np.lexsort((-end, start)).astype(index_dtype(n))
        tid_by_start = tid[by_start]
    if n == 0:
        return by_start, []
    if (tid_by_start == tid_by_start[0]).all():  # one thread
        return by_start, [(int(tid_by_start[0]), 0, n)]
    # thread codes in order of first appearance (np.unique sorts a copy; a hash factorize of
    # millions of rows costs a table several times the array)
    distinct = np.unique(tid_by_start)
    code = np.searchsorted(distinct, tid_by_start)
    first = np.full(len(distinct), n, dtype=np.int64)
    np.minimum.at(first, code, np.arange(n))
    appearance = np.argsort(first, kind="stable")
    threads = np.empty(len(distinct), dtype=np.int64)
    threads[appearance] = np.arange(len(distinct))
    threads = small_codes(threads[code])
    del code
    distinct = distinct[appearance]
    counts = np.bincount(threads, minlength=len(distinct))
    bounds = np.r_[0, np.cumsum(counts)]
    slices = [(int(t), int(lo), int(hi)) for t, lo, hi in zip(distinct, bounds[:-1], bounds[1:], strict=True)]
    return by_start[np.argsort(threads, kind="stable")], slices


def depth_levels(depth: np.ndarray) -> tuple[np.ndarray, ...]:
    """Indices grouped by depth, each group in index order (stable radix sort on small ints)."""
    if len(depth) == 0:
        return ()
    by_depth = np.argsort(small_codes(depth), kind="stable").astype(index_dtype(len(depth)))
    return tuple(np.split(by_depth, np.cumsum(np.bincount(depth))[:-1]))


@dataclass(frozen=True)
class Nesting:
    depth: np.ndarray  # int32: the ranges of its thread open at its start
    levels: tuple[np.ndarray, ...]  # range indices by depth, top level first (top-down passes)
    parent: np.ndarray  # the innermost enclosing range, -1 for a top-level range and one that crosses its candidate
    nested: bool  # no range below the top level lost its candidate: the ranges nest on every thread


def nesting(start: np.ndarray, end: np.ndarray, threads: Sequence[tuple[int, int, int]]) -> Nesting:
    """Depth, levels and parents of ranges in `thread_order`'s order (module docstring); `threads`: its slices."""
    depth = np.zeros(len(start), dtype=np.int32)
    for _, lo, hi in threads:  # threads, not events
        # ends are nearly in order already (nsys writes a range when it ends): timsort is fast
        closed = np.searchsorted(np.sort(end[lo:hi], kind="stable"), start[lo:hi], side="right")
        depth[lo:hi] = np.maximum(np.arange(hi - lo) - closed, 0)
    levels = depth_levels(depth)
    # parent = the last range before me one level up (in (tid, start) order, that is the open one)
    parent = np.full(len(start), -1, dtype=index_dtype(len(start)))
    for above, level in zip(levels, levels[1:], strict=False):  # nesting levels, not events
        pos = np.searchsorted(above, level, side="left") - 1
        parent[level] = np.where(pos >= 0, above[np.maximum(pos, 0)], -1)
    # Crossing (not nested) ranges and matches across a thread boundary get no parent. A parent
    # comes earlier in (tid, start) order, so it has started no later than its child when both
    # are of the child's thread, i.e. when it is not before the child's thread's first range.
    bad = np.take(end, parent, mode="clip") < end
    for _, lo, hi in threads:  # threads, not events
        bad[lo:hi] |= parent[lo:hi] < lo
    nested = not (bad & (depth > 0)).any()  # (a top-level range has no parent to lose)
    parent[bad] = -1
    return Nesting(depth, levels, parent, bool(nested))
