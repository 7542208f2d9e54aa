"""Iteration report: one row per kernel launch in the aggregated iterations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from ..context import RankContext
from ..timeline.correlate import KERNEL
from .base import JobFigures, Report, merges, report
from .figures import NS, Field, Table, with_rank

FIELDS = (
    Field("iteration", "Iteration"),
    Field("op_id", "Op ID"),
    Field("op_name", "Op Name"),
    Field("direction", "Direction"),
    Field("op_type", "Op Type"),
    Field("kernel_name", "Kernel Name"),
    Field("device_id", "Device ID"),
    Field("gpu_start_ns", "GPU Start Time (ns)", NS),
    Field("gpu_duration_ns", "GPU Duration (ns)", NS),
    Field("api_start_ns", "API Call Start (ns)", NS),
    Field("api_duration_ns", "API Call Time (ns)", NS),
    Field("uses_tc", "Uses TC"),
    Field("grid_x", "Grid X"),
    Field("grid_y", "Grid Y"),
    Field("grid_z", "Grid Z"),
    Field("block_x", "Block X"),
    Field("block_y", "Block Y"),
    Field("block_z", "Block Z"),
    Field("data_types", "Data Types"),
    Field("input_shapes", "Input Shapes"),
    Field("long_kernel_name", "Long Kernel Name"),
    Field("op_key", "Op Key", csv=False),
)


def _nullable(values: np.ndarray, present: np.ndarray) -> pd.arrays.IntegerArray:
    """Integers with missing values where `present` is False (an empty CSV cell, JSON null)."""
    return pd.arrays.IntegerArray(np.where(present, values, 0).astype(np.int64), ~present)


@report("iteration", requires={"kernels"}, bulk=True)
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Every kernel launch of the aggregated iterations: iteration, timing, launch API, grid and block."""
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == KERNEL].sort_values(["iteration", "start"], kind="stable")
    rows = ctx.profile.kernels.iloc[kernels["row"].to_numpy()]
    ops = ctx.op_columns(kernels.index)
    strings = ctx.profile.strings
    has_api = kernels["api_start"].to_numpy() >= 0
    api_start = kernels["api_start"].to_numpy()
    start = kernels["start"].to_numpy()
    frame = pd.DataFrame({
        "iteration": kernels["iteration"].to_numpy(),
        **{key: ops[key] for key in ("op_id", "op_name", "direction", "op_type")},
        "kernel_name": strings.categorical(rows["short_name_id"].to_numpy()),
        "device_id": kernels["device_id"].to_numpy(),
        "gpu_start_ns": start,
        "gpu_duration_ns": kernels["end"].to_numpy() - start,
        "api_start_ns": _nullable(api_start, has_api),
        "api_duration_ns": _nullable(kernels["api_end"].to_numpy() - api_start, has_api),
        "uses_tc": ctx.uses_tc(kernels["name_id"].to_numpy()),
        **{key: rows[key].to_numpy() for key in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")},
        "data_types": ops["data_types"],
        "input_shapes": ctx.input_shapes(kernels.index),
        "long_kernel_name": strings.categorical(rows["name_id"].to_numpy()),
        "op_key": ops["op_key"],
    })
    return Report("iteration", "iteration", (Table("launches", "Iteration Report", FIELDS, frame),))


@merges("iteration")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Every rank's launches, rank by rank, with times on the job's clock (ranks aligned)."""
    offsets = job.offsets
    tables = []
    for built, rank in zip(reports, job.rank_numbers, strict=True):  # ranks, not events
        frame = built.main.frame
        shift = offsets.get(rank, 0)
        frame = frame.assign(gpu_start_ns=frame["gpu_start_ns"] + shift, api_start_ns=frame["api_start_ns"] + shift)
        tables.append(built.main.with_frame(job.renumber_ops(frame)))
    stacked = with_rank(tables, job.rank_numbers)
    fields = tuple(replace(f, title=f.title.replace("(ns)", "(ns, job clock)")) if f.key.endswith("start_ns") else f
                   for f in stacked.fields)
    return Report("iteration", "iteration", (Table(stacked.key, stacked.title, fields, stacked.frame),))
