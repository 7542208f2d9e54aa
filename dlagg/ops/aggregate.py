"""Op instances -> DLProf's per-op statistics (shared by the detail, op_type and group_node reports).

Contract: ``metric_stats(instances, by)`` gives, per group, ``Total / Avg. / Min / Max`` of CPU
time, GPU time, CPU overhead and GPU idle with DLProf's column names (Avg = Total / calls, one
decimal; Min/Max over the calls). ``op_usage(instances)`` says per op key whether any aggregated
call ran a Tensor Core kernel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# instance column -> DLProf's label, in DLProf's column order (reference §1.4)
METRICS = (("cpu", "CPU Time"), ("gpu", "GPU Time"), ("cpu_overhead", "CPU Overhead"), ("gpu_idle", "GPU Idle"))


def stat_columns() -> list[str]:
    return [f"{kind} {label} (ns)" for _, label in METRICS for kind in ("Total", "Avg.", "Min", "Max")]


def metric_stats(instances: pd.DataFrame, by: str | list[str]) -> pd.DataFrame:
    """Per group of `instances`: the 16 DLProf statistic columns."""
    grouped = instances.groupby(by, sort=False)
    calls = grouped.size()
    out = {}
    for column, label in METRICS:
        values = grouped[column]
        total = values.sum()
        out[f"Total {label} (ns)"] = total.astype(np.int64)
        out[f"Avg. {label} (ns)"] = (total / calls).round(1)
        out[f"Min {label} (ns)"] = values.min().astype(np.int64)
        out[f"Max {label} (ns)"] = values.max().astype(np.int64)
    return pd.DataFrame(out, index=calls.index)


def op_usage(instances: pd.DataFrame) -> pd.Series:
    """Per op key: True when any of its calls ran a Tensor Core kernel."""
    return instances.groupby("key", sort=False)["tc_kernels"].sum() > 0


def first_non_empty(instances: pd.DataFrame, column: str) -> pd.Series:
    """Per op key, the first non-empty value of a text column ('' when all are empty)."""
    present = instances[instances[column].astype(bool).to_numpy()]
    return present.groupby("key", sort=False)[column].first()


def path_prefixes(paths: pd.Series) -> pd.DataFrame:
    """(path, prefix) pairs: ``/a/b/`` -> ``/``, ``/a/``, ``/a/b/`` (over distinct paths only)."""
    pairs = []
    for path in pd.unique(paths):  # distinct group paths: a handful
        parts = [p for p in str(path).split("/") if p]
        pairs.extend((path, "/" + "".join(f"{p}/" for p in parts[:depth])) for depth in range(len(parts) + 1))
    return pd.DataFrame(pairs, columns=["path", "prefix"], dtype=object)
