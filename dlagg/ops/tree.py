"""Nesting of NVTX ranges per thread, and interval stabbing: which range encloses a CPU call.

Contract: ``Forest.build(tid, start, end)`` sorts the ranges by (thread, start, longest first)
and gives every range its ``parent`` (innermost enclosing range of the same thread, -1 for none)
and ``depth`` (its nesting level; ``levels`` groups ranges by it); ``forest.innermost(tid, start,
end)`` gives, for each query interval, the innermost range of the same thread with ``range.start <=
start`` and ``range.end >= end`` (the nsys rule for attributing a CUDA call to NVTX ranges), or -1.

Push/pop ranges of one thread nest properly, which is what makes this vectorisable: depth is
"ranges started before me minus ranges ended before my start", the parent is the last earlier
range one level up, and the range enclosing a point is the last range started before it or one
of that range's ancestors. Ranges that cross instead of nesting (start/end ranges may) get no
parent, so they never swallow another range's calls (the order, depths and parents: dlagg/nesting.py).
Loops run over threads and nesting levels, never over events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nesting import nesting, small_codes, thread_order


@dataclass(frozen=True)
class Forest:
    order: np.ndarray  # position in the caller's arrays of each sorted range (int32 unless huge, as all indices)
    tid: np.ndarray  # sorted by (tid, start, -end); threads in order of first appearance
    start: np.ndarray
    end: np.ndarray
    parent: np.ndarray  # index into the sorted arrays, -1 for a top-level range
    depth: np.ndarray  # nesting level: 0 for a top-level range
    levels: tuple[np.ndarray, ...]  # sorted-range indices by depth, top level first (top-down passes)
    threads: tuple[tuple[int, int, int], ...]  # (tid, begin, end) of each thread's ranges
    # Whether the ranges nest on every thread (none crosses another): then every range has its parent, and
    # `innermost` finds the innermost of the ranges enclosing a call (with crossing ranges it may miss one).
    nested: bool = True

    @classmethod
    def build(cls, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> Forest:
        tid = np.asarray(tid, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        order, threads = thread_order(tid, start, end)
        # a permutation that increases everywhere is the identity: the rows are in order already
        # (its last element alone says nothing: rows are written by end, a late top-level range
        # with no children ends the table while earlier rows are out of start order)
        if len(threads) != 1 or not (order[1:] > order[:-1]).all():
            tid, start, end = tid[order], start[order], end[order]
        tree = nesting(start, end, threads)
        return cls(order, tid, start, end, tree.parent, tree.depth, tree.levels, tuple(threads), tree.nested)

    def __len__(self) -> int:
        return len(self.tid)

    def innermost(self, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Index (sorted order) of the innermost range enclosing each query interval, else -1."""
        tid = np.asarray(tid, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        found = np.full(len(tid), -1, dtype=np.int64)
        if len(self.tid) == 0 or len(tid) == 0:
            return found
        # queries grouped by forest thread (a stable radix sort on small codes keeps them in their
        # own order, usually by start, which keeps the binary searches below cache-friendly)
        own = np.array([t for t, _, _ in self.threads], dtype=np.int64)
        by_tid = np.argsort(own, kind="stable")
        pos = np.minimum(np.searchsorted(own[by_tid], tid), len(own) - 1)
        code = np.where(own[by_tid][pos] == tid, by_tid[pos], len(own))  # len(own): a thread without ranges
        q_order = np.argsort(small_codes(code), kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(code, minlength=len(own) + 1))]
        for k, (_, lo, hi) in enumerate(self.threads):  # threads, not events
            qlo, qhi = int(bounds[k]), int(bounds[k + 1])
            if qhi == qlo:
                continue
            rows = q_order[qlo:qhi]
            cand = np.searchsorted(self.start[lo:hi], start[rows], side="right") - 1 + lo
            cand[cand < lo] = -1
            # walk up while the candidate ended before the call did (at most the nesting depth)
            call_end = end[rows]
            todo = np.flatnonzero((cand >= 0) & (self.end[np.maximum(cand, 0)] < call_end))
            while len(todo):
                cand[todo] = self.parent[cand[todo]]
                todo = todo[(cand[todo] >= 0) & (self.end[np.maximum(cand[todo], 0)] < call_end[todo])]
            found[rows] = cand
        return found

    def propagate_or(self, bits: np.ndarray) -> np.ndarray:
        """Top-down: each range's bits OR'ed with those of all its ancestors."""
        value = np.asarray(bits).copy()
        for level in self.levels[1:]:
            parent = self.parent[level]
            nested = parent >= 0
            value[level[nested]] |= value[parent[nested]]
        return value

    def propagate(self, own: np.ndarray) -> np.ndarray:
        """Top-down: each range's value is its own where ``own >= 0``, else its parent's (e.g. "innermost
        head at or above me")."""
        value = np.asarray(own).copy()
        take = value < 0
        for level in self.levels[1:]:
            rows = level[take[level] & (self.parent[level] >= 0)]
            value[rows] = value[self.parent[rows]]
        return value
