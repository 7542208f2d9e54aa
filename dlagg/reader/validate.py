"""What the reader accepts of an export's rows, and the warnings for what it does not.

A damaged or hand-edited export (a table rebuilt without NOT NULL, a value typed as text, an end
of 2**63 - 1) must never reach the reports: one such row wraps a sum of durations to a negative
total or makes a utilisation read 119 %. So every row read is checked here, vectorised, before
any stage sees it:

- every value is an integer of its column's range (text, blobs and NaN are not; nor is a time with
  a fraction: nsys writes whole nanoseconds, and cutting the fraction off would keep a made-up time
  such as ``start = 1.5``; other reals are cut toward zero, as SQLite's CAST does);
- columns without a default (times, the thread of an API call, the NVTX event type) are not NULL;
- times are not negative, an end is not before its start, and both lie within the session: the
  duration ``ANALYSIS_DETAILS`` states (events are timed from the session start), else
  `MAX_TIME`;
- no row repeats another exactly (nsys never writes one event twice);
- NVTX push/pop ranges nest on their thread (`nested_ranges`): of two that cross, the one begun later
  is left out, and so is a range without an end begun inside a closed one (it cannot have been open
  when the capture stopped); the ops built on them could otherwise hold more CPU time than the profile.

A row that fails is dropped, except an NVTX range whose end lies after the session: that range was
never closed in the session, so it is treated like nsys's own unclosed ranges (it ends with the
profile). Every drop is counted by cause and table, and ``Flaws.warnings`` turns the counts into
one warning per cause naming the tables, the columns where that matters, and what was done.

Contract: `integers` converts one Arrow column and marks what it cannot convert; `time_checks`
and `duplicated` return masks over numpy columns; `Flaws` collects counts from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..nesting import nesting, thread_order

# Time columns: a real with a fraction there is damage, not a value to cut (`integers`' `whole`).
TIMES = ("start", "end")
# About 13 days in ns: the session bound when the export does not state its duration. Durations
# below it cannot wrap an int64 sum unless some 8,000 of them overlap.
MAX_TIME = 1 << 50
# Decimal text of an integer that surely fits int64 (a column typed TEXT by the driver because
# some of its values are text holds the others as their decimal form).
_INTEGER_TEXT = r"^-?[0-9]{1,18}$"
# A real as the driver writes it in a text-typed column (SQLite's own rendering: 934.5, 1.0e+300)
_REAL_TEXT = r"^-?[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?$"
# A stated session duration is not trusted when more than this share of the events end after it
# (then it is the duration that is damaged, not the events).
UNTRUSTED_DURATION_SHARE = 0.1

# cause -> (what the rows have, what was done); the order is the order of the checks and warnings
CAUSES = {
    "type": ("a value that is not an integer (text, a blob, a fraction)", "dropped"),
    "null": ("NULL where a value is required", "dropped"),
    "negative": ("a negative time", "dropped"),
    "reversed": ("an end before the start", "dropped"),
    "late": ("times after the end of the session", "dropped"),
    "open": ("an end after the end of the session", "ended them with the profile, like unclosed ranges"),
    "duplicate": ("an exact copy of another row", "dropped the copies"),
    # push/pop ranges of one thread form a stack (`nesting`): a range cannot end after the one it began in
    "crossing": ("an end after the end of the range they began in (push/pop ranges of a thread nest)",
                 "left them out"),
    "unclosed": ("no end although the range they began in was closed (push/pop ranges of a thread nest)",
                 "left them out"),
}
# causes whose warning counts NVTX ranges, not rows of any table
_RANGE_CAUSES = ("open", "crossing", "unclosed")


@dataclass(frozen=True)
class Converted:
    """One column as numpy: `bad` marks values present but unusable, `null` marks NULLs (None: none)."""

    values: np.ndarray
    bad: np.ndarray | None
    null: np.ndarray | None


def integers(array: pa.Array | pa.ChunkedArray, dtype: str, default: int | None, whole: bool = False) -> Converted:
    """`array` as integers of `dtype`; NULLs and unusable values hold `default` (0 when None).

    The driver types a column from its values: INTEGER when all are, DOUBLE when some are reals,
    STRING when some are text, BINARY when some are blobs (the integers then arrive as decimal
    text). Finite reals are cut toward zero (SQLite's CAST) and decimal text is converted, except
    that with `whole` (a time column) a real with a fraction is bad; anything else, or a value outside
    `dtype`'s range, is marked bad.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    fill = default if default is not None else 0
    n = len(array)
    null = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    kind = array.type
    bad: np.ndarray | None = None
    if pa.types.is_null(kind):
        return Converted(np.full(n, fill, dtype=dtype), None, null)
    if pa.types.is_integer(kind):
        values = (pc.fill_null(array, fill) if array.null_count else array).to_numpy()
    elif pa.types.is_floating(kind):
        values, ok = _cut_toward_zero(pc.fill_null(array, float(fill)).to_numpy(), fill, whole)
        bad = ~ok
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind):
        # (a blob among integers makes the driver type the column BINARY and hold the integers as
        # their decimal text: those still convert, the blobs do not)
        ok = pc.fill_null(pc.match_substring_regex(array, _INTEGER_TEXT), False)
        digits = pc.if_else(ok, array, pa.scalar(str(fill).encode() if pa.types.is_binary(kind)
                                                 or pa.types.is_large_binary(kind) else str(fill), kind))
        values = pc.cast(pc.cast(digits, pa.string()), pa.int64()).to_numpy()
        bad = ~ok.to_numpy(zero_copy_only=False)
        values, bad = _reals_in_text(array, values, bad, whole)
    else:  # anything else a damaged file may hold
        values = np.full(n, fill, dtype=np.int64)
        bad = np.ones(n, dtype=bool)
    if np.dtype(dtype) != values.dtype:
        info = np.iinfo(dtype)
        if len(values) and (values.min() < info.min or values.max() > info.max):
            outside = (values < info.min) | (values > info.max)
            bad = outside if bad is None else bad | outside
            values = np.where(outside, fill, values)
        values = values.astype(dtype, copy=False)
    if bad is not None and null is not None:
        bad &= ~null  # a NULL is a NULL, whatever the column's type
    if bad is not None and not bad.any():
        bad = None
    return Converted(values, bad, null)


