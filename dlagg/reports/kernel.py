"""Kernel report: one row per kernel (and op, once ops are known) over the aggregated iterations."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..timeline.correlate import KERNEL
from .base import Report, ReportContext, Section, report, stats, yes_no

KEY = ["name_id", "Op ID", "Op Name", "Direction"]


@report("kernel", requires={"kernels"})
def build(ctx: ReportContext) -> Report:
    """Per-kernel GPU and launch-API time (total/avg/min/max) and calls, over the aggregated iterations."""
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == KERNEL]
    ops = pd.DataFrame(ctx.op_columns(kernels.index, ("Op ID", "Op Name", "Direction")), index=kernels.index)
    has_api = kernels["api_start"].to_numpy() >= 0
    frame = pd.DataFrame({
        "name_id": kernels["name_id"].to_numpy(),
        "gpu": (kernels["end"] - kernels["start"]).to_numpy(),
        "api": pd.array(np.where(has_api, kernels["api_end"] - kernels["api_start"], 0), dtype="Int64"),
    }, index=kernels.index)
    frame["api"] = frame["api"].mask(~has_api)
    frame = pd.concat([frame, ops], axis=1)
    gpu = stats(frame, KEY, "gpu", "GPU Time")
    api = stats(frame, KEY, "api", "API Time")
    calls = frame.groupby(KEY, sort=False, dropna=False).size().rename("Calls")
    table = pd.concat([gpu, api, calls], axis=1).reset_index()
    table = table.sort_values(["Total GPU Time (ns)", "Calls"], ascending=[False, False], kind="stable")

    strings = ctx.profile.strings
    short_ids = ctx.profile.kernels.drop_duplicates("name_id").set_index("name_id")["short_name_id"]
    name_ids = table["name_id"]
    table.insert(0, "Kernel Name", strings.decode(name_ids.map(short_ids)).to_numpy())
    uses_tc = ctx.kernel_uses_tc.reindex(name_ids).fillna(False).to_numpy()
    table.insert(table.columns.get_loc("Direction") + 1, "Uses TC", yes_no(uses_tc))
    table["Long Kernel Name"] = strings.decode(name_ids).to_numpy()
    table = table.drop(columns="name_id").reset_index(drop=True)
    for column in ("Avg API Time (ns)",):
        table[column] = table[column].astype("Float64").round(1)
    warnings = () if len(kernels) else ("kernel: no kernel ran in the aggregated iterations",)
    return Report("kernel", "kernel", (Section("Kernel Report", table),), warnings=warnings)
