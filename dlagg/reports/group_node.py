"""Group report (DLProf's ``group_op``): one row per group path prefix (``/``, ``/forward/``,
``/module/net::forward/``, ...), then the whole model.

An op's group path is the chain of user NVTX ranges enclosing it on its thread (``forward``,
``layer1``), followed for DLProf function-stack markers by the directories of the stack. A row
aggregates every op call below its prefix: ``/`` holds all of them but the CUDA calls made outside
every NVTX range (``unassociated_<api>`` ops, which have no path); the last row, ``_CompleteModel_``
as DLProf names it, holds every call.

Figures per row, as DLProf's: ``Num Calls Aggregated`` and the TC-eligible / TC-using ops below the
prefix; for each of CPU time, GPU time, CPU overhead and GPU idle (per call as in the detail
report), the Total over the aggregated iterations and the Avg., Min and Max **per iteration**: the
row's total in each aggregated iteration (0 in an iteration without such a call), averaged, and its
smallest and largest value.

The report keeps its base figures per (group path, op, iteration): calls and the figures' sums. The
rows are derived from them, so several ranks' base figures combine first (iteration i of every rank
adds up) and the prefixes after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.aggregate import op_usage, path_prefixes
from .base import JobFigures, Report, merges, report
from .detail import empty, no_ops_warning
from .figures import ANY, COUNT, KEY, SUM, Field, Table, key_values, merge_tables, summed_over
from .op_stats import METRIC_FIELDS, METRICS

COMPLETE_MODEL = "_CompleteModel_"  # DLProf's name of the row over every op call

FIELDS = (
    Field("name", "Name", merge=KEY),
    Field("calls", "Num Calls Aggregated", COUNT, merge=SUM),
    Field("tc_eligible_ops", "Num TC Eligible Ops", COUNT),
    Field("using_tc_ops", "Num Ops Using TC", COUNT),
    *METRIC_FIELDS,
)
TOTALS = tuple(f for f in METRIC_FIELDS if f.key.endswith("_total_ns"))
# Base figures: one row per (group path, op, iteration).
BASE_FIELDS = (
    Field("path", "Group Path", merge=KEY),
    Field("op", "Op Key", merge=KEY),
    Field("iteration", "Iteration", merge=KEY),
    Field("tc_eligible", "TC Eligible", merge=ANY),
    Field("using_tc", "Using TC", merge=ANY),
    FIELDS[1],
    *TOTALS,
)
ITERATIONS = Field("iterations", "Aggregated Iterations", COUNT)


def per_path_op(ctx: RankContext) -> pd.DataFrame:
    """Base figures: calls and figure sums per (group path, op, iteration) of the aggregated calls."""
    inst = ctx.op_instances
    path = inst["path"].astype(object).to_numpy()
    grouped = inst.groupby([path, inst["key"].to_numpy(), inst["iteration"].to_numpy()], sort=False)
    columns: dict[str, pd.Series] = {"calls": grouped.size()}
    for (column, _, _), total in zip(METRICS, TOTALS, strict=True):
        columns[total.key] = grouped[column].sum()
    base = pd.DataFrame(columns).rename_axis(["path", "key", "iteration"]).reset_index()
    ops = ctx.ops.ops
    keys = base["key"].to_numpy()
    base["op"] = ops["op_key"].reindex(keys).to_numpy(dtype=object)
    base["tc_eligible"] = ops["tc_eligible"].reindex(keys).to_numpy(dtype=bool)
    base["using_tc"] = op_usage(inst).reindex(keys).to_numpy(dtype=bool)
    return base[[f.key for f in BASE_FIELDS]]


def _rows(rows: pd.DataFrame, group: str, iterations: int) -> pd.DataFrame:
    """Report rows from base rows labelled by `group` (their prefix): totals, and per-iteration averages,
    minima and maxima over `iterations` aggregated iterations."""
    grouped = rows.groupby(group, sort=False)
    table = pd.DataFrame({"calls": grouped["calls"].sum()})
    ops = rows.drop_duplicates([group, "op"]).groupby(group, sort=False)[["tc_eligible", "using_tc"]].sum()
    table["tc_eligible_ops"] = ops["tc_eligible"].reindex(table.index).to_numpy()
    table["using_tc_ops"] = ops["using_tc"].reindex(table.index).to_numpy()
    per_iteration = rows.groupby([group, "iteration"], sort=False)[[f.key for f in TOTALS]].sum()
    seen = per_iteration.groupby(level=0, sort=False).size().reindex(table.index).to_numpy()
    missing = seen < iterations  # an iteration without a call of the row counts 0
    for k, total in enumerate(TOTALS):
        avg, low, high = METRIC_FIELDS[4 * k + 1:4 * k + 4]
        by = per_iteration[total.key].groupby(level=0, sort=False)
        sums = by.sum().reindex(table.index)
        table[total.key] = sums.to_numpy(dtype=np.int64)
        table[avg.key] = sums.to_numpy(dtype=np.float64) / max(iterations, 1)
        table[low.key] = np.where(missing, 0, by.min().reindex(table.index).to_numpy()).astype(np.int64)
        table[high.key] = by.max().reindex(table.index).to_numpy(dtype=np.int64)
    return table.rename_axis("name").reset_index()


def by_prefix(base: pd.DataFrame, iterations: int) -> pd.DataFrame:
    """The report's rows: per group path prefix, then the whole model, from the base figures."""
    pathless = base["path"].astype(str).to_numpy() == ""  # CUDA calls outside every NVTX range
    prefixes = path_prefixes(base["path"][~pathless])  # (path, prefix) for the distinct paths
    rows = base[~pathless].merge(prefixes, on="path")
    table = _rows(rows, "prefix", iterations).sort_values("name", kind="stable")
    complete = _rows(base.assign(prefix=COMPLETE_MODEL), "prefix", iterations)
    return pd.concat([table, complete], ignore_index=True)[[f.key for f in FIELDS]]


