"""Group report: one row per group path prefix (``/``, ``/forward/``, ``/<module>/net::forward/``, ...).

An op's group path is the chain of user NVTX ranges enclosing it on its thread (``forward``,
``layer1``), followed for DLProf function-stack markers by the directories of the stack. A row
aggregates every op call below its prefix: ``/`` holds all of them.
"""

from __future__ import annotations

import pandas as pd

from ..ops.aggregate import metric_stats, op_usage, path_prefixes, stat_columns
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
    using = op_usage(inst)
    inst = inst.assign(using_tc=using.reindex(inst["key"].to_numpy()).to_numpy())
    expanded = inst.merge(path_prefixes(inst["path"]), on="path")  # one row per (call, enclosing prefix)
    table = metric_stats(expanded, "prefix")
    grouped = expanded.groupby("prefix", sort=False)
    ops = expanded.drop_duplicates(["prefix", "key"])
    by_prefix = ops.groupby("prefix", sort=False)
    table.insert(0, "Num Ops Using TC", by_prefix["using_tc"].sum().reindex(table.index).to_numpy())
    table.insert(0, "Num TC Eligible Ops", by_prefix["tc_eligible"].sum().reindex(table.index).to_numpy())
    table.insert(0, "Num Calls Aggregated", grouped.size().reindex(table.index).to_numpy())
    table = table.rename_axis("Name").reset_index().sort_values("Name", kind="stable")
    return Report("group_node", "group_node", (Section("Group Op Report", table[COLUMNS].reset_index(drop=True)),))
