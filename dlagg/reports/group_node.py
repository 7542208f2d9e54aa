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

The report keeps its base figures per (group path, iteration): calls and the figures' sums, and the
ops of each group path with their Tensor Core eligibility and use. The rows are derived from them, so
several ranks' base figures combine first (iteration i of every rank adds up, an op of several ranks
counts once) and the prefixes after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.aggregate import op_usage, path_prefixes
from .base import JobFigures, Report, merges, report
from .detail import empty, no_ops_warning
from .figures import ANY, COUNT, KEY, SUM, Field, Table, merge_tables, summed_over
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
# Base figures: calls and figure sums per (group path, iteration) ...
BASE_FIELDS = (
    Field("path", "Group Path", merge=KEY),
    Field("iteration", "Iteration", merge=KEY),
    FIELDS[1],
    *TOTALS,
)
# ... and the ops of each group path (counted once per prefix, over ranks too).
PATH_OP_FIELDS = (
    Field("path", "Group Path", merge=KEY),
    Field("op", "Op Key", merge=KEY),
    Field("tc_eligible", "TC Eligible", merge=ANY),
    Field("using_tc", "Using TC", merge=ANY),
)


def base_figures(ctx: RankContext) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(calls and figure sums per (group path, iteration), the ops per group path) of the aggregated calls."""
    inst = ctx.op_instances
    codes = np.asarray(inst["path"].array.codes)
    paths = np.asarray(inst["path"].array.categories, dtype=object)
    grouped = inst.groupby([codes, inst["iteration"].to_numpy()], sort=False)
    columns: dict[str, pd.Series] = {"calls": grouped.size()}
    for (column, _, _), total in zip(METRICS, TOTALS, strict=True):
        columns[total.key] = grouped[column].sum()
    base = pd.DataFrame(columns).rename_axis(["code", "iteration"]).reset_index()
    base["path"] = paths[base["code"].to_numpy()]
    pairs = pd.DataFrame({"code": codes, "key": inst["key"].to_numpy()}).drop_duplicates()
    ops = ctx.ops.ops
    keys = pairs["key"].to_numpy()
    path_ops = pd.DataFrame({
        "path": paths[pairs["code"].to_numpy()],
        "op": ops["op_key"].reindex(keys).to_numpy(dtype=object),
        "tc_eligible": ops["tc_eligible"].reindex(keys).to_numpy(dtype=bool),
        "using_tc": op_usage(inst).reindex(keys).to_numpy(dtype=bool),
    })
    return base[[f.key for f in BASE_FIELDS]], path_ops[[f.key for f in PATH_OP_FIELDS]]


def _rows(rows: pd.DataFrame, ops: pd.DataFrame, iterations: int) -> pd.DataFrame:
    """Report rows from base rows and path-op rows labelled by their `prefix`: totals, ops, and
    per-iteration averages, minima and maxima over `iterations` aggregated iterations.

    In numpy over the (prefix, iteration) sums: a few hundred rows, where each pandas group-by cost more than
    its work."""
    prefix, names = pd.factorize(rows["prefix"].to_numpy(dtype=object))  # in order of first appearance
    iteration, distinct = pd.factorize(rows["iteration"].to_numpy())
    width = max(len(distinct), 1)
    pairs, pair = np.unique(prefix * width + iteration, return_inverse=True)  # each row's (prefix, iteration)
    owner = pairs // width  # each pair's prefix
    missing = np.bincount(owner, minlength=len(names)) < iterations  # an iteration without a call counts 0

    def over_prefixes(values: np.ndarray, ufunc: np.ufunc, start: int) -> np.ndarray:
        out = np.full(len(names), start, dtype=np.int64)
        ufunc.at(out, owner, values)
        return out

    def over_pairs(column: str) -> np.ndarray:
        out = np.zeros(len(pairs), dtype=np.int64)
        np.add.at(out, np.ravel(pair), rows[column].to_numpy(dtype=np.int64))
        return out

    table: dict[str, np.ndarray] = {"name": names, "calls": over_prefixes(over_pairs("calls"), np.add, 0)}
    distinct_ops = ops.drop_duplicates(["prefix", "op"])
    at = pd.Index(names).get_indexer(distinct_ops["prefix"].to_numpy(dtype=object))
    for key, column in (("tc_eligible_ops", "tc_eligible"), ("using_tc_ops", "using_tc")):
        counts = np.zeros(len(names), dtype=np.int64)
        np.add.at(counts, at[at >= 0], distinct_ops[column].to_numpy(dtype=np.int64)[at >= 0])
        table[key] = counts
    low_start, high_start = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for k, total in enumerate(TOTALS):
        avg, low, high = METRIC_FIELDS[4 * k + 1:4 * k + 4]
        sums = over_pairs(total.key)
        table[total.key] = over_prefixes(sums, np.add, 0)
        table[avg.key] = table[total.key].astype(np.float64) / max(iterations, 1)
        table[low.key] = np.where(missing, 0, over_prefixes(sums, np.minimum, low_start))
        table[high.key] = over_prefixes(sums, np.maximum, high_start)
    return pd.DataFrame(table)


def by_prefix(base: pd.DataFrame, path_ops: pd.DataFrame, iterations: int) -> pd.DataFrame:
    """The report's rows: per group path prefix, then the whole model, from the base figures (a few
    distinct paths: the prefixes are expanded on (path, iteration) and (path, op) rows only)."""
    pathless = base["path"].astype(str).to_numpy() == ""  # CUDA calls outside every NVTX range
    prefixes = path_prefixes(base["path"][~pathless])  # (path, prefix) for the distinct paths
    with_path = path_ops[path_ops["path"].astype(str).to_numpy() != ""]
    table = _rows(base[~pathless].merge(prefixes, on="path"), with_path.merge(prefixes, on="path"), iterations)
    complete = _rows(base.assign(prefix=COMPLETE_MODEL), path_ops.assign(prefix=COMPLETE_MODEL), iterations)
    table = table.sort_values("name", kind="stable")
    return pd.concat([table, complete], ignore_index=True)[[f.key for f in FIELDS]]


@report("group_node", file_suffix="group_op")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per group path prefix and for the whole model: op calls, TC-eligible and TC-using ops, CPU/GPU time,
    overhead, idle (totals; average, minimum and maximum per iteration)."""
    its = ctx.iterations
    if ctx.op_instances.empty:
        return Report("group_node", "group_op", (
            Table("groups", "Group Op Report", FIELDS, empty(FIELDS)),
            Table("path_iterations", "Group Path Iterations", BASE_FIELDS, empty(BASE_FIELDS), csv=False),
            Table("path_ops", "Group Path Ops", PATH_OP_FIELDS, empty(PATH_OP_FIELDS), csv=False)),
            warnings=no_ops_warning(ctx, "group_node"))
    base, path_ops = base_figures(ctx)
    return Report("group_node", "group_op", (
        Table("groups", "Group Op Report", FIELDS, by_prefix(base, path_ops, its.stop - its.start + 1)),
        Table("path_iterations", "Group Path Iterations", BASE_FIELDS, base, csv=False),
        Table("path_ops", "Group Path Ops", PATH_OP_FIELDS, path_ops, csv=False),
    ))


@merges("group_node")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """The base figures per (group path, iteration) and the ops per group path combine over ranks
    (iteration i of every rank adds up; an op of several ranks counts once); the rows are derived from
    them, per iteration over the iterations any rank aggregated."""
    base = merge_tables([r.table("path_iterations") for r in reports])
    path_ops = merge_tables([r.table("path_ops") for r in reports])
    selected = set().union(*(set(r.iterations.selected) for r in job.ranks))
    groups = reports[0].main
    rows = by_prefix(base.frame, path_ops.frame, len(selected)) if len(base) else groups.frame
    warnings = tuple(dict.fromkeys(w for r in reports for w in r.warnings))
    return Report("group_node", "group_op", (summed_over(groups.with_frame(rows), len(reports)), base, path_ops),
                  warnings=warnings)
