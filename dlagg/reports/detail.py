"""Detailed report: one row per op (grouped across iterations) with DLProf's §1.4 columns.

Figures per call (reference §1.5, computed in ``dlagg.ops``): CPU time = the op's NVTX range
duration; GPU time = length of the union of its kernels, memcpys and memsets; GPU idle = span of
that work minus GPU time; CPU overhead = CPU time minus the union of the CUDA API calls made
inside the op on its thread. No. Calls counts the op's calls in the aggregated iterations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..ops.aggregate import first_non_empty, metric_stats, op_usage, stat_columns
from .base import Report, ReportContext, Section, report, yes_no

COLUMNS = ["Op ID", "Op Name", "Direction", "Op Type", "No. Calls", "TC Eligible", "Using TC", *stat_columns(),
           "Data Type", "Stack Trace"]


def no_ops_warning(ctx: ReportContext, name: str) -> tuple[str, ...]:
    """Why a report has no op rows (the ops' own warnings come first)."""
    if len(ctx.ops.instances):
        return (f"{name}: no op ran in the aggregated iterations",)
    return (f"{name}: no NVTX range below the key node defines an op; record with NVTX ranges "
            "(e.g. torch.autograd.profiler.emit_nvtx) to get per-op figures",)


@report("detail", file_suffix="detailed")
def build(ctx: ReportContext) -> Report:
    """Per op and direction: calls, Tensor Core eligibility/use, CPU/GPU time, CPU overhead, GPU idle."""
    inst = ctx.op_instances
    ops = ctx.ops.ops
    if inst.empty:
        table = pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
        return Report("detail", "detailed", (Section("All Iterations", table),),
                      warnings=ctx.ops.warnings + no_ops_warning(ctx, "detail"))
    table = metric_stats(inst, "key")
    keys = table.index
    table.insert(0, "No. Calls", inst.groupby("key", sort=False).size().reindex(keys).to_numpy())
    for column, source in (("Op Type", "op_type"), ("Direction", "direction"), ("Op Name", "op_name"),
                           ("Op ID", "op_id")):
        table.insert(0, column, ops[source].reindex(keys).to_numpy())
    table.insert(5, "TC Eligible", yes_no(ops["tc_eligible"].reindex(keys).to_numpy()))
    table.insert(6, "Using TC", yes_no(op_usage(inst).reindex(keys).to_numpy()))
    table["Data Type"] = first_non_empty(inst, "data_types").reindex(keys).fillna("").to_numpy()
    table["Stack Trace"] = first_non_empty(inst, "stack").reindex(keys).fillna("").to_numpy()
    table["_first"] = ops["first_start"].reindex(keys).to_numpy()
    table = table.sort_values(["Total GPU Time (ns)", "_first"], ascending=[False, True], kind="stable")
    table = table.drop(columns="_first").reset_index(drop=True)[COLUMNS]
    return Report("detail", "detailed", (Section("All Iterations", table),), warnings=ctx.ops.warnings)


def all_ops_table(ctx: ReportContext) -> pd.DataFrame:
    """The summary's All Ops section: GPU and CPU time summed over the detail report's op rows."""
    table = ctx.report("detail").table
    eligible = table["TC Eligible"].to_numpy() == "yes"
    using = table["Using TC"].to_numpy() == "yes"
    rows = []
    for label, mask in (("All ops", np.ones(len(table), dtype=bool)), ("Ops using TC", using),
                        ("Ops eligible for TC but not using", eligible & ~using),
                        ("All other ops", ~eligible & ~using)):
        part = table[mask]
        rows.append((label, int(part["Total GPU Time (ns)"].sum()), int(part["Total CPU Time (ns)"].sum()),
                     int(mask.sum())))
    return pd.DataFrame(rows, columns=["", "GPU Time (ns)", "CPU Time (ns)", "# Ops"])


def tc_kernel_utilization(ctx: ReportContext) -> float | None:
    """dlagg's Tensor Core Kernel Utilization %: share of the kernel time of TC-eligible ops (aggregated
    iterations) spent in Tensor Core kernels; None when no eligible op ran a kernel."""
    inst = ctx.op_instances
    eligible = inst[inst["tc_eligible"].to_numpy(dtype=bool)] if len(inst) else inst
    total = int(eligible["kernel_time"].sum()) if len(eligible) else 0
    if total == 0:
        return None
    return round(100.0 * int(eligible["tc_kernel_time"].sum()) / total, 1)
