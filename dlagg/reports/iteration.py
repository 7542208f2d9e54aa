"""Iteration report: one row per kernel instance in the aggregated iterations."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..timeline.correlate import KERNEL
from .base import Report, ReportContext, Section, report, yes_no


@report("iteration", requires={"kernels"})
def build(ctx: ReportContext) -> Report:
    """Every kernel launch of the aggregated iterations: iteration, timing, launch API, grid and block."""
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == KERNEL].sort_values(["iteration", "start"], kind="stable")
    rows = ctx.profile.kernels.iloc[kernels["row"].to_numpy()]
    ops = ctx.work_ops.loc[kernels.index]
    strings = ctx.profile.strings
    has_api = kernels["api_start"].to_numpy() >= 0
    api_start = pd.array(kernels["api_start"].to_numpy(), dtype="Int64")
    api_time = pd.array((kernels["api_end"] - kernels["api_start"]).to_numpy(), dtype="Int64")
    table = pd.DataFrame({
        "Iteration": kernels["iteration"].to_numpy(),
        "Op ID": ops["Op ID"].to_numpy(),
        "Op Name": ops["Op Name"].to_numpy(),
        "Direction": ops["Direction"].to_numpy(),
        "Op Type": ops["Op Type"].to_numpy(),
        "Kernel Name": strings.decode(rows["short_name_id"]).to_numpy(),
        "Device ID": kernels["device_id"].to_numpy(),
        "GPU Start Time (ns)": kernels["start"].to_numpy(),
        "GPU Duration (ns)": (kernels["end"] - kernels["start"]).to_numpy(),
        "API Call Start (ns)": np.where(has_api, api_start, pd.NA),
        "API Call Time (ns)": np.where(has_api, api_time, pd.NA),
        "Uses TC": yes_no(ctx.kernel_uses_tc.reindex(kernels["name_id"].to_numpy()).fillna(False).to_numpy()),
        "Grid X": rows["grid_x"].to_numpy(),
        "Grid Y": rows["grid_y"].to_numpy(),
        "Grid Z": rows["grid_z"].to_numpy(),
        "Block X": rows["block_x"].to_numpy(),
        "Block Y": rows["block_y"].to_numpy(),
        "Block Z": rows["block_z"].to_numpy(),
        "Data Types": ops["Data Types"].to_numpy(),
        "Input Shapes": ctx.input_shapes(kernels.index),
        "Long Kernel Name": strings.decode(rows["name_id"]).to_numpy(),
    })
    for column in ("API Call Start (ns)", "API Call Time (ns)"):
        table[column] = pd.array(table[column], dtype="Int64")
    return Report("iteration", "iteration", (Section("Iteration Report", table),))
