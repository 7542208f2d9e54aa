"""Iteration report: one row per kernel instance in the aggregated iterations."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..timeline.correlate import KERNEL
from .base import Report, ReportContext, Section, report, yes_no


def _nullable(values: np.ndarray, present: np.ndarray) -> pd.arrays.IntegerArray:
    """Integers with missing values where `present` is False (an empty CSV cell, JSON null)."""
    return pd.arrays.IntegerArray(np.where(present, values, 0).astype(np.int64), ~present)


@report("iteration", requires={"kernels"}, bulk=True)
def build(ctx: ReportContext) -> Report:
    """Every kernel launch of the aggregated iterations: iteration, timing, launch API, grid and block."""
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == KERNEL].sort_values(["iteration", "start"], kind="stable")
    rows = ctx.profile.kernels.iloc[kernels["row"].to_numpy()]
    ops = ctx.op_columns(kernels.index)
    strings = ctx.profile.strings
    has_api = kernels["api_start"].to_numpy() >= 0
    api_start = kernels["api_start"].to_numpy()
    start = kernels["start"].to_numpy()
    table = pd.DataFrame({
        "Iteration": kernels["iteration"].to_numpy(),
        "Op ID": ops["Op ID"],
        "Op Name": ops["Op Name"],
        "Direction": ops["Direction"],
        "Op Type": ops["Op Type"],
        "Kernel Name": strings.categorical(rows["short_name_id"].to_numpy()),
        "Device ID": kernels["device_id"].to_numpy(),
        "GPU Start Time (ns)": start,
        "GPU Duration (ns)": kernels["end"].to_numpy() - start,
        "API Call Start (ns)": _nullable(api_start, has_api),
        "API Call Time (ns)": _nullable(kernels["api_end"].to_numpy() - api_start, has_api),
        "Uses TC": yes_no(ctx.kernel_uses_tc.reindex(kernels["name_id"].to_numpy()).fillna(False).to_numpy()),
        "Grid X": rows["grid_x"].to_numpy(),
        "Grid Y": rows["grid_y"].to_numpy(),
        "Grid Z": rows["grid_z"].to_numpy(),
        "Block X": rows["block_x"].to_numpy(),
        "Block Y": rows["block_y"].to_numpy(),
        "Block Z": rows["block_z"].to_numpy(),
        "Data Types": ops["Data Types"],
        "Input Shapes": ctx.input_shapes(kernels.index),
        "Long Kernel Name": strings.categorical(rows["name_id"].to_numpy()),
    })
    return Report("iteration", "iteration", (Section("Iteration Report", table),))
