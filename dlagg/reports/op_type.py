"""Op Type report: one row per normalised op type (conv2d, linear, ...) over the aggregated iterations."""

from __future__ import annotations

import pandas as pd

from ..ops.aggregate import metric_stats, stat_columns
from .base import Report, ReportContext, Section, report
from .detail import no_ops_warning

COLUMNS = ["Op Type", "# Ops", "# Calls", *stat_columns()]


@report("op_type")
def build(ctx: ReportContext) -> Report:
    """Per op type: number of ops and calls, CPU/GPU time, CPU overhead and GPU idle."""
    inst = ctx.op_instances
    if inst.empty:
        table = pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
        return Report("op_type", "op_type", (Section("Op Type Summary Report", table),),
                      warnings=no_ops_warning(ctx, "op_type"))
    table = metric_stats(inst, "op_type")
    grouped = inst.groupby("op_type", sort=False)
    table.insert(0, "# Calls", grouped.size().reindex(table.index).to_numpy())
    table.insert(0, "# Ops", grouped["key"].nunique().reindex(table.index).to_numpy())
    table = table.rename_axis("Op Type").reset_index()
    table = table.sort_values(["Total GPU Time (ns)", "Op Type"], ascending=[False, True], kind="stable")
    return Report("op_type", "op_type", (Section("Op Type Summary Report", table[COLUMNS].reset_index(drop=True)),))