@report("group_node", file_suffix="group_op")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per group path prefix and for the whole model: op calls, TC-eligible and TC-using ops, CPU/GPU time,
    overhead, idle (totals; average, minimum and maximum per iteration)."""
    its = ctx.iterations
    count = key_values("iterations", "Aggregated Iterations", [(ITERATIONS, its.stop - its.start + 1)], csv=False)
    if ctx.op_instances.empty:
        return Report("group_node", "group_op", (Table("groups", "Group Op Report", FIELDS, empty(FIELDS)),
                                                 Table("path_ops", "Group Path Ops", BASE_FIELDS,
                                                       empty(BASE_FIELDS), csv=False), count),
                      warnings=no_ops_warning(ctx, "group_node"))
    base = per_path_op(ctx)
    return Report("group_node", "group_op", (
        Table("groups", "Group Op Report", FIELDS, by_prefix(base, its.stop - its.start + 1)),
        Table("path_ops", "Group Path Ops", BASE_FIELDS, base, csv=False),
        count,
    ))


@merges("group_node")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """The base figures per (group path, op, iteration) combine over ranks (iteration i of every rank adds
    up); the rows are derived from them, per iteration over the iterations any rank aggregated."""
    base = merge_tables([r.table("path_ops") for r in reports])
    selected = set().union(*(set(r.iterations.selected) for r in job.ranks))
    groups = reports[0].main
    rows = by_prefix(base.frame, len(selected)) if len(base) else groups.frame
    count = key_values("iterations", "Aggregated Iterations", [(ITERATIONS, len(selected))], csv=False)
    warnings = tuple(dict.fromkeys(w for r in reports for w in r.warnings))
    return Report("group_node", "group_op", (summed_over(groups.with_frame(rows), len(reports)), base, count),
                  warnings=warnings)
