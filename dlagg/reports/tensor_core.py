"""Tensor Core report: one row per Tensor-Core-eligible op with its TC and non-TC kernel time.

Times here are sums of kernel durations (memcpy/memset are not kernels and are left out), so
``Total GPU Time`` can differ from the detail report's GPU time, which is the union of all the
op's GPU work. TC Utilization = TC kernel time / total kernel time of the op.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..timeline.correlate import KERNEL
from .base import Report, ReportContext, Section, report, yes_no
from .detail import no_ops_warning

COLUMNS = ["Op ID", "Op Name", "Direction", "Op Type", "Uses TC", "Total GPU Time (ns)", "TC GPU Time (ns)",
           "Non-TC GPU Time (ns)", "TC Utilization (%)", "Total Kernel Count", "TC Kernel Count", "TC Kernel Names",
           "Non-TC Kernel Count", "Non-TC Kernel Names"]


def _kernel_names(ctx: ReportContext, keys: pd.Index) -> tuple[pd.Series, pd.Series]:
    """Per op key: distinct short names of its TC kernels and of its other kernels, sorted, ', '-joined."""
    work = ctx.work
    instance = ctx.ops.work_instance
    selected = ctx.op_instances
    mine = (work["kind"].to_numpy() == KERNEL) & np.isin(instance, selected.index.to_numpy())
    key = ctx.ops.instances["key"].to_numpy()[instance[mine]]
    rows = ctx.profile.kernels["short_name_id"].to_numpy()[work["row"].to_numpy()[mine]]
    tc = ctx.kernel_uses_tc.reindex(work["name_id"].to_numpy()[mine]).fillna(False).to_numpy(dtype=bool)
    pairs = pd.DataFrame({"key": key, "short": rows, "tc": tc}).drop_duplicates()
    pairs = pairs[pairs["key"].isin(keys)]
    pairs["name"] = ctx.profile.strings.decode(pairs["short"]).to_numpy()

    def joined(frame: pd.DataFrame) -> pd.Series:
        return frame.groupby("key")["name"].agg(lambda names: ", ".join(sorted(set(names))))

    return joined(pairs[pairs["tc"]]), joined(pairs[~pairs["tc"]])


@report("tensor", file_suffix="tensor_core", requires={"kernels"})
def build(ctx: ReportContext) -> Report:
    """Per Tensor-Core-eligible op: TC and non-TC kernel time, TC utilization, kernel counts and names."""
    inst = ctx.op_instances
    eligible = inst[inst["tc_eligible"].to_numpy(dtype=bool)]
    if eligible.empty:
        table = pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
        warning = ("tensor: no Tensor-Core-eligible op (convolution, matmul/linear, attention, RNN) ran in "
                   "the aggregated iterations",) if len(inst) else no_ops_warning(ctx, "tensor")
        return Report("tensor", "tensor_core", (Section("Tensor Core Report", table),), warnings=warning)
    grouped = eligible.groupby("key", sort=False)
    sums = grouped[["kernel_time", "tc_kernel_time", "kernels", "tc_kernels"]].sum()
    ops = ctx.ops.ops.reindex(sums.index)
    tc_names, other_names = _kernel_names(ctx, sums.index)
    total = sums["kernel_time"].to_numpy()
    tc_time = sums["tc_kernel_time"].to_numpy()
    table = pd.DataFrame({
        "Op ID": ops["op_id"].to_numpy(),
        "Op Name": ops["op_name"].to_numpy(),
        "Direction": ops["direction"].to_numpy(),
        "Op Type": ops["op_type"].to_numpy(),
        "Uses TC": yes_no(tc_time > 0),
        "Total GPU Time (ns)": total,
        "TC GPU Time (ns)": tc_time,
        "Non-TC GPU Time (ns)": total - tc_time,
        "TC Utilization (%)": np.round(100.0 * tc_time / np.where(total > 0, total, 1), 1),
        "Total Kernel Count": sums["kernels"].to_numpy(),
        "TC Kernel Count": sums["tc_kernels"].to_numpy(),
        "TC Kernel Names": tc_names.reindex(sums.index).fillna("").to_numpy(),
        "Non-TC Kernel Count": (sums["kernels"] - sums["tc_kernels"]).to_numpy(),
        "Non-TC Kernel Names": other_names.reindex(sums.index).fillna("").to_numpy(),
        "_first": ops["first_start"].to_numpy(),
    })
    table = table.sort_values(["Total GPU Time (ns)", "_first"], ascending=[False, True], kind="stable")
    table = table.drop(columns="_first").reset_index(drop=True)
    return Report("tensor", "tensor_core", (Section("Tensor Core Report", table),))
