"""The GPU timeline of one typical iteration: figures for a picture of streams and NVTX ranges.

Contract: ``timeline_tables(ctx, per_iteration) -> (window, items)``, two `Table`s kept by the
summary report (``csv=False``: not in DLProf's CSV; in the JSON and drawn by the HTML page).
`per_iteration` is the summary's per-iteration frame (``iterations``), from which the iteration
is chosen.

- The iteration: among the aggregated ones, the one whose time is closest to their median (the
  earliest on a tie): a typical step, not the warm-up nor an outlier.
- ``timeline`` (items): one row per kernel, memcpy and memset *launched* in that iteration (the
  rule of every report: GPU work belongs to the iteration of its launching call), with its stream,
  op type and Tensor Core use, and one row per NVTX range overlapping the iteration's window on
  the threads that launched that work (every thread with ranges there when no GPU work was
  launched), with its nesting level (0 = outermost) on its thread. Times are ns from the
  iteration's start; work launched near the end may run past the window (offset + duration >
  the iteration time), and enclosing ranges start before it (negative offsets).
- Bounded: at most MAX_GPU_WORK GPU rows (the longest) and MAX_NVTX_RANGES NVTX rows (the
  outermost levels first, then the longest) whatever the profile; ``timeline_iteration`` (window)
  says how many of each there were and how many are kept.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.tree import Forest
from ..timeline.correlate import KERNEL, KIND_NAMES, memory_label
from .figures import COUNT, NS, Field, Table

# A picture of one iteration shows a few thousand rectangles at most (more are sub-pixel wide at
# any zoom a page offers); the bound keeps the JSON and the HTML page small for any profile.
MAX_GPU_WORK = 5000
MAX_NVTX_RANGES = 2000
NVTX = "nvtx"
TID_MASK = 0xFFFFFF  # nsys globalTid: the OS thread id is in the low 24 bits
CHOSEN_BY = "the aggregated iteration whose time is closest to their median"

WINDOW_FIELDS = (
    Field("iteration", "Iteration"),
    Field("chosen_by", "Chosen By"),
    Field("start_ns", "Start (ns)", NS),
    Field("end_ns", "End (ns)", NS),
    Field("duration_ns", "Iteration Time (ns)", NS),
    Field("gpu_work", "GPU Work Launched", COUNT),
    Field("gpu_work_shown", "GPU Work Kept", COUNT),
    Field("nvtx_ranges", "NVTX Ranges", COUNT),
    Field("nvtx_ranges_shown", "NVTX Ranges Kept", COUNT),
)
ITEM_FIELDS = (
    Field("iteration", "Iteration"),
    Field("kind", "Kind"),  # kernel, memcpy, memset or nvtx
    Field("name", "Name"),  # kernel short name, [CUDA memcpy HtoD], NVTX range name
    Field("op_type", "Op Type"),  # of the op that launched the work ('' when none is known; NVTX rows '')
    Field("uses_tc", "Uses TC"),
    Field("device_id", "Device ID"),  # GPU rows
    Field("stream_id", "Stream ID"),  # GPU rows
    Field("thread_id", "Thread ID"),  # OS thread id: of the launching call (GPU rows) or of the range
    Field("level", "NVTX Level"),  # NVTX rows: 0 = outermost range of its thread
    Field("start_offset_ns", "Start Offset (ns)", NS),
    Field("duration_ns", "Duration (ns)", NS),
)


def typical_iteration(per_iteration: pd.DataFrame) -> int:
    """The aggregated iteration closest to the median iteration time (the earliest on a tie)."""
    agg = per_iteration[per_iteration["aggregated"].to_numpy(dtype=bool)]
    durations = agg["duration_ns"].to_numpy(dtype=np.float64)
    return int(agg["iteration"].to_numpy()[np.argmin(np.abs(durations - np.median(durations)))])


def _nullable(values: np.ndarray, present: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.where(present, values, 0).astype(np.int64), ~present)


def _gpu_rows(ctx: RankContext, iteration: int, start: int) -> tuple[pd.DataFrame, int, np.ndarray]:
    """(rows, work launched, launching threads) of the GPU work of `iteration`."""
    work = ctx.work
    mine = work[work["iteration"].to_numpy() == iteration]
    launched = len(mine)
    threads = np.unique(mine["api_tid"].to_numpy()[mine["api_start"].to_numpy() >= 0])
    duration = (mine["end"] - mine["start"]).to_numpy()
    if launched > MAX_GPU_WORK:  # the longest: shorter ones are below a pixel in the picture anyway
        keep = np.sort(np.argsort(-duration, kind="stable")[:MAX_GPU_WORK])
        mine, duration = mine.iloc[keep], duration[keep]
    kind = mine["kind"].to_numpy()
    is_kernel = kind == KERNEL
    profile = ctx.profile
    names = np.empty(len(mine), dtype=object)
    rows = mine["row"].to_numpy()
    names[is_kernel] = profile.strings.decode(profile.kernels["short_name_id"].to_numpy()[rows[is_kernel]]).to_numpy()
    if (~is_kernel).any():
        names[~is_kernel] = memory_label(profile, mine[~is_kernel]).to_numpy(dtype=object)
    op_type = np.asarray(ctx.op_columns(mine.index, ["op_type"])["op_type"], dtype=object)
    has_api = mine["api_start"].to_numpy() >= 0
    frame = pd.DataFrame({
        "iteration": np.full(len(mine), iteration, dtype=np.int64),
        "kind": np.array([KIND_NAMES[k] for k in range(3)], dtype=object)[kind],
        "name": names,
        "op_type": op_type,
        "uses_tc": is_kernel & ctx.uses_tc(mine["name_id"].to_numpy()),
        "device_id": _nullable(mine["device_id"].to_numpy(), np.ones(len(mine), dtype=bool)),
        "stream_id": _nullable(mine["stream_id"].to_numpy(), np.ones(len(mine), dtype=bool)),
        "thread_id": _nullable(mine["api_tid"].to_numpy() & TID_MASK, has_api),
        "level": _nullable(np.zeros(len(mine), dtype=np.int64), np.zeros(len(mine), dtype=bool)),
        "start_offset_ns": mine["start"].to_numpy() - start,
        "duration_ns": duration,
    })
    return frame, launched, threads


def _nvtx_rows(ctx: RankContext, iteration: int, start: int, end: int,
               threads: np.ndarray) -> tuple[pd.DataFrame, int]:
    """(rows, ranges there) of the NVTX ranges overlapping (start, end] on `threads` (all when empty)."""
    nvtx = ctx.profile.nvtx
    tid = nvtx["global_tid"].to_numpy()
    r_start, r_end = nvtx["start"].to_numpy(), nvtx["end"].to_numpy()
    mask = (r_end >= r_start) & (r_start < end) & (r_end > start)
    if len(threads):
        mask &= np.isin(tid, threads)
    rng = nvtx[mask]
    count = len(rng)
    if count == 0:
        return pd.DataFrame(columns=[f.key for f in ITEM_FIELDS]), 0
    forest = Forest.build(rng["global_tid"].to_numpy(), rng["start"].to_numpy(), rng["end"].to_numpy())
    level = np.empty(count, dtype=np.int64)
    level[forest.order] = forest.depth
    duration = (rng["end"] - rng["start"]).to_numpy()
    keep = np.lexsort((-duration, level))[:MAX_NVTX_RANGES]  # outermost levels first, then the longest
    keep = np.sort(keep)
    rng, level, duration = rng.iloc[keep], level[keep], duration[keep]
    n = len(rng)
    frame = pd.DataFrame({
        "iteration": np.full(n, iteration, dtype=np.int64),
        "kind": np.full(n, NVTX, dtype=object),
        "name": ctx.profile.strings.decode(rng["text_id"].to_numpy()).to_numpy(dtype=object),
        "op_type": np.full(n, "", dtype=object),
        "uses_tc": np.zeros(n, dtype=bool),
        "device_id": _nullable(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)),
        "stream_id": _nullable(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)),
        "thread_id": _nullable(rng["global_tid"].to_numpy() & TID_MASK, np.ones(n, dtype=bool)),
        "level": _nullable(level, np.ones(n, dtype=bool)),
        "start_offset_ns": rng["start"].to_numpy() - start,
        "duration_ns": duration,
    })
    return frame, count


def timeline_tables(ctx: RankContext, per_iteration: pd.DataFrame) -> tuple[Table, Table]:
    """(timeline_iteration, timeline): see the module docstring."""
    iteration = typical_iteration(per_iteration)
    row = per_iteration[per_iteration["iteration"].to_numpy() == iteration].iloc[0]
    start, end = int(row["start_ns"]), int(row["end_ns"])
    gpu, launched, threads = _gpu_rows(ctx, iteration, start)
    nvtx, ranges = _nvtx_rows(ctx, iteration, start, end, threads)
    items = pd.concat([nvtx, gpu], ignore_index=True) if len(nvtx) else gpu
    items = items.sort_values(["start_offset_ns", "kind"], kind="stable").reset_index(drop=True)
    window = pd.DataFrame({
        "iteration": [iteration], "chosen_by": [CHOSEN_BY], "start_ns": [start], "end_ns": [end],
        "duration_ns": [end - start], "gpu_work": [launched], "gpu_work_shown": [len(gpu)],
        "nvtx_ranges": [ranges], "nvtx_ranges_shown": [len(nvtx)],
    })
    return (Table("timeline_iteration", "Timeline Iteration", WINDOW_FIELDS, window, csv=False),
            Table("timeline", "Timeline", ITEM_FIELDS, items[[f.key for f in ITEM_FIELDS]], csv=False))
