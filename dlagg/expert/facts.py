"""Derived figures the detectors share, computed once per rank from a `RankContext`.

Everything here is vectorised over events; loops run over GPUs only. Per-iteration figures cover
the aggregated iterations (``--iter_start``..``--iter_stop``) and "typical" means the median over
them, so a warm-up step does not decide a finding about the steady state.

``gpu_rows`` is the device timeline the launch, sync and precision detectors reason about: every
kernel, memcpy and memset (a "GPU row"; "op" means an NVTX op here as everywhere, the reports' Ops
column) sorted by start on its device, with

    dur             GPU duration (ns)
    gap_before      idle time of the device before this row (since all earlier work on it ended)
    host_wait       the row's launch call returned only after the device had run dry, i.e. the
                    gap before it was spent waiting for the host to issue it
    next_queued     the next row on the device was already issued (launch call returned) when this
                    one ended: the device, not the host, was the bottleneck at that moment
    host_blocked    when this row ended, a thread of its process was waiting for the GPU in a
                    synchronising call (``blocking_calls``): the host could go on only after it
    iteration       attributed by launch time, as in every other report

A GPU row is on the step's critical path ("GPU-bound") where it is ``next_queued`` or
``host_blocked``: making it faster then shortens the step (a synchronous run, which waits for
every kernel, is all critical path); elsewhere the device would only wait longer for the host.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..model import rows_where
from ..ops.assign import union_by_group
from ..reader.schema import PID_MASK
from ..timeline import intervals
from ..timeline.correlate import KERNEL
from .base import quoted

# Kernels of torch.compile's Inductor backend (and hand-written Triton): triton_poi_/triton_red_/...
TRITON_KERNEL = r"(?i)^(?:void )?triton_|^triton"
GRAPH_LAUNCH_CALL = r"cu(?:da)?GraphLaunch"

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

    @cached_property
    def cpu_side(self) -> np.ndarray:
        """CPU-side time of each aggregated iteration (key-node instance to key-node instance)."""
        its = self.iterations
        return its.cpu_times[its.start:its.stop + 1].astype(np.float64)

    @property
    def iteration_text(self) -> str:
        its = self.iterations
        return f"{its.start}-{its.stop}" if its.stop > its.start else str(its.start)

    @property
    def iterations_label(self) -> str:
        """'iterations 2-22', or 'iteration 0' for one."""
        its = self.iterations
        return f"iterations {self.iteration_text}" if its.stop > its.start else f"iteration {its.start}"

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
        # Each row adds what it covers beyond everything earlier in its iteration.
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
                   "api_tid", "global_pid"]
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
        # The next row was issued before this one (and all earlier work) ended.
        next_api_end = np.r_[api_end[1:], -1]
        next_has_api = np.r_[has_api[1:], False]
        same_device_after = np.r_[device[1:] == device[:-1], False]
        next_queued = same_device_after & next_has_api & (next_api_end <= reach)
        return work.assign(dur=end - start, gap_before=gap_before, host_wait=host_wait, next_queued=next_queued,
                           host_blocked=self._host_blocked(work["global_pid"].to_numpy(), end))

    def _host_blocked(self, pid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Whether a thread of process `pid` was inside a host-blocking call at time `t` (loop over processes)."""
        calls = self.blocking_calls
        out = np.zeros(len(t), dtype=bool)
        if calls.empty:
            return out
        call_pid = calls["global_tid"].to_numpy() & PID_MASK
        for process in np.unique(call_pid):  # processes, not events
            s, e = intervals.merge(calls["start"].to_numpy()[call_pid == process],
                                   calls["end"].to_numpy()[call_pid == process])
            if len(s) == 0:  # every call of the process zero-length: it blocked the host for no time
                continue
            mine = np.flatnonzero(pid == process)
            block = np.searchsorted(s, t[mine], side="left") - 1  # a call that began before t ...
            out[mine] = (block >= 0) & (t[mine] <= e[np.maximum(block, 0)])  # ... and had not returned
        return out

    @property
    def blocking_calls(self) -> pd.DataFrame:
        return self.ctx.blocking_calls

    @cached_property
    def selected_rows(self) -> pd.DataFrame:
        rows = self.gpu_rows
        return rows_where(rows, self.iterations.in_selection(rows["iteration"].to_numpy())) if len(rows) else rows

    @cached_property
    def selected_kernels(self) -> pd.DataFrame:
        rows = self.selected_rows
        return rows[rows["kind"].to_numpy() == KERNEL]

    def gpu_bound_ns(self, rows: pd.DataFrame) -> float:
        """Typical per-iteration time of `rows` on the step's critical path: while the device had more
        work queued, or while the host waited for it in a synchronising call.

        Making that work faster shortens the step; the rest of their time the device would only
        wait longer for the host. Time, not a sum of durations: rows running at once (streams,
        devices) count once, so the figure never exceeds the iteration's GPU work.
        """
        critical = rows["next_queued"].to_numpy() | rows["host_blocked"].to_numpy()
        iteration = rows["iteration"].to_numpy()[critical]
        first, count = self.iterations.start, len(self.aggregated)
        if count == 0:
            return 0.0
        group = np.where((iteration >= first) & (iteration < first + count), iteration - first, -1)
        per = union_by_group(group, rows["start"].to_numpy()[critical], rows["end"].to_numpy()[critical], count)
        return float(np.median(per))

    # ---- what the run already does ----

    @cached_property
    def kernel_names(self) -> pd.Series:
        """Demangled name per kernel-name id of the aggregated iterations' kernels."""
        ids = np.unique(self.selected_kernels["name_id"].to_numpy())
        return pd.Series(self.profile.strings.decode(pd.Series(ids)).to_numpy(dtype=object), index=ids)

    def _share_of_kernels(self, ids: np.ndarray) -> tuple[int, int]:
        """(kernels among `ids` launched in the aggregated iterations, all kernels launched there)."""
        kernels = self.selected_kernels
        return int(np.isin(kernels["name_id"].to_numpy(), ids).sum()), len(kernels)

    @cached_property
    def triton_kernels(self) -> tuple[int, int]:
        """(Triton kernels, all kernels) of the aggregated iterations: torch.compile (Inductor) already ran."""
        names = self.kernel_names
        short = pd.Series(self.kernel_labels.reindex(names.index).fillna("").to_numpy(dtype=object), dtype=object)
        triton = short.str.contains(TRITON_KERNEL, regex=True).to_numpy() | pd.Series(
            names.to_numpy(dtype=object), dtype=object).str.contains(TRITON_KERNEL, regex=True).to_numpy()
        return self._share_of_kernels(names.index.to_numpy()[triton])

    @cached_property
    def graph_launched(self) -> tuple[int, int]:
        """(kernels launched by a CUDA graph launch, all kernels) of the aggregated iterations."""
        kernels = self.selected_kernels
        ids = self.runtime_ids_matching(GRAPH_LAUNCH_CALL)
        api = self.ctx.work["api_name_id"].to_numpy()[self.ctx.work.index.get_indexer(kernels.index)]
        return int(np.isin(api, ids).sum()), len(kernels)

    @cached_property
    def emit_nvtx_ranges(self) -> int:
        """NVTX ranges recorded by PyTorch's emit_nvtx (their names carried seq/op_id/sizes)."""
        emit = self.profile.nvtx_names["emit"]
        ids = emit.index[emit.to_numpy(dtype=bool)].to_numpy()
        return int(np.isin(self.profile.nvtx["text_id"].to_numpy(), ids).sum()) if len(ids) else 0

    @cached_property
    def host_wait_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """GPU idle gaps spent waiting for the host to issue the next GPU row (merged starts, ends)."""
        rows = self.gpu_rows
        wait = rows["host_wait"].to_numpy()
        start = rows["start"].to_numpy()[wait]
        return intervals.merge(start - rows["gap_before"].to_numpy()[wait], start)

    # ---- names ----

    @property
    def runtime_names(self) -> pd.Series:
        return self.ctx.runtime_names

    def runtime_ids_matching(self, pattern: str) -> np.ndarray:
        return self.ctx.runtime_ids_matching(pattern)

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

    def short_ids(self, kernels: pd.DataFrame) -> np.ndarray:
        """Short-name id of each of these kernel rows: a kernel's identity (the kernel report's rows)."""
        return self.ctx.short_name_ids(kernels["name_id"].to_numpy())

    def top_kernels(self, kernels: pd.DataFrame, limit: int = 3, total: float | None = None) -> tuple[str, pd.Series]:
        """The kernels (by short name, as the kernel report) with most GPU time among `kernels`:
        ('name (share), ...', time per short-name id)."""
        short = self.short_ids(kernels)
        time = pd.Series(kernels["dur"].to_numpy(), index=short).groupby(level=0, sort=False).sum()
        time = time.sort_values(ascending=False, kind="stable")
        # a short name's label: the kernel report's (its first demangled name's label when the short one is generic)
        first = pd.Series(kernels["name_id"].to_numpy(), index=short).groupby(level=0, sort=False).first()
        labels = self.kernel_labels.reindex(first.to_numpy()).fillna("").to_numpy(dtype=object)
        label = pd.Series(labels, index=first.index)
        whole = float(time.sum()) if total is None else total
        # (zero-length kernels only: no share to show, rather than a division by zero)
        shown = [f"{label.get(i, str(i))}" + (f" ({100.0 * t / whole:.1f}%)" if whole > 0 else "")
                 for i, t in time.iloc[:limit].items()]
        more = len(time) - limit
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else ""), time

    def label_of(self, kernels: pd.DataFrame, short_id: int) -> str:
        """The kernel report's name of the kernel with this short-name id among `kernels`."""
        rows = kernels["name_id"].to_numpy()[self.short_ids(kernels) == short_id]
        return str(self.kernel_labels.get(rows[0], short_id)) if len(rows) else str(short_id)

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
