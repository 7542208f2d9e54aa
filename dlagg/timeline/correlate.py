"""GPU work joined to the CUDA API call that launched it.

Contract: ``gpu_work(profile) -> DataFrame`` with one row per kernel, memcpy and memset:

    kind         int8   KERNEL / MEMCPY / MEMSET
    row          int64  row in the profile's kernels / memcpy / memset frame
    start, end   int64  GPU interval (ns)
    device_id    int32
    stream_id    int32
    name_id      int64  kernel demangled-name id; -1 for memory operations
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


def launch_calls(gpu: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    """For each row of `gpu` (correlation_id, global_pid), its launching runtime/driver API row."""
    corr = gpu["correlation_id"].to_numpy()
    candidates = runtime[np.isin(runtime["correlation_id"].to_numpy(), corr[corr != NO_ID])]
    api = pd.DataFrame({
        "correlation_id": candidates["correlation_id"].to_numpy(),
        "global_pid": candidates["global_tid"].to_numpy() & PID_MASK,
        "api_start": candidates["start"].to_numpy(),
        "api_end": candidates["end"].to_numpy(),
        "api_tid": candidates["global_tid"].to_numpy(),
        "api_name_id": candidates["name_id"].to_numpy(),
    })
    # One launching call per (process, correlation id): the outermost (earliest) one.
    api = api.sort_values("api_start", kind="stable").drop_duplicates(["global_pid", "correlation_id"])
    joined = gpu[["correlation_id", "global_pid"]].merge(api, how="left", on=["correlation_id", "global_pid"], sort=False)
    return pd.DataFrame({
        "api_start": joined["api_start"].fillna(NO_ID).to_numpy(dtype=np.int64),
        "api_end": joined["api_end"].fillna(NO_ID).to_numpy(dtype=np.int64),
        "api_tid": joined["api_tid"].fillna(0).to_numpy(dtype=np.int64),
        "api_name_id": joined["api_name_id"].fillna(NO_ID).to_numpy(dtype=np.int64),
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
