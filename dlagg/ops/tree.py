"""Nesting of NVTX ranges per thread, and interval stabbing: which range encloses a CPU call.

Contract: ``Forest.build(tid, start, end)`` sorts the ranges by (thread, start, longest first)
and gives every range its ``parent`` (innermost enclosing range of the same thread, -1 for none)
and ``depth``; ``forest.innermost(tid, start, end)`` gives, for each query interval, the
innermost range of the same thread with ``range.start <= start`` and ``range.end >= end`` (the
nsys rule for attributing a CUDA call to NVTX ranges), or -1.

Push/pop ranges of one thread nest properly, which is what makes this vectorisable: depth is
"ranges started before me minus ranges ended before my start", the parent is the last earlier
range one level up, and the range enclosing a point is the last range started before it or one
of that range's ancestors. Ranges that cross instead of nesting (start/end ranges may) get no
parent, so they never swallow another range's calls. Loops run over threads and nesting levels,
never over events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _thread_slices(tids: np.ndarray) -> list[tuple[int, int, int]]:
    """(tid, begin, end) of each run of equal values in sorted `tids`."""
    if len(tids) == 0:
        return []
    cuts = np.flatnonzero(np.diff(tids)) + 1
    begins = np.r_[0, cuts]
    ends = np.r_[cuts, len(tids)]
    return [(int(tids[b]), int(b), int(e)) for b, e in zip(begins, ends, strict=True)]


def _levels(depth: np.ndarray) -> tuple[np.ndarray, ...]:
    if len(depth) == 0:
        return ()
    by_depth = np.argsort(depth, kind="stable")
    cuts = np.searchsorted(depth[by_depth], np.arange(1, int(depth.max()) + 1))
    return tuple(np.split(by_depth, cuts))


@dataclass(frozen=True)
class Forest:
    order: np.ndarray  # position in the caller's arrays of each sorted range
    tid: np.ndarray  # sorted by (tid, start, -end)
    start: np.ndarray
    end: np.ndarray
    parent: np.ndarray  # index into the sorted arrays, -1 for a top-level range
    depth: np.ndarray  # 0 for a top-level range
    levels: tuple[np.ndarray, ...]  # sorted-range indices by depth, top level first (top-down passes)

    @classmethod
    def build(cls, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> Forest:
        tid = np.asarray(tid, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        order = np.lexsort((-end, start, tid))
        tid, start, end = tid[order], start[order], end[order]
        parent = np.full(len(tid), -1, dtype=np.int64)
        depth = np.zeros(len(tid), dtype=np.int64)
        for _, lo, hi in _thread_slices(tid):  # threads, not events
            s, e = start[lo:hi], end[lo:hi]
            local = np.arange(hi - lo)
            d = local - np.searchsorted(np.sort(e), s, side="right")
            d = np.maximum(d, 0)
            # parent = last earlier range one level up: search (depth - 1, index) in (depth, index) order
            n = hi - lo
            keys = d * n + local
            by_level = np.sort(keys)
            pos = np.searchsorted(by_level, (d - 1) * n + local, side="left") - 1
            found = (d > 0) & (pos >= 0)
            cand = np.where(found, by_level[np.maximum(pos, 0)] % n, -1)
            found &= np.where(found, by_level[np.maximum(pos, 0)] // n == d - 1, False)
            p = np.where(found, cand, -1)
            # crossing (not nested) ranges get no parent
            ok = p >= 0
            ok[ok] = (s[p[ok]] <= s[ok]) & (e[p[ok]] >= e[ok])
            parent[lo:hi] = np.where(ok, p + lo, -1)
            depth[lo:hi] = d
        return cls(order, tid, start, end, parent, depth, _levels(depth))

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
        slices = {t: (lo, hi) for t, lo, hi in _thread_slices(self.tid)}
        q_order = np.argsort(tid, kind="stable")
        for t, qlo, qhi in _thread_slices(tid[q_order]):  # threads, not events
            if t not in slices:
                continue
            lo, hi = slices[t]
            rows = q_order[qlo:qhi]
            cand = np.searchsorted(self.start[lo:hi], start[rows], side="right") - 1 + lo
            cand[cand < lo] = -1
            # walk up while the candidate ended before the call did (at most the nesting depth)
            todo = np.flatnonzero((cand >= 0) & (self.end[np.maximum(cand, 0)] < end[rows]))
            while len(todo):
                cand[todo] = self.parent[cand[todo]]
                todo = todo[(cand[todo] >= 0) & (self.end[np.maximum(cand[todo], 0)] < end[rows][todo])]
            found[rows] = cand
        return found

    def propagate(self, own: np.ndarray, inherit: np.ndarray | None = None) -> np.ndarray:
        """Top-down: each range's value is its own where `inherit` is False, else its parent's.

        With ``inherit=None`` a range inherits where ``own < 0`` (e.g. "innermost head above me").
        """
        value = np.asarray(own).copy()
        take = (value < 0) if inherit is None else np.asarray(inherit, dtype=bool)
        for level in self.levels[1:]:
            rows = level[take[level] & (self.parent[level] >= 0)]
            value[rows] = value[self.parent[rows]]
        return value
