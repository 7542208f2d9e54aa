"""DLProf's per-op statistics, shared by the detail, op_type and group_node reports.

Per call (one op instance, reference §1.5, computed in ``dlagg.ops``): CPU time = the op's range
duration; GPU time = union of its kernels, memcpys and memsets; CPU overhead = CPU time minus the
CUDA API time inside it; GPU idle = span of its GPU work minus its GPU time. Per group of calls:
Total, Avg. (= Total / calls, one decimal shown), Min and Max of each.
"""

from __future__ import annotations

import pandas as pd

from .figures import Field, stat_columns, stat_fields

# instance column -> (figure stem, DLProf's label), in DLProf's column order (reference §1.4)
METRICS = (("cpu", "cpu_time", "CPU Time"), ("gpu", "gpu_time", "GPU Time"),
           ("cpu_overhead", "cpu_overhead", "CPU Overhead"), ("gpu_idle", "gpu_idle", "GPU Idle"))
METRIC_FIELDS: tuple[Field, ...] = tuple(f for _, stem, label in METRICS for f in stat_fields(stem, label))


def metric_columns(grouped: pd.core.groupby.DataFrameGroupBy, calls: pd.Series) -> dict[str, pd.Series]:
    """The 16 statistic figures per group of op calls, keyed like METRIC_FIELDS."""
    out: dict[str, pd.Series] = {}
    for k, (column, _, _) in enumerate(METRICS):
        out.update(stat_columns(grouped[column], METRIC_FIELDS[4 * k:4 * k + 4], calls))
    return out


def average_pairs(calls: str) -> list[tuple[str, str, str]]:
    """(average, total, calls) figure keys, to recompute the averages after a merge."""
    return [(METRIC_FIELDS[4 * k + 1].key, METRIC_FIELDS[4 * k].key, calls) for k in range(len(METRICS))]
