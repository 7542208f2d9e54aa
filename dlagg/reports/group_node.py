"""Group report: one row per group path prefix (``/``, ``/forward/``, ``/<module>/net::forward/``, ...).

An op's group path is the chain of user NVTX ranges enclosing it on its thread (``forward``,
``layer1``), followed for DLProf function-stack markers by the directories of the stack. A row
aggregates every op call below its prefix: ``/`` holds all of them.

The report keeps its base figures per (group path, op): calls and the per-call statistics' sums,
minima and maxima. The rows per prefix are derived from them (sums add up, minima and maxima of
minima and maxima, ops counted once per prefix), so calls are never repeated once per enclosing
prefix, and the base figures of several ranks combine before the prefixes are derived.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.aggregate import op_usage, path_prefixes
from .base import JobFigures, Report, merges, report
from .detail import empty, no_ops_warning
from .figures import ANY, COUNT, KEY, SUM, Field, Table, derive_averages, merge_tables, summed_over
from .op_stats import METRIC_FIELDS, METRICS, average_pairs

FIELDS = (
    Field("name", "Name", merge=KEY),
    Field("calls", "Num Calls Aggregated", COUNT, merge=SUM),
    Field("tc_eligible_ops", "Num TC Eligible Ops", COUNT),
    Field("using_tc_ops", "Num Ops Using TC", COUNT),
    *METRIC_FIELDS,
)
STATS = tuple(f for f in METRIC_FIELDS if not f.key.endswith("_avg_ns"))  # what combines; averages are derived
# Base figures: one row per (group path, op).
BASE_FIELDS = (
    Field("path", "Group Path", merge=KEY),
    Field("op", "Op Key", merge=KEY),
    Field("tc_eligible", "TC Eligible", merge=ANY),
    Field("using_tc", "Using TC", merge=ANY),
    FIELDS[1],
    *STATS,
)


def per_path_op(ctx: RankContext) -> pd.DataFrame:
    """Base figures: calls and statistic sums/minima/maxima per (group path, op) of the aggregated calls."""
    inst = ctx.op_instances
    path = inst["path"].astype(object).to_numpy()
    grouped = inst.groupby([path, inst["key"].to_numpy()], sort=False)
    columns: dict[str, pd.Series] = {"calls": grouped.size()}
    for k, (column, _, _) in enumerate(METRICS):
        total, _, low, high = METRIC_FIELDS[4 * k:4 * k + 4]
        columns[total.key] = grouped[column].sum()
        columns[low.key] = grouped[column].min()
        columns[high.key] = grouped[column].max()
    base = pd.DataFrame(columns).rename_axis(["path", "key"]).reset_index()
    ops = ctx.ops.ops
    keys = base["key"].to_numpy()
    base["op"] = ops["op_key"].reindex(keys).to_numpy(dtype=object)
    base["tc_eligible"] = ops["tc_eligible"].reindex(keys).to_numpy(dtype=bool)
    base["using_tc"] = op_usage(inst).reindex(keys).to_numpy(dtype=bool)
    return base


def by_prefix(base: pd.DataFrame) -> pd.DataFrame:
    """The report's rows: per group path prefix, from the base figures per (path, op)."""
    prefixes = path_prefixes(base["path"])  # (path, prefix) for the distinct paths
    rows = base.merge(prefixes, on="path")
    grouped = rows.groupby("prefix", sort=False)
    columns: dict[str, pd.Series] = {"calls": grouped["calls"].sum()}
    for f in STATS:
        how = "sum" if f.key.endswith("_total_ns") else "min" if f.key.endswith("_min_ns") else "max"
        columns[f.key] = grouped[f.key].agg(how).astype(np.int64)
    table = pd.DataFrame(columns)
    ops = rows.drop_duplicates(["prefix", "op"]).groupby("prefix", sort=False)[["tc_eligible", "using_tc"]].sum()
    table["tc_eligible_ops"] = ops["tc_eligible"].reindex(table.index).to_numpy()
    table["using_tc_ops"] = ops["using_tc"].reindex(table.index).to_numpy()
    table = derive_averages(table, average_pairs("calls"))
    table = table.rename_axis("name").reset_index().sort_values("name", kind="stable")
    return table[[f.key for f in FIELDS]].reset_index(drop=True)


@report("group_node", file_suffix="group_node")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per group path prefix: op calls, TC-eligible and TC-using ops, CPU/GPU time, overhead, idle."""
    if ctx.op_instances.empty:
        return Report("group_node", "group_node", (Table("groups", "Group Op Report", FIELDS, empty(FIELDS)),
                                                   Table("path_ops", "Group Path Ops", BASE_FIELDS,
                                                         empty(BASE_FIELDS), csv=False)),
                      warnings=no_ops_warning(ctx, "group_node"))
    base = per_path_op(ctx)
    return Report("group_node", "group_node", (
        Table("groups", "Group Op Report", FIELDS, by_prefix(base)),
        Table("path_ops", "Group Path Ops", BASE_FIELDS, base[[f.key for f in BASE_FIELDS]], csv=False),
    ))


@merges("group_node")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """The base figures per (group path, op) combine over ranks; the prefix rows are derived from them."""
    base = merge_tables([r.table("path_ops") for r in reports])
    groups = reports[0].main
    rows = by_prefix(base.frame) if len(base) else groups.frame
    warnings = tuple(dict.fromkeys(w for r in reports for w in r.warnings))
    return Report("group_node", "group_node", (summed_over(groups.with_frame(rows), len(reports)), base),
                  warnings=warnings)
