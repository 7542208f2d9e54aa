"""Iteration report: one row per kernel launch in the aggregated iterations, in DLProf's columns and order.

Rows are ordered as DLProf's: by Op Name, Kernel Name (short name), then GPU start. ``Input Shapes``
are DLProf's labelled form for DLProf/PyProf dict markers (``<N:32, C:3, H:32, W:32>; <K:6, C:3,
R:3, S:3>; <6>``, a linear layer's ``<N:32, K:400>; <M:120, K:400>; <120>``) and emit_nvtx's ``sizes``
as recorded. ``Output Shapes`` are those the dict marker's arguments determine (a convolution with its
stride and padding recorded, a linear layer: docs/ops.md), as DLProf 1.8 filled them for PyTorch; empty
where they are not determined. ``Parameters`` is empty, as DLProf's PyTorch files have it. ``Long Kernel
Name`` is each launch's own demangled name (DLProf repeated one name for every launch of a short name
within an op: a bug not reproduced).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd

from ..context import RankContext
from ..model import LAUNCH_DIMS, categorical
from ..timeline.correlate import KERNEL
from .base import JobFigures, Report, merges, renumber_ops, report
from .figures import NS, RANK_FIELD, Field, Table, rank_first, stacked_table

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
    Field("parameters", "Parameters"),
    Field("output_shapes", "Output Shapes"),
    Field("long_kernel_name", "Long Kernel Name"),
    Field("op_key", "Op Key", csv=False),
)


def _nullable(values: np.ndarray, present: np.ndarray) -> pd.arrays.IntegerArray:
    """Integers with missing values where `present` is False (an empty CSV cell, JSON null)."""
    return pd.arrays.IntegerArray(np.where(present, values, 0).astype(np.int64), ~present)


def _small(values: np.ndarray) -> np.ndarray:
    """Integers as int32 when they all fit (a job's parent holds every rank's rows: docs/benchmarks.md), else as they
    are (a damaged export's grid size is shown as recorded, not wrapped)."""
    info = np.iinfo(np.int32)
    if len(values) and (values.min() < info.min or values.max() > info.max):
        return values
    return values.astype(np.int32)


@report("iteration", requires={"kernels"}, bulk=True, spill=("launches",))
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Every kernel launch of the aggregated iterations: iteration, timing, launch API, grid and block."""
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == KERNEL]
    rows = ctx.profile.kernels.iloc[kernels["row"].to_numpy()]
    ops = ctx.op_columns(kernels.index)
    strings = ctx.profile.strings
    short = strings.categorical(ctx.short_name_ids(kernels["name_id"].to_numpy()))
    # DLProf's order; categories are sorted, so codes order like the names (no string per row)
    order = np.lexsort((kernels["start"].to_numpy(), np.asarray(short.codes), np.asarray(ops["op_name"].codes)))
    kernels, rows, short = kernels.iloc[order], rows.iloc[order], short.take(order)
    ops = {key: column.take(order) for key, column in ops.items()}
    has_api = kernels["api_start"].to_numpy() >= 0
    api_start = kernels["api_start"].to_numpy()
    start = kernels["start"].to_numpy()
    frame = pd.DataFrame({
        "iteration": _small(kernels["iteration"].to_numpy()),
        **{key: ops[key] for key in ("op_id", "op_name", "direction", "op_type")},
        "kernel_name": short,
        "device_id": _small(kernels["device_id"].to_numpy()),
        "gpu_start_ns": start,
        "gpu_duration_ns": kernels["end"].to_numpy() - start,
        "api_start_ns": _nullable(api_start, has_api),
        "api_duration_ns": _nullable(kernels["api_end"].to_numpy() - api_start, has_api),
        "uses_tc": ctx.uses_tc(kernels["name_id"].to_numpy()),
        **{key: _small(rows[key].to_numpy()) for key in LAUNCH_DIMS},
        "data_types": ops["data_types"],
        "input_shapes": ctx.input_shapes(kernels.index),
        "parameters": categorical(np.full(len(kernels), -1, dtype=np.int64), []),
        "output_shapes": ctx.output_shapes(kernels.index),
        "long_kernel_name": strings.categorical(rows["name_id"].to_numpy()),
        "op_key": ops["op_key"],
    })
    return Report("iteration", "iteration", (Table("launches", "Iteration Report", FIELDS, frame),))


@merges("iteration")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Every rank's launches, rank by rank, with times on the job's clock (ranks aligned). Rows kept in files where
    the ranks were reduced (reports/spilled.py) stay there: the merged table says which files, and how each rank's
    rows become the job's when they are read."""
    tables = [r.main for r in reports]
    finish = partial(_on_job_clock, ranks=tuple(job.rank_numbers),
                     shifts=tuple(job.offsets.get(rank, 0) for rank in job.rank_numbers), op_ids=job.op_ids)
    fields = tuple(replace(f, title=f.title.replace("(ns)", "(ns, job clock)")) if f.key.endswith("start_ns") else f
                   for f in (RANK_FIELD, *tables[0].fields))
    return Report("iteration", "iteration", (stacked_table(tables, fields, finish),))


def _on_job_clock(frame: pd.DataFrame, source: int, ranks: tuple[int, ...], shifts: tuple[int, ...],
                  op_ids: pd.Series) -> pd.DataFrame:
    """The launches of the `source`-th rank as the job's report has them: the rank first, start times shifted to
    the job's clock, Op IDs numbered over the job."""
    shift = shifts[source]
    frame = frame.assign(gpu_start_ns=frame["gpu_start_ns"] + shift, api_start_ns=frame["api_start_ns"] + shift)
    return renumber_ops(rank_first(frame, source, ranks), op_ids)
