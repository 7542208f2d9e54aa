"""GPU work joined to the CUDA API call that launched it.

Contract: ``gpu_work(profile) -> DataFrame`` with one row per kernel, memcpy and memset:

    kind         int8   KERNEL / MEMCPY / MEMSET
    row          int64  row in the profile's kernels / memcpy / memset frame
    start, end   int64  GPU interval (ns)
    device_id    int32
    stream_id    int32
    name_id      int64  kernel demangled-name id; -1 for memory operations
    api_row      int64  row of the launching API call in the profile's runtime frame (-1 when none)
    api_start    int64  launching API call (-1 when no API row correlates)
    api_end      int64
    api_tid      int64  thread of the launching call (0 when none)
    api_name_id  int64
    t_attr       int64  the time that decides the iteration: api_start, else start

The join is ``correlationId`` AND process (``globalTid & 0xFFFFFFFFFF000000 == globalPid``):
correlation ids are per process, so a multi-process export must never join on the id alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import Profile
from ..reader.schema import MEMCPY_KINDS, NO_ID, PID_MASK

KERNEL, MEMCPY, MEMSET = 0, 1, 2
KIND_NAMES = {KERNEL: "kernel", MEMCPY: "memcpy", MEMSET: "memset"}


def packed_keys(pid_a: np.ndarray, corr_a: np.ndarray, pid_b: np.ndarray,
                corr_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(process, correlation id) pairs of two tables as single int64 keys, comparable across both."""
    pids = np.unique(np.concatenate((pd.unique(pid_a), pd.unique(pid_b))))  # a few processes
    span = int(max(corr_a.max(initial=0), corr_b.max(initial=0))) + 1
    if span > np.iinfo(np.int64).max // (len(pids) + 1):  # CUPTI's ids are 32-bit: never seen
        dense = np.unique(np.concatenate((corr_a, corr_b)), return_inverse=True)[1]
        corr_a, corr_b, span = dense[:len(corr_a)], dense[len(corr_a):], len(dense)
    return np.searchsorted(pids, pid_a) * span + corr_a, np.searchsorted(pids, pid_b) * span + corr_b


def contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Mask of `keys` present in `sorted_keys` (binary search; np.isin sorts both arrays)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys


def launch_calls(gpu: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    """For each row of `gpu` (correlation_id, global_pid), its launching runtime/driver API row.

    One launching call per (process, correlation id): the outermost (earliest) one. The join is a
    binary search on one integer key per row (process code and correlation id packed together),
    not a hash join: 2.5 M API rows and 1 M kernels per 1.6 GB of export.
    """
    corr_g = gpu["correlation_id"].to_numpy()
    pid_g = gpu["global_pid"].to_numpy()
    corr_r = runtime["correlation_id"].to_numpy()
    tid_r = runtime["global_tid"].to_numpy()
    start_r = runtime["start"].to_numpy()
    found = np.full(len(gpu), -1, dtype=np.int64)  # row of `runtime` per row of `gpu`
    usable = corr_r != NO_ID
    launched = corr_g != NO_ID
    if len(gpu) and usable.any():
        key_r, key_g = packed_keys(tid_r & PID_MASK, corr_r, pid_g, corr_g)
        rows = np.flatnonzero(usable)
        # by key, then by start: the first row of each key is its outermost call
        by_start = rows if (np.diff(start_r[rows]) >= 0).all() else rows[np.argsort(start_r[rows], kind="stable")]
        ordered = by_start[np.argsort(key_r[by_start], kind="stable")]
        keys = key_r[ordered]
        first = np.r_[True, keys[1:] != keys[:-1]]
        keys, ordered = keys[first], ordered[first]
        pos = np.minimum(np.searchsorted(keys, key_g), len(keys) - 1)
        hit = (keys[pos] == key_g) & launched
        found[hit] = ordered[pos[hit]]
    has = found >= 0
    row = np.where(has, found, 0)

    def column(values: np.ndarray, missing: int) -> np.ndarray:
        return np.where(has, values[row], missing).astype(np.int64) if len(values) else np.full(len(gpu), missing)

    return pd.DataFrame({
        "api_row": found,
        "api_start": column(start_r, NO_ID),
        "api_end": column(runtime["end"].to_numpy(), NO_ID),
        "api_tid": column(tid_r, 0),
        "api_name_id": column(runtime["name_id"].to_numpy(), NO_ID),
    })


def gpu_work(profile: Profile) -> pd.DataFrame:
    """Kernels, memcpys and memsets in one frame, with their launching API call."""
    parts = []
    for kind, frame in ((KERNEL, profile.kernels), (MEMCPY, profile.memcpy), (MEMSET, profile.memset)):
        parts.append(pd.DataFrame({
            "kind": np.full(len(frame), kind, dtype=np.int8),
            "row": np.arange(len(frame), dtype=np.int64),
            "start": frame["start"].to_numpy(),
            "end": frame["end"].to_numpy(),
            "device_id": frame["device_id"].to_numpy(),
            "stream_id": frame["stream_id"].to_numpy(),
            "correlation_id": frame["correlation_id"].to_numpy(),
            "global_pid": frame["global_pid"].to_numpy(),
            "name_id": frame["name_id"].to_numpy() if kind == KERNEL else np.full(len(frame), NO_ID, dtype=np.int64),
        }))
    work = pd.concat(parts, ignore_index=True)
    api = launch_calls(work, profile.runtime)
    work = pd.concat([work, api], axis=1)
    work["t_attr"] = np.where(work["api_start"].to_numpy() >= 0, work["api_start"].to_numpy(), work["start"].to_numpy())
    return work


def memory_label(profile: Profile, work: pd.DataFrame) -> pd.Series:
    """nsys-style names for memory operations: ``[CUDA memcpy HtoD]``, ``[CUDA memset]``."""
    labels = pd.Series("", index=work.index, dtype=object)
    is_copy = work["kind"].to_numpy() == MEMCPY
    if is_copy.any():
        kinds = profile.memcpy["copy_kind"].to_numpy()[work["row"].to_numpy()[is_copy]]
        names = {k: f"[CUDA memcpy {v}]" for k, v in MEMCPY_KINDS.items()}
        labels[is_copy] = pd.Series(kinds).map(names).fillna("[CUDA memcpy]").to_numpy()
    labels[work["kind"].to_numpy() == MEMSET] = "[CUDA memset]"
    return labels
