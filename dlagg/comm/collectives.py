"""One rank's communication: its collective kernels and what each iteration spends on them.

Contract: ``rank_comm(ctx) -> RankComm``, computed where the rank's events are (a worker process);
only these small tables travel to the cross-rank reduce (``comm/match.py``).

Communication kernels are found by name (``COMM_RULES``, one rule table): NCCL's and RCCL's
``ncclDevKernel_*`` / ``ncclKernel_*``, and NVSHMEM's kernels. A collective's identity across ranks
does not depend on clocks: it is the k-th communication kernel of the same name on the same stream
(streams numbered by first use, since stream ids differ between processes) among the kernels
launched in the same iteration. Per kernel, the NCCL NVTX range that encloses its launching call
(``ncclAllReduce``) is kept when NCCL recorded one.

Per aggregated iteration (its window on the rank's own clock): compute kernel time (union of the
kernels that are not communication), communication kernel time (union of the communication
kernels), exposed communication (communication not overlapped by compute on the same GPU), and GPU
idle time (no kernel, copy or memset running). A rank with several GPUs is averaged over them.
The key node's sub-ranges (``data``, ``forward``, ...) are timed per iteration too, so the reduce
can say where a late rank loses its time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..context import RankContext
from ..model import rows_where
from ..ops.tree import Forest
from ..timeline import intervals
from ..timeline.correlate import KERNEL
from ..timeline.iterations import key_instances

# (pattern on the kernel's short name, library): communication kernels by name.
COMM_RULES = (
    (r"^nccl(?:Dev)?Kernel_", "NCCL/RCCL"),
    (r"^nccl", "NCCL/RCCL"),
    (r"^rccl", "RCCL"),
    (r"nvshmem", "NVSHMEM"),
)
_COMM = re.compile("|".join(f"(?:{p})" for p, _ in COMM_RULES), re.IGNORECASE)
# ncclDevKernel_AllReduce_Sum_f32_RING_LL -> AllReduce; ncclKernel_AllGather_RING_LL_Sum_int8_t -> AllGather
_OPERATION = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
# Text of the remainder of a key-node iteration not covered by any of its sub-ranges.
UNCOVERED = "(not in a sub-range)"


def is_comm_kernel(short_names: pd.Series) -> np.ndarray:
    """Boolean per kernel short name (call on distinct names)."""
    return short_names.astype(str).map(lambda n: bool(_COMM.search(n))).to_numpy(dtype=bool)


def operation(short_name: str) -> str:
    """The collective a communication kernel performs (AllReduce, AllGather, ...), or its name."""
    match = _OPERATION.match(short_name)
    return match.group(1) if match else short_name


# RankComm.iterations' columns; "kernels": time a kernel runs (GPU Utilization's), "blocked": the host's time in
# calls that wait for the GPU
ITERATION_COLUMNS = ("iteration", "duration", "compute", "comm", "exposed", "idle", "kernels", "blocked")


@dataclass(frozen=True)
class RankComm:
    """What the cross-rank reduce needs from one rank (rank clock, ns)."""

    collectives: pd.DataFrame  # iteration, name, stream, k, start, end, api_start, nvtx (one row per comm kernel)
    iterations: pd.DataFrame  # per aggregated iteration: ITERATION_COLUMNS
    parts: pd.DataFrame  # per aggregated iteration and key-node sub-range: iteration, part, time


def comm_kernel_mask(ctx: RankContext, work: pd.DataFrame) -> np.ndarray:
    """Rows of `work` (a subset of ctx.work) that are communication kernels."""
    kernels = ctx.profile.kernels
    is_kernel = work["kind"].to_numpy() == KERNEL
    out = np.zeros(len(work), dtype=bool)
    if not is_kernel.any():
        return out
    short = kernels["short_name_id"].to_numpy()[work["row"].to_numpy()[is_kernel]]
    distinct, inverse = np.unique(short, return_inverse=True)
    comm = is_comm_kernel(ctx.profile.strings.decode(distinct))
    out[is_kernel] = comm[np.ravel(inverse)]
    return out


def rank_comm(ctx: RankContext) -> RankComm:
    work = ctx.work
    comm = comm_kernel_mask(ctx, work)
    return RankComm(_collectives(ctx, work[comm]), _per_iteration(ctx, comm), _parts(ctx))


def _collectives(ctx: RankContext, rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.sort_values(["iteration", "start"], kind="stable")
    short = ctx.profile.kernels["short_name_id"].to_numpy()[rows["row"].to_numpy()]
    name = ctx.profile.strings.decode(short).to_numpy(dtype=object)
    stream = rows["stream_id"].to_numpy()
    first_use = pd.Series(rows["start"].to_numpy()).groupby(stream).min().sort_values(kind="stable")
    ordinal = pd.Series(np.arange(len(first_use)), index=first_use.index).reindex(stream).to_numpy()
    frame = pd.DataFrame({
        "iteration": rows["iteration"].to_numpy(),
        "name": name,
        "stream": ordinal,
        "start": rows["start"].to_numpy(),
        "end": rows["end"].to_numpy(),
        "api_start": rows["api_start"].to_numpy(),
        "nvtx": _nccl_ranges(ctx, rows),
        **_message(ctx, rows["row"].to_numpy()),
    })
    frame["k"] = frame.groupby(["iteration", "name", "stream"], sort=False).cumcount().to_numpy()
    return frame[frame["iteration"].to_numpy() >= 0].reset_index(drop=True)


def _message(ctx: RankContext, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per communication kernel (its row in the kernel frame): the message size in bytes (-1: not known), the
    ranks of its communicator (0: not known) and its process group ('' : not known), where the profile says them
    (a PyTorch profiler trace's collective args, ``reader/kineto.py``; an nsys export does not)."""
    kernels = ctx.profile.kernels
    if "comm_bytes" not in kernels.columns:
        return {"bytes": np.full(len(rows), -1, np.int64), "group_ranks": np.zeros(len(rows), np.int64),
                "group": np.full(len(rows), "", dtype=object)}
    return {"bytes": kernels["comm_bytes"].to_numpy()[rows], "group_ranks": kernels["comm_ranks"].to_numpy()[rows],
            "group": kernels["comm_group"].to_numpy(dtype=object)[rows]}