def _reals_in_text(array: pa.Array, values: np.ndarray, bad: np.ndarray, whole: bool) -> tuple[np.ndarray, np.ndarray]:
    """Reals among text (a column typed STRING/BINARY by its text values holds its reals as their
    decimal text): taken as in a DOUBLE column."""
    real_text = bad & pc.fill_null(pc.match_substring_regex(array, _REAL_TEXT), False).to_numpy(zero_copy_only=False)
    if not real_text.any():
        return values, bad
    cut, finite = _cut_toward_zero(
        pc.cast(pc.cast(pc.filter(array, pa.array(real_text)), pa.string()), pa.float64()).to_numpy(), 0, whole)
    rows = np.flatnonzero(real_text)[finite]
    values, bad = values.copy(), bad.copy()
    values[rows] = cut[finite]
    bad[rows] = False
    return values, bad


def _cut_toward_zero(real: np.ndarray, fill: int, whole: bool) -> tuple[np.ndarray, np.ndarray]:
    """(`real` cut toward zero as SQLite's CAST does, `fill` where it cannot be an int64, or with `whole` where
    it has a fraction; which could)."""
    real = real.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(real) & (np.abs(real) < 2.0**63)
        if whole:
            ok &= real == np.trunc(real)
    return np.where(ok, np.trunc(real), fill).astype(np.int64), ok


