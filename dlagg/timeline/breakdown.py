"""Where each iteration's wall-clock time goes: a partition into resource classes.

Contract: ``time_breakdown(profile, iterations, work, uses_tc) -> DataFrame``, one row per
iteration (all of them, aggregated or not):

    iteration, start, end, duration                  window (start, end] in ns
    tc_kernel, kernel, memory, dataloader, io, cpu, other   ns, summing exactly to duration
    gpu_busy                                         kernel-busy time averaged over GPUs (ns)
    kernel_count                                     kernels attributed to the iteration

Each instant of a window is counted once, in the first class active then, in DLProf's order:
Tensor Core kernel > other kernel > memory (memcpy/memset) > dataloader > I/O > CPU > other.
Classes are by actual execution time (a kernel counts where it runs), whereas ``kernel_count``
follows DLProf's attribution by launch.

- dataloader: NVTX ranges whose name says data loading (classify.DATALOADER_RANGE);
- I/O: OS-runtime file and socket calls (only when the export has OSRT_API);
- CPU: CUDA API calls and NVTX ranges below the key node (op and user ranges), i.e. time the
  host is known to be busy with the step; the key node and ranges enclosing it do not count,
  or every instant would be "CPU".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ..classify import DATALOADER_RANGE, IO_CALL
from ..model import Iterations, Profile
from . import intervals
from .correlate import KERNEL
from .iterations import key_instances

CLASSES = ("tc_kernel", "kernel", "memory", "dataloader", "io", "cpu")
# DLProf's name of each class's share of the wall clock (the summary's lines; the last is the remainder).
CLASS_LABELS = {
    "tc_kernel": "Tensor Core Kernel Duration %",
    "kernel": "Non-Tensor Core Kernel Duration %",
    "memory": "Memory Duration %",
    "dataloader": "Dataloader Duration %",
    "io": "IO Duration %",
    "cpu": "CPU Duration %",
    "other": "Other Duration %",
}


def _cpu_ranges(profile: Profile, iterations: Iterations, rng: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the NVTX ranges `rng` that are neither a key-node instance nor enclose one."""
    r_start = rng["start"].to_numpy()
    r_end = rng["end"].to_numpy()
    if not iterations.found or rng.empty:
        return r_start, r_end
    keys = key_instances(profile, iterations.key_node).sort_values("start")
    k_start = keys["start"].to_numpy()
    k_end = keys["end"].to_numpy()
    # Key instances do not overlap, so the first one starting inside r ends first among them.
    idx = np.searchsorted(k_start, r_start, side="left")
    safe = np.minimum(idx, len(k_start) - 1)
    encloses = (idx < len(k_start)) & (k_end[safe] <= r_end)
    is_key = np.isin(rng["text_id"].to_numpy(), keys["text_id"].unique()) if len(keys) else np.zeros(len(rng), bool)
    keep = ~(encloses | is_key)
    return r_start[keep], r_end[keep]


def _union(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of interval sets, each merged alone first: nested NVTX ranges collapse to their
    outermost ones before they meet the API calls (a sort of a few runs, not of millions of rows)."""
    merged = [intervals.merge(s, e) for s, e in parts]
    return intervals.merge(np.concatenate([m[0] for m in merged]), np.concatenate([m[1] for m in merged]))


def time_breakdown(profile: Profile, iterations: Iterations, work: pd.DataFrame,
                   uses_tc: Callable[[np.ndarray], np.ndarray]) -> pd.DataFrame:
    starts = iterations.starts
    ends = iterations.ends
    kind = work["kind"].to_numpy()
    is_kernel = kind == KERNEL
    tc = np.zeros(len(work), dtype=bool)
    tc[is_kernel] = uses_tc(work["name_id"].to_numpy()[is_kernel])
    w_start = work["start"].to_numpy()
    w_end = work["end"].to_numpy()

    rng = profile.nvtx
    is_loader = np.isin(rng["text_id"].to_numpy(), profile.strings.ids_matching(DATALOADER_RANGE))
    osrt = profile.osrt
    io_ids = profile.strings.ids_matching(IO_CALL, among=osrt["name_id"].to_numpy())
    io = osrt[np.isin(osrt["name_id"].to_numpy(), io_ids)]
    cpu_start, cpu_end = _cpu_ranges(profile, iterations, rng)
    api = profile.runtime

    classes = [
        (w_start[tc], w_end[tc]),
        (w_start[is_kernel & ~tc], w_end[is_kernel & ~tc]),
        (w_start[~is_kernel], w_end[~is_kernel]),
        (rng["start"].to_numpy()[is_loader], rng["end"].to_numpy()[is_loader]),
        (io["start"].to_numpy(), io["end"].to_numpy()),
        _union((api["start"].to_numpy(), api["end"].to_numpy()), (cpu_start, cpu_end)),
    ]
    parts = intervals.partition(classes, starts, ends)

    devices = np.unique(work["device_id"].to_numpy()[is_kernel])
    busy = np.zeros(len(starts), dtype=np.float64)
    for device in devices:  # a handful of GPUs, not events
        on = is_kernel & (work["device_id"].to_numpy() == device)
        busy += intervals.overlap_per_window(w_start[on], w_end[on], starts, ends)
    if len(devices):
        busy /= len(devices)

    counts = np.bincount(work["iteration"].to_numpy()[is_kernel & (work["iteration"].to_numpy() >= 0)],
                         minlength=len(starts)) if "iteration" in work else np.zeros(len(starts), dtype=np.int64)
    frame = pd.DataFrame({
        "iteration": np.arange(len(starts), dtype=np.int64),
        "start": starts,
        "end": ends,
        "duration": ends - starts,
    })
    for k, name in enumerate(CLASSES):
        frame[name] = parts[k]
    frame["other"] = parts[-1]
    frame["gpu_busy"] = busy
    frame["kernel_count"] = counts[: len(starts)]
    frame["aggregated"] = iterations.in_selection(frame["iteration"].to_numpy())
    return frame