# The algorithm and protocol NCCL names at the end of its kernels' names: ..._RING_LL, ..._TREE_LL128, ..._NVLS_SIMPLE
_ALGORITHM = re.compile(r"_((?:RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)"
                        r"_(?:LL128|LL|SIMPLE))$")
# nccl-tests' bus bandwidth factor per collective for n ranks (its doc/PERFORMANCE.md), as (a, b) in
# a * (n - 1) / n + b: what each rank's link carries relative to the message, so that the figure compares with the
# link's own bandwidth.
BUS_FACTORS = {"AllReduce": (2.0, 0.0), "ReduceScatter": (1.0, 0.0), "AllGather": (1.0, 0.0), "AlltoAll": (1.0, 0.0),
               "Broadcast": (0.0, 1.0), "Reduce": (0.0, 1.0), "SendRecv": (0.0, 1.0)}


def algorithm(short_name: str) -> str:
    """NCCL's algorithm and protocol of a communication kernel (``RING_LL``), '' when its name does not say."""
    match = _ALGORITHM.search(short_name)
    return match.group(1) if match else ""


def bus_bandwidth(operation: str, size: np.ndarray, time_ns: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """nccl-tests' bus bandwidth in GB/s (bytes per ns): the message size over the time, times the collective's
    factor for its ranks; NaN where the size, the time or the factor is not known."""
    a, b = BUS_FACTORS.get(operation, (np.nan, np.nan))
    n = ranks.astype(np.float64)
    known = (size > 0) & (time_ns > 0) & (n > 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = size / time_ns * (a * (n - 1) / n + b)
    return np.where(known, value, np.nan)


def _nccl_ranges(ctx: RankContext, rows: pd.DataFrame) -> np.ndarray:
    """Name of the innermost NCCL-domain NVTX range enclosing each row's launching call ('' if none)."""
    out = np.full(len(rows), "", dtype=object)
    nccl = [d for d, name in ctx.profile.meta.domains.items() if name.upper().startswith(("NCCL", "RCCL"))]
    nvtx = ctx.profile.nvtx
    mine = nvtx[np.isin(nvtx["domain_id"].to_numpy(), nccl) & ~nvtx["crosses_thread"].to_numpy()]
    has_api = rows["api_start"].to_numpy() >= 0
    if mine.empty or not has_api.any():
        return out
    forest = Forest.build(mine["global_tid"].to_numpy(), mine["start"].to_numpy(), mine["end"].to_numpy())
    hit = forest.innermost(rows["api_tid"].to_numpy()[has_api], rows["api_start"].to_numpy()[has_api],
                           rows["api_end"].to_numpy()[has_api])
    found = hit >= 0
    text_ids = mine["text_id"].to_numpy()[forest.order[hit[found]]]
    names = ctx.profile.strings.decode(text_ids).to_numpy(dtype=object)
    where = np.flatnonzero(has_api)[found]
    out[where] = names
    return out


def _per_iteration(ctx: RankContext, comm: np.ndarray) -> pd.DataFrame:
    its = ctx.iterations
    starts, ends = its.starts[its.start:its.stop + 1], its.ends[its.start:its.stop + 1]
    work = ctx.work
    kernel = work["kind"].to_numpy() == KERNEL
    devices = np.unique(work["device_id"].to_numpy()) if len(work) else np.zeros(0, np.int64)
    sums = np.zeros((5, len(starts)), dtype=np.float64)
    start, end = work["start"].to_numpy(), work["end"].to_numpy()

    def covered(mask: np.ndarray) -> np.ndarray:
        return intervals.overlap_per_window(start[mask], end[mask], starts, ends).astype(np.float64)

    for device in devices:  # a rank's GPUs: one, rarely a few
        on = work["device_id"].to_numpy() == device

        compute = covered(on & kernel & ~comm)
        communication = covered(on & comm)
        kernels = covered(on & kernel)
        busy = covered(on)
        sums += np.stack((compute, communication, kernels - compute, (ends - starts) - busy, kernels))
    if len(devices):
        sums /= len(devices)
    else:
        sums[3] = ends - starts
    blocked = ctx.host_blocked_per_window(starts, ends).astype(np.float64)
    return pd.DataFrame(dict(zip(ITERATION_COLUMNS, (np.arange(its.start, its.stop + 1), ends - starts, *sums,
                                                     blocked), strict=True)))


def _parts(ctx: RankContext) -> pd.DataFrame:
    """Per aggregated iteration, the time in each direct sub-range of the key node (by name) and the
    time of the key range not covered by any of them."""
    its = ctx.iterations
    empty = pd.DataFrame({"iteration": np.empty(0, np.int64), "part": np.empty(0, object), "time": np.empty(0)})
    if not its.found:
        return empty
    keys = key_instances(ctx.profile, its.key_node)
    if keys.empty:
        return empty
    tid = int(keys["global_tid"].iloc[0])
    nvtx = ctx.profile.nvtx
    nvtx = nvtx[(nvtx["global_tid"].to_numpy() == tid) & ~nvtx["crosses_thread"].to_numpy()]
    forest = Forest.build(nvtx["global_tid"].to_numpy(), nvtx["start"].to_numpy(), nvtx["end"].to_numpy())
    rows = nvtx.iloc[forest.order]
    is_key = np.isin(rows["text_id"].to_numpy(), keys["text_id"].unique())
    parent = forest.parent
    child = np.flatnonzero((parent >= 0) & is_key[np.maximum(parent, 0)] & ~is_key)
    key_rows = np.flatnonzero(is_key)
    iteration = its.assign(forest.end[key_rows])
    key_iteration = pd.Series(iteration, index=key_rows)
    children = pd.DataFrame({
        "iteration": key_iteration.reindex(parent[child]).to_numpy(),
        "part": ctx.profile.strings.decode(rows["text_id"].to_numpy()[child]).to_numpy(dtype=object),
        "time": (forest.end[child] - forest.start[child]).astype(np.float64),
    })
    covered = children.groupby("iteration")["time"].sum()
    own = pd.DataFrame({"iteration": iteration, "part": UNCOVERED,
                        "time": (forest.end[key_rows] - forest.start[key_rows]).astype(np.float64)})
    own["time"] -= covered.reindex(own["iteration"]).fillna(0.0).to_numpy()
    parts = pd.concat([children, own], ignore_index=True)
    parts = parts.groupby(["iteration", "part"], sort=True)["time"].sum().reset_index()
    return rows_where(parts, its.in_selection(parts["iteration"].to_numpy())).reset_index(drop=True)