def texts(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`array` as valid UTF-8 strings whatever SQLite held: numbers as their decimal text, invalid
    UTF-8 (nsys keeps some raw bytes; blobs) decoded with replacement characters, as sqlite3 would."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    kind = array.type
    if pa.types.is_null(kind) or (array.null_count == len(array) and not pa.types.is_string(kind)):
        return pa.nulls(len(array), pa.string())  # NULLs only: the driver may type them as anything
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        try:
            array.validate(full=True)
            return array.cast(pa.string()) if pa.types.is_large_string(kind) else array
        except pa.ArrowInvalid:  # rare: some raw bytes; decoded below
            pass
    elif not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return array.cast(pa.string())  # integer and real columns
    # decoded with replacement characters once per distinct value, in Python, then taken per row
    encoded = pc.dictionary_encode(array.cast(pa.binary()))
    decoded = [b.decode("utf-8", "replace") for b in encoded.dictionary.to_pylist()]
    return pa.array(decoded, type=pa.string()).take(encoded.indices)


def time_checks(start: np.ndarray, end: np.ndarray, end_open: np.ndarray | None,
                session_end: int) -> dict[str, np.ndarray]:
    """Masks of rows failing each time check, in check order ("negative", "reversed", "late"),
    and for ranges whose end may be open (`end_open` marks them), "open": an end past the session."""
    open_end = np.zeros(len(start), dtype=bool) if end_open is None else end_open
    closed = ~open_end
    negative = (start < 0) | (closed & (end < 0))
    reversed_ = closed & (end < start)
    late = (start > session_end) | (closed & (end > session_end) & (end_open is None))
    masks = {"negative": negative, "reversed": reversed_, "late": late}
    if end_open is not None:
        masks["open"] = closed & (end > session_end)
    return masks


_MIX = np.uint64(0x9E3779B97F4A7C15)


def duplicated(columns: Iterable[np.ndarray]) -> np.ndarray | None:
    """Rows equal in every column to an earlier row (None when there are none).

    A hash of each row finds the candidates (a row hashes to a 64-bit value; the sorted hashes show
    the repeated ones, a sort being many times faster than a hash table here); only rows whose hash
    repeats are compared column by column.
    """
    columns = [np.asarray(c) for c in columns]
    n = len(columns[0]) if columns else 0
    if n < 2:
        return None
    key = np.zeros(n, dtype=np.uint64)
    for values in columns:
        key ^= values.astype(np.uint64, copy=False)
        key *= _MIX
        key ^= key >> np.uint64(29)
    ordered = np.sort(key)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    del ordered
    if len(repeated) == 0:
        return None
    candidates = np.flatnonzero(np.isin(key, repeated))
    exact = pd.DataFrame({i: c[candidates] for i, c in enumerate(columns)}).duplicated(keep="first").to_numpy()
    if not exact.any():
        return None
    copies = np.zeros(n, dtype=bool)
    copies[candidates[exact]] = True
    return copies


class Flaws:
    """Counts of rows not taken as they were, by cause, table and column; safe to add to from threads."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._counts: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self.session_note = ""  # where the session bound came from, for the "late" warning

    def add(self, cause: str, table: str, rows: int, column: str = "") -> None:
        if rows <= 0:
            return
        with self._lock:
            key = (cause, table, column)
            self._counts[key] = self._counts.get(key, 0) + int(rows)

    def drop_rows(self, table: str, masks: Mapping[str, np.ndarray | None], column: str = "") -> np.ndarray | None:
        """Count each row under the first cause (in `masks` order) that marks it; the union of the masks."""
        union: np.ndarray | None = None
        for cause, mask in masks.items():
            if mask is None:
                continue
            fresh = mask if union is None else mask & ~union
            self.add(cause, table, int(np.count_nonzero(fresh)), column)
            union = mask.copy() if union is None else union | mask
        return union

    def count(self, cause: str | None = None) -> int:
        return sum(n for (c, _, _), n in self._counts.items() if cause is None or c == cause)

    def warnings(self) -> tuple[str, ...]:
        """One line per cause: how many rows of which tables (and columns), and what was done."""
        lines = []
        for cause, (what, done) in CAUSES.items():
            found = {(t, c): n for (k, t, c), n in self._counts.items() if k == cause}
            if not found:
                continue
            where = ", ".join(f"{table}{'.' + column if column else ''} {n:,}"
                              for (table, column), n in sorted(found.items()))
            note = f" ({self.session_note})" if cause in ("late", "open") and self.session_note else ""
            damaged = "" if cause == "open" else "; the export looks damaged, the reports leave these rows out"
            lines.append(f"{self.source}: {sum(found.values()):,} "
                         f"{'NVTX range(s)' if cause in _RANGE_CAUSES else 'row(s)'} with {what}{note}: {done} "
                         f"(per table: {where}){damaged}")
        return tuple(lines)


# What each report loses without a table that a normal CUDA + NVTX recording has. (No OSRT_API
# table is usual, osrt is not always traced: docs/reports.md says IO is measured only when it is.)
MISSING_TABLE = {
    "runtime": ("CUDA API calls", "kernels and copies have no launch call: their CPU (API) times are 0, they are "
                "placed in iterations by their own start, ops get no GPU work (detail, op_type, group_node, "
                "tensor reports), the summary's CPU Duration counts NVTX ranges only and the launch-bound "
                "check does not run"),
    "nvtx": ("NVTX ranges", "no key node can cut iterations (the profile is one iteration) and there are no ops: "
             "the detail, op_type, group_node and tensor reports are empty, kernels have no op and "
             "Dataloader Duration % is 0; record with 'nsys profile -t cuda,nvtx'"),
}


def missing_table_warnings(source: str, present: Mapping[str, str], has_gpu_work: bool) -> tuple[str, ...]:
    """Warnings for the optional tables the export lacks, with what each report loses."""
    from . import schema

    physical = {t.name: t.sources[-1] for t in schema.EVENT_TABLES}
    lines = []
    for name, (what, loss) in MISSING_TABLE.items():
        if name in present:
            continue
        if name == "runtime" and not has_gpu_work:
            continue  # no CUDA at all: the reports needing kernels say so themselves
        lines.append(f"{source}: no {physical[name]} table ({what}): {loss}")
    return tuple(lines)


def _last_above(values: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """For each i, the last index m < i with ``values[m] > bound[i]`` (-1 when none).

    Over the maxima of aligned blocks (sizes 1, 2, 4, ...; 2n values in all): a query skips leftwards
    over whole blocks whose maximum is not above its bound (one step per set bit of i), then goes down
    the first block that is, right half first. All queries move together: steps are looped, not events.
    """
    n = len(values)
    width = 1 << max(n - 1, 0).bit_length()  # padded to a power of two: every block has two halves
    levels = [np.r_[values.astype(np.int64), np.full(width - n, np.iinfo(np.int64).min)]]
    while len(levels[-1]) > 1:
        levels.append(np.maximum(levels[-1][0::2], levels[-1][1::2]))
    offsets = np.r_[0, np.cumsum([len(level) for level in levels])]
    flat = np.concatenate(levels)
    at = np.arange(n, dtype=np.int64)  # first the end of what is left to search, then the block found
    level = np.zeros(n, dtype=np.int64)
    found = np.zeros(n, dtype=bool)
    active = at > 0
    while active.any():  # one step per set bit: at most log2(n)
        q = np.flatnonzero(active)
        k = np.log2(at[q] & -at[q]).astype(np.int64)  # the largest aligned block ending at at[q]
        block = (at[q] >> k) - 1
        hit = flat[offsets[k] + block] > bound[q]
        found[q[hit]], level[q[hit]], at[q[hit]] = True, k[hit], block[hit]
        at[q[~hit]] -= np.left_shift(1, k[~hit])
        active[q] = ~hit & (at[q] > 0)
    q = np.flatnonzero(found & (level > 0))
    while len(q):  # down the blocks found: at most log2(n) steps
        k = level[q] - 1
        right = 2 * at[q] + 1
        at[q] = np.where(flat[offsets[k] + right] > bound[q], right, right - 1)
        level[q] = k
        q = q[k > 0]
    return np.where(found, at, -1)


def nest(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> bool:
    """Whether ranges grouped by thread, each by (start, longest first), nest on each thread: no range begins
    while another of its thread is open (ends after the start) and ends after it (dlagg/nesting.py says how).
    A range of no length (or less) never crosses nor encloses another, so only the others are looked at."""
    positive = end > start
    t, s, e = (tid, start, end) if positive.all() else (tid[positive], start[positive], end[positive])
    bounds = np.r_[np.flatnonzero(np.r_[True, t[1:] != t[:-1]]), len(t)] if len(t) else np.zeros(1, dtype=np.int64)
    return nesting(s, e, [(0, int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]).nested


def _crossing_round(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """One round of `crossing`: the ranges to leave out of the crossing pairs found, None when none is.

    Ranges sorted by thread, then (start, longest first); a range's stack top is the range of its thread
    begun last before it and still open at its start (for nested ranges: the innermost enclosing one).
    A range ending after its stack top crosses it. If none does, the ranges nest (of a crossing pair,
    the later's stack top either is the earlier or crosses it itself, begun earlier: some pair shows).
    """
    order, _ = thread_order(tid, start, end)
    t, s, e = tid[order], start[order], end[order]
    if nest(t, s, e):  # what any whole profile gives: confirmed in a few sorts, without the searches below
        return None
    first = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    thread_start = np.repeat(first, np.diff(np.r_[first, len(t)]))
    top = _last_above(e, s)
    child = np.flatnonzero((top >= thread_start) & (np.take(e, top, mode="clip") < e))
    if len(child) == 0:
        return None
    # The range begun later is left out: a range pushed inside another is popped before it, so of the
    # two it is the one whose end cannot be. Pairs whose parent does not cross its own stack top go
    # first: a late end makes its range cross the ranges begun after it too, and those (innocent) are
    # spared once it is out (the next round looks again).
    crosses_own = np.zeros(len(t), dtype=bool)
    crosses_own[child] = True
    child = child[~crosses_own[top[child]]]
    marked = np.zeros(len(t), dtype=bool)
    marked[order[child]] = True
    return marked


def crossing(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Push/pop ranges to leave out so that those left nest on each thread (a range begun inside another
    ends inside it): of two that cross, the one begun later (`_crossing_round`). Rounds until nothing
    crosses; each takes out at least one range."""
    out = np.zeros(len(start), dtype=bool)
    kept = np.arange(len(start))
    marked = _crossing_round(tid, start, end)
    while marked is not None:  # rounds, not events
        out[kept[marked]] = True
        kept = np.flatnonzero(~out)
        marked = _crossing_round(tid[kept], start[kept], end[kept])
    return out


def nested_ranges(nvtx: pd.DataFrame, profile_end: int, flaws: Flaws, table: str) -> pd.DataFrame:
    """The NVTX frame with ranges left open (no end, or one after the session) ending with the profile,
    and without the push/pop ranges that then do not nest (`crossing`): those without an end are counted
    as "unclosed" (an unclosed range inside a closed one cannot be, its end is what is missing), the
    others as "crossing". Drops the frame's ``pushpop`` column, which only this check reads."""
    start, end, tid = nvtx["start"].to_numpy(), nvtx["end"].to_numpy(), nvtx["global_tid"].to_numpy()
    open_end = end < start  # unclosed ranges (NULL end) read as NO_ID
    frame = nvtx.drop(columns="pushpop")
    if open_end.any():
        end = np.where(open_end, profile_end, end)
        frame = frame.assign(end=end.astype(nvtx["end"].dtype, copy=False))
    pushpop = nvtx["pushpop"].to_numpy()
    if pushpop.all():  # (as in most profiles: no copies of the columns)
        out = crossing(tid, start, end)
    else:
        rows = np.flatnonzero(pushpop)
        out = np.zeros(len(start), dtype=bool)
        out[rows] = crossing(tid[rows], start[rows], end[rows])
    if not out.any():
        return frame
    drop = out
    flaws.add("unclosed", table, int(np.count_nonzero(drop & open_end)))
    flaws.add("crossing", table, int(np.count_nonzero(drop & ~open_end)))
    return frame[~drop].reset_index(drop=True)
