"""Detailed report: one row per op (grouped across iterations) with DLProf's §1.4 columns.

Figures per call are DLProf's (``op_stats``); No. Calls counts the op's calls in the aggregated
iterations. Rows are ordered by Op ID as DLProf 1.8's detailed report lists them: as plain strings
(``CUDADEVICESYNCHRONIZE_V3020_1``, ``CUDA_1``, ``CUDA_10``, ``CUDA_11``, ``CUDA_2``), so that a row-by-row
diff against DLProf's file lines up; a forward op before the backward ops that share its ID. (The kernel
report keeps its own order, by type and numeric ordinal.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.aggregate import first_non_empty, op_usage
from ..timeline.correlate import KERNEL
from .base import JobFigures, Report, merges, report
from .figures import ANY, COUNT, KEY, MIN, SUM, Field, Table, derive_averages, merge_tables, summed_over
from .op_stats import METRIC_FIELDS, average_pairs, metric_columns

FIELDS = (
    Field("op_id", "Op ID"),
    Field("op_name", "Op Name"),
    Field("direction", "Direction"),
    Field("op_type", "Op Type"),
    Field("calls", "No. Calls", COUNT, merge=SUM),
    Field("tc_eligible", "TC Eligible", merge=ANY),
    Field("using_tc", "Using TC", merge=ANY),
    *METRIC_FIELDS,
    Field("data_type", "Data Type"),
    Field("stack_trace", "Stack Trace"),
    Field("op_key", "Op Key", merge=KEY, csv=False),
    Field("forward_op_key", "Forward Op Key", csv=False),
    Field("order", "Order Of First Appearance", merge=MIN, csv=False),
)


def no_ops_warning(ctx: RankContext, name: str) -> tuple[str, ...]:
    """Why a report has no op rows (the ops' own warnings come first)."""
    if len(ctx.ops.instances):
        return (f"{name}: no op ran in the aggregated iterations",)
    return (f"{name}: no NVTX range below the key node defines an op; record with NVTX ranges "
            "(e.g. torch.autograd.profiler.emit_nvtx) to get per-op figures",)


def no_eligible_warning(ops_using_tc: int, kernel_tc_share: float | None = None) -> str:
    """Why Tensor Core Kernel Utilization % is 0.0; the same text from every report that notices it. The row
    stays in the summary (DLProf wrote it in every file), so the warning must say that 0.0 is the figure's
    definition here, not a measure of Tensor Core use: `kernel_tc_share` (the Tensor Core share of all kernel
    time, None when not known) tells how much Tensor Core work the run did."""
    text = ("no Tensor-Core-eligible op (convolution, matmul/linear, attention, RNN) ran a kernel in the aggregated "
            "iterations, so Tensor Core Kernel Utilization % (the TC share of those ops' kernel time) is 0.0 by "
            "definition, not a measure of Tensor Core use")
    if kernel_tc_share:
        text += (f"; {kernel_tc_share:.1f}% of all kernel time ran in Tensor Core kernels (All Kernels: Kernels "
                 "using TC; Tensor Core Kernel Duration %)")
    elif kernel_tc_share is not None:
        text += "; no kernel ran on Tensor Cores either (All Kernels: Kernels using TC)"
    if ops_using_tc:
        text += (f"; {ops_using_tc} op(s) of other types ran Tensor Core kernels (All Ops: Ops using TC; "
                 "Tensor Core Kernel Duration % counts all TC kernels)")
    return text


def kernel_tc_share(ctx: RankContext) -> float | None:
    """The Tensor Core share (%) of all kernel time in the aggregated iterations (None: no kernel ran), what
    `no_eligible_warning` quotes when no eligible op ran a kernel."""
    work = ctx.selected_work
    kernels = work["kind"].to_numpy() == KERNEL
    duration = (work["end"].to_numpy() - work["start"].to_numpy())[kernels].astype(np.float64)
    total = float(duration.sum())
    if not total:
        return None
    return 100.0 * float(duration[ctx.uses_tc(work["name_id"].to_numpy()[kernels])].sum()) / total


def empty(fields: tuple[Field, ...]) -> pd.DataFrame:
    return pd.DataFrame({f.key: pd.Series(dtype=object) for f in fields})


@report("detail", file_suffix="detailed")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per op and direction: calls, Tensor Core eligibility/use, CPU/GPU time, CPU overhead, GPU idle."""
    inst = ctx.op_instances
    ops = ctx.ops.ops
    if inst.empty:
        return Report("detail", "detailed", (Table("ops", "All Iterations", FIELDS, empty(FIELDS)),),
                      warnings=ctx.ops.warnings + no_ops_warning(ctx, "detail"))
    grouped = inst.groupby("key", sort=False)
    calls = grouped.size()
    table = pd.DataFrame({"calls": calls, **metric_columns(grouped, calls)})
    keys = table.index
    for column in ("op_id", "op_name", "direction", "op_type", "tc_eligible", "op_key", "forward_op_key", "order"):
        table[column] = ops[column].reindex(keys).to_numpy()
    table["tc_eligible"] = table["tc_eligible"].astype(bool)
    table["using_tc"] = op_usage(inst).reindex(keys).to_numpy(dtype=bool)
    table["data_type"] = first_non_empty(inst, "data_types").reindex(keys).fillna("").to_numpy()
    table["stack_trace"] = first_non_empty(inst, "stack").reindex(keys).fillna("").to_numpy()
    frame = by_op_id(table[[f.key for f in FIELDS]])
    return Report("detail", "detailed", (Table("ops", "All Iterations", FIELDS, frame),), warnings=ctx.ops.warnings)


def by_op_id(frame: pd.DataFrame) -> pd.DataFrame:
    """Op rows in DLProf's order: by Op ID as a plain string (DLProf 1.8's detailed report puts ``CUDA_10``
    before ``CUDA_2``), then first appearance (a forward op before the backward ops sharing its ID)."""
    ids = frame["op_id"].astype(str).to_numpy(dtype=str)
    order = np.lexsort((frame["order"].to_numpy(), ids))
    return frame.iloc[order].reset_index(drop=True)


def tc_kernel_times(ctx: RankContext) -> tuple[int, int]:
    """(kernel time, Tensor Core kernel time) of the TC-eligible ops in the aggregated iterations: dlagg's
    Tensor Core Kernel Utilization % is the second as a share of the first."""
    inst = ctx.op_instances
    eligible = inst[inst["tc_eligible"].to_numpy(dtype=bool)] if len(inst) else inst
    if eligible.empty:
        return 0, 0
    return int(eligible["kernel_time"].sum()), int(eligible["tc_kernel_time"].sum())


@merges("detail")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """The same op (by its key) combines over ranks: calls and totals add up, minima and maxima of the
    ranks', averages over all calls; Op IDs are numbered over the job."""
    table = merge_tables([r.main for r in reports], lambda frame: derive_averages(frame, average_pairs("calls")))
    frame = by_op_id(job.renumber_ops(table.frame))
    warnings = tuple(dict.fromkeys(w for r in reports for w in r.warnings))
    return Report("detail", "detailed", (summed_over(table.with_frame(frame), len(reports)),), warnings=warnings)
