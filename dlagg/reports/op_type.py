"""Op Type report: one row per normalised op type (conv2d, linear, ...) over the aggregated iterations."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..context import RankContext
from .base import Report, report
from .detail import empty, no_ops_warning
from .figures import COUNT, KEY, SUM, Field, Table
from .op_stats import METRIC_FIELDS, metric_columns

FIELDS = (
    Field("op_type", "Op Type", merge=KEY),
    Field("ops", "# Ops", COUNT, merge=SUM),
    Field("calls", "# Calls", COUNT, merge=SUM),
    *METRIC_FIELDS,
)


@report("op_type")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per op type: number of ops and calls, CPU/GPU time, CPU overhead and GPU idle."""
    inst = ctx.op_instances
    if inst.empty:
        return Report("op_type", "op_type", (Table("op_types", "Op Type Summary Report", FIELDS, empty(FIELDS)),),
                      warnings=no_ops_warning(ctx, "op_type"))
    grouped = inst.groupby("op_type", sort=False)
    calls = grouped.size()
    table = pd.DataFrame({"ops": grouped["key"].nunique(), "calls": calls, **metric_columns(grouped, calls)})
    table = table.rename_axis("op_type").reset_index()
    table = table.sort_values(["gpu_time_total_ns", "op_type"], ascending=[False, True], kind="stable")
    frame = table[[f.key for f in FIELDS]].reset_index(drop=True)
    return Report("op_type", "op_type", (Table("op_types", "Op Type Summary Report", FIELDS, frame),))
