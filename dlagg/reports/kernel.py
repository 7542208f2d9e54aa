"""Kernel report: one row per (kernel, op that launched it) over the aggregated iterations.

A kernel is its short name, as in DLProf (``fft2d_r2c_32x32`` is one kernel whatever its template
instances); ``Long Kernel Name`` shows the demangled name of its first launch in the op, ``Uses TC``
is true when any of its launches ran on Tensor Cores. GPU time is the kernel's duration; API time
the duration of the CUDA call that launched it (kernels without a launching call have none: their
API figures are missing, not zero). Rows are ordered as DLProf's: by Op Name, then Kernel Name (then
Op ID and direction, for ops of the same name). With --ncu_report, each row also gets the roofline of
its ncu-profiled launches (``roofline.RATE_FIELDS``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.assign import op_id_order
from ..timeline.correlate import KERNEL
from .base import JobFigures, Report, merges, report
from .figures import (
    ANY,
    COUNT,
    KEY,
    SUM,
    Field,
    Table,
    derive_averages,
    merge_tables,
    stat_columns,
    stat_fields,
    summed_over,
)
from .roofline import rate_columns

GPU = stat_fields("gpu_time", "GPU Time", avg="Avg")
API = stat_fields("api_time", "API Time", avg="Avg")
FIELDS = (
    Field("kernel_name", "Kernel Name", merge=KEY),
    Field("op_id", "Op ID"),
    Field("op_name", "Op Name"),
    Field("direction", "Direction"),
    Field("uses_tc", "Uses TC", merge=ANY),
    *GPU,
    *API,
    Field("calls", "Calls", COUNT, merge=SUM),
    Field("long_kernel_name", "Long Kernel Name"),
    Field("api_calls", "Calls With A Launch API Call", COUNT, merge=SUM, csv=False),
    Field("op_key", "Op Key", merge=KEY, csv=False),
)
GROUP = ["short_id", "op_key", "op_id", "op_name", "direction"]


def dlprof_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows in DLProf's order: Op Name, Kernel Name, then Op ID and direction."""
    order = np.lexsort((frame["direction"].astype(str).to_numpy(), op_id_order(frame["op_id"]),
                        frame["kernel_name"].astype(str).to_numpy(), frame["op_name"].astype(str).to_numpy()))
    return frame.iloc[order].reset_index(drop=True)


@report("kernel", requires={"kernels"})
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per kernel and op: GPU and launch-API time (total/avg/min/max) and calls, over the aggregated iterations."""
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == KERNEL]
    ops = pd.DataFrame(ctx.op_columns(kernels.index, ("op_id", "op_name", "direction", "op_key")), index=kernels.index)
    has_api = kernels["api_start"].to_numpy() >= 0
    name_ids = kernels["name_id"].to_numpy()
    frame = pd.DataFrame({
        "short_id": ctx.short_name_ids(name_ids),
        "name_id": name_ids,
        "tc": ctx.uses_tc(name_ids),
        "gpu": (kernels["end"] - kernels["start"]).to_numpy(),
        "api": pd.array(np.where(has_api, kernels["api_end"] - kernels["api_start"], 0), dtype="Int64"),
    }, index=kernels.index)
    frame["api"] = frame["api"].mask(~has_api)
    frame = pd.concat([frame, ops], axis=1)
    grouped = frame.groupby(GROUP, sort=False, dropna=False, observed=True)
    calls = grouped.size()
    table = pd.DataFrame({
        **stat_columns(grouped["gpu"], GPU, calls),
        **stat_columns(grouped["api"], API),
        "calls": calls,
        "api_calls": grouped["api"].count(),
        "name_id": grouped["name_id"].first(),
        "uses_tc": grouped["tc"].any(),
    }).reset_index()
    strings = ctx.profile.strings
    table["kernel_name"] = strings.decode(table["short_id"]).to_numpy()
    table["long_kernel_name"] = strings.decode(table["name_id"]).to_numpy()
    table["api_time_avg_ns"] = table["api_time_avg_ns"].astype("Float64")
    frame = dlprof_order(table[[f.key for f in FIELDS]])
    fields = FIELDS
    if ctx.options.ncu_report is not None:
        fields, frame = rate_columns(ctx, fields, frame, ("kernel_name", "op_key"))
    warnings = () if len(kernels) else ("kernel: no kernel ran in the aggregated iterations",)
    return Report("kernel", "kernel", (Table("kernels", "Kernel Report", fields, frame),), warnings=warnings)


@merges("kernel")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Rows of the same kernel and op combine over ranks; times add up over the ranks' GPUs."""
    table = merge_tables([r.main for r in reports], lambda frame: derive_averages(
        frame, [("gpu_time_avg_ns", "gpu_time_total_ns", "calls"), ("api_time_avg_ns", "api_time_total_ns",
                                                                     "api_calls")]))
    frame = dlprof_order(job.renumber_ops(table.frame))
    frame["api_time_avg_ns"] = frame["api_time_avg_ns"].astype("Float64")
    warnings = tuple(dict.fromkeys(w for r in reports for w in r.warnings))
    return Report("kernel", "kernel", (summed_over(table.with_frame(frame), len(reports)),), warnings=warnings)
