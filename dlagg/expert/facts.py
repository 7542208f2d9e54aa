"""Derived figures the detectors share, computed once per rank from a `RankContext`.

Everything here is vectorised over events; loops run over GPUs only. Per-iteration figures cover
the aggregated iterations (``--iter_start``..``--iter_stop``) and "typical" means the median over
them, so a warm-up step does not decide a finding about the steady state.

``gpu_rows`` is the device timeline the launch, sync and precision detectors reason about: every
kernel, memcpy and memset sorted by start on its device, with

    dur             GPU duration (ns)
    gap_before      idle time of the device before this op (since all earlier work on it ended)
    host_wait       the op's launch call returned only after the device had run dry, i.e. the
                    gap before it was spent waiting for the host to issue it
    next_queued     the next op on the device was already issued (launch call returned) when this
                    one ended: the device, not the host, was the bottleneck at that moment
    iteration       attributed by launch time, as in every other report
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..model import rows_where
from ..ops.assign import union_by_group
from ..timeline import intervals
from ..timeline.correlate import KERNEL
from .base import quoted

if TYPE_CHECKING:
    from ..context import RankContext


class Facts:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self.profile = ctx.profile
        self.iterations = ctx.iterations

    # ---- iterations ----

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        """The summary's per-iteration partition, aggregated iterations only."""
        bd = self.ctx.breakdown
        return bd[bd["aggregated"].to_numpy()].reset_index(drop=True)

    @property
    def aggregated(self) -> np.ndarray:
        return self.breakdown["iteration"].to_numpy()

    @property
    def iteration_text(self) -> str:
        its = self.iterations
        return f"{its.start}-{its.stop}" if its.stop > its.start else str(its.start)

    @cached_property
    def typical_iteration_ns(self) -> float:
        """Median cost of an aggregated iteration: its window, or the GPU work it launched when
        that is longer (the host can run many steps ahead of the GPU, so windows cut by the key
        node's host-side ends can be shorter than the GPU time each step really costs)."""
        if not len(self.breakdown):
            return 0.0
        window = float(np.median(self.breakdown["duration"].to_numpy()))
        return max(window, float(np.median(self.gpu_work_per_iteration)))

    @cached_property
    def gpu_work_per_iteration(self) -> np.ndarray:
        """Per aggregated iteration, the union length of the GPU work it launched (all devices)."""
        rows = self.ctx.selected_work.sort_values(["iteration", "start"], kind="stable")
        if rows.empty:
            return np.zeros(len(self.aggregated))
        iteration = rows["iteration"].to_numpy()
        start = rows["start"].to_numpy()
        reach = rows.groupby("iteration", sort=False)["end"].cummax().to_numpy()
        same = np.r_[False, iteration[1:] == iteration[:-1]]
        reach_before = np.r_[0, reach[:-1]]
        # Each op adds what it covers beyond everything earlier in its iteration.
        added = np.where(same, np.maximum(reach - np.maximum(reach_before, start), 0), reach - start)
        return self.per_iteration(added, iteration)

    def per_iteration(self, values: np.ndarray, iteration: np.ndarray) -> np.ndarray:
        """Sum of `values` per aggregated iteration (zero where none), in iteration order."""
        iteration = np.asarray(iteration, dtype=np.int64)
        first, count = self.iterations.start, len(self.aggregated)
        keep = (iteration >= first) & (iteration < first + count)
        return np.bincount(iteration[keep] - first, weights=np.asarray(values, dtype=np.float64)[keep],
                           minlength=count)

    def typical(self, values: np.ndarray, iteration: np.ndarray) -> float:
        """Median over the aggregated iterations of the per-iteration sums."""
        per = self.per_iteration(values, iteration)
        return float(np.median(per)) if len(per) else 0.0

    # ---- GPU timeline ----

    @cached_property
    def gpu_rows(self) -> pd.DataFrame:
        work = self.ctx.work
        if work.empty:
            return work.assign(dur=np.empty(0, np.int64), gap_before=np.empty(0, np.int64),
                               host_wait=np.empty(0, bool), next_queued=np.empty(0, bool))
        # by device and start, with only the columns the detectors read (a sorted copy of all of
        # `work` was the largest allocation of the expert systems)
        columns = ["kind", "row", "iteration", "start", "end", "device_id", "name_id", "api_start", "api_end",
                   "api_tid"]
        work = work[columns].sort_values(["device_id", "start", "end"], kind="stable")
        device = work["device_id"].to_numpy()
        start = work["start"].to_numpy()
        end = work["end"].to_numpy()
        api_end = work["api_end"].to_numpy()
        has_api = work["api_start"].to_numpy() >= 0
        reach = work.groupby("device_id", sort=False)["end"].cummax().to_numpy()
        same_device_before = np.r_[False, device[1:] == device[:-1]]
        reach_before = np.r_[0, reach[:-1]]
        gap_before = np.where(same_device_before, np.maximum(start - reach_before, 0), 0)
        host_wait = same_device_before & (gap_before > 0) & has_api & (api_end > reach_before)
        # The next op was issued before this one (and all earlier work) ended.
        next_api_end = np.r_[api_end[1:], -1]
        next_has_api = np.r_[has_api[1:], False]
        same_device_after = np.r_[device[1:] == device[:-1], False]
        next_queued = same_device_after & next_has_api & (next_api_end <= reach)
        return work.assign(dur=end - start, gap_before=gap_before, host_wait=host_wait, next_queued=next_queued)

    @cached_property
    def selected_rows(self) -> pd.DataFrame:
        rows = self.gpu_rows
        return rows_where(rows, self.iterations.in_selection(rows["iteration"].to_numpy())) if len(rows) else rows

    @cached_property
    def selected_kernels(self) -> pd.DataFrame:
        rows = self.selected_rows
        return rows[rows["kind"].to_numpy() == KERNEL]

    def gpu_bound_ns(self, rows: pd.DataFrame) -> float:
        """Typical per-iteration time of `rows` during which the device had more work queued.

        Making those ops faster shortens the step; the rest of their time the device would only
        wait longer for the host. Time, not a sum of durations: ops running at once (streams,
        devices) count once, so the figure never exceeds the iteration's GPU work.
        """
        queued = rows["next_queued"].to_numpy()
        iteration = rows["iteration"].to_numpy()[queued]
        first, count = self.iterations.start, len(self.aggregated)
        if count == 0:
            return 0.0
        group = np.where((iteration >= first) & (iteration < first + count), iteration - first, -1)
        per = union_by_group(group, rows["start"].to_numpy()[queued], rows["end"].to_numpy()[queued], count)
        return float(np.median(per))

    @cached_property
    def host_wait_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """GPU idle gaps spent waiting for the host to issue the next op (merged starts, ends)."""
        rows = self.gpu_rows
        wait = rows["host_wait"].to_numpy()
        start = rows["start"].to_numpy()[wait]
        return intervals.merge(start - rows["gap_before"].to_numpy()[wait], start)

    # ---- names ----

    @cached_property
    def runtime_names(self) -> pd.Series:
        """Runtime/driver API name per name id, without nsys' version suffix (``_v3020``)."""
        ids = np.unique(self.profile.runtime["name_id"].to_numpy())
        names = self.profile.strings.decode(pd.Series(ids)).str.replace(r"_v\d+$", "", regex=True)
        return pd.Series(names.to_numpy(), index=ids)

    def runtime_ids_matching(self, pattern: str) -> np.ndarray:
        names = self.runtime_names
        return names.index[names.str.fullmatch(pattern).to_numpy(dtype=bool)].to_numpy()

    @cached_property
    def kernel_labels(self) -> pd.Series:
        """Kernel name id -> the name users see in the kernel report (short name; the demangled
        name when the short one is a bare template wrapper such as CUTLASS' ``Kernel2``)."""
        kernels = self.profile.kernels.drop_duplicates("name_id")
        strings = self.profile.strings
        short = strings.decode(kernels["short_name_id"]).to_numpy()
        long = strings.decode(kernels["name_id"]).str.replace(r"^void ", "", regex=True).str.slice(0, 100).to_numpy()
        generic = pd.Series(short).str.fullmatch(r"(?i)(?:device_)?kernel\d*|").to_numpy(dtype=bool)
        return pd.Series(np.where(generic, long, short), index=kernels["name_id"].to_numpy())

    def top_kernels(self, kernels: pd.DataFrame, limit: int = 3, total: float | None = None) -> tuple[str, pd.Series]:
        """The kernels with most GPU time among `kernels`: ('name (share), ...', time per name id)."""
        time = kernels.groupby("name_id", sort=False)["dur"].sum().sort_values(ascending=False, kind="stable")
        whole = float(time.sum()) if total is None else total
        # (zero-length kernels only: no share to show, rather than a division by zero)
        shown = [f"{self.kernel_labels.get(i, str(i))}" + (f" ({100.0 * t / whole:.1f}%)" if whole > 0 else "")
                 for i, t in time.iloc[:limit].items()]
        more = len(time) - limit
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else ""), time

    def ops_of(self, rows: pd.DataFrame, limit: int = 5) -> str:
        """Ops that launched `rows` (rows of `gpu_rows`) as 'Op ID direction', most GPU time first; empty
        without op ranges. Durations are summed per (op, direction) code pair; only the pairs get a text."""
        if not len(rows) or self.ctx.ops.empty:
            return ""
        columns = self.ctx.op_columns(rows.index, ("op_id", "direction"))
        op_id, direction = columns["op_id"], columns["direction"]
        pair = np.asarray(op_id.codes, dtype=np.int64) * (len(direction.categories) + 1) + np.asarray(direction.codes)
        codes, inverse = np.unique(pair, return_inverse=True)
        time = np.bincount(np.ravel(inverse), weights=rows["dur"].to_numpy(dtype=np.float64), minlength=len(codes))
        per_op = len(direction.categories) + 1
        names = [f"{op_id.categories[c // per_op]} {direction.categories[c % per_op]}".strip()
                 for c in codes]  # distinct (op, direction) pairs
        per = pd.Series(time, index=pd.Index(names, dtype=object))
        per = per[per.index != ""]
        if per.empty:
            return ""
        per = per.groupby(level=0).sum().sort_values(ascending=False)
        return quoted(per.index.tolist(), limit=limit)
