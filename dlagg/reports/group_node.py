"""Group report: one row per group path prefix (``/``, ``/forward/``, ``/<module>/net::forward/``, ...).

An op's group path is the chain of user NVTX ranges enclosing it on its thread (``forward``,
``layer1``), followed for DLProf function-stack markers by the directories of the stack. A row
aggregates every op call below its prefix: ``/`` holds all of them.

Statistics are taken per distinct path first and then combined per prefix (sums add up, minima
and maxima of minima and maxima): the calls are never repeated once per enclosing prefix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..ops.aggregate import METRICS, op_usage, path_prefixes, stat_columns
from .base import Report, ReportContext, Section, report
from .detail import no_ops_warning

COLUMNS = ["Name", "Num Calls Aggregated", "Num TC Eligible Ops", "Num Ops Using TC", *stat_columns()]


@report("group_node", file_suffix="group_node")
def build(ctx: ReportContext) -> Report:
    """Per group path prefix: op calls, TC-eligible and TC-using ops, CPU/GPU time, overhead, idle."""
    inst = ctx.op_instances
    if inst.empty:
        table = pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
        return Report("group_node", "group_node", (Section("Group Op Report", table),),
                      warnings=no_ops_warning(ctx, "group_node"))
    path = inst["path"].astype(object).to_numpy()
    metrics = [column for column, _ in METRICS]
    per_path = inst[metrics].groupby(path, sort=False).agg(["sum", "min", "max"])
    per_path.columns = [f"{column}_{how}" for column, how in per_path.columns]
    per_path["calls"] = inst.groupby(path, sort=False).size()
    prefixes = path_prefixes(pd.Series(per_path.index))  # (path, prefix) for the distinct paths
    rows = per_path.reindex(prefixes["path"].to_numpy())
    rows.index = pd.Index(prefixes["prefix"].to_numpy(), name="Name")
    by_prefix = rows.groupby(level=0, sort=False)
    calls = by_prefix["calls"].sum()
    columns: dict[str, pd.Series] = {}
    for column, label in METRICS:
        total = by_prefix[f"{column}_sum"].sum()
        columns[f"Total {label} (ns)"] = total.astype(np.int64)
        columns[f"Avg. {label} (ns)"] = (total / calls).round(1)
        columns[f"Min {label} (ns)"] = by_prefix[f"{column}_min"].min().astype(np.int64)
        columns[f"Max {label} (ns)"] = by_prefix[f"{column}_max"].max().astype(np.int64)
    table = pd.DataFrame(columns)
    # distinct ops per prefix, from the distinct (path, op) pairs
    using = op_usage(inst)
    ops = pd.DataFrame({"path": path, "key": inst["key"].to_numpy(),
                        "tc_eligible": inst["tc_eligible"].to_numpy(dtype=bool)}).drop_duplicates(["path", "key"])
    ops["using_tc"] = using.reindex(ops["key"].to_numpy()).to_numpy(dtype=bool)
    ops = ops.merge(prefixes, on="path").drop_duplicates(["prefix", "key"])
    distinct = ops.groupby("prefix", sort=False)[["tc_eligible", "using_tc"]].sum()
    table.insert(0, "Num Ops Using TC", distinct["using_tc"].reindex(table.index).to_numpy())
    table.insert(0, "Num TC Eligible Ops", distinct["tc_eligible"].reindex(table.index).to_numpy())
    table.insert(0, "Num Calls Aggregated", calls.reindex(table.index).to_numpy())
    table = table.rename_axis("Name").reset_index().sort_values("Name", kind="stable")
    return Report("group_node", "group_node", (Section("Group Op Report", table[COLUMNS].reset_index(drop=True)),))
