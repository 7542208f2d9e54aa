"""Op Type report: one row per normalised op type (conv2d, linear, ...) over the aggregated iterations.

Derived from the detail report's op rows (one definition of every per-op figure): per op type,
the ops of that type, their calls, and the per-call statistics combined (totals add up, minima and
maxima of the ops' minima and maxima, averages = total / calls). Rows are ordered by type name, as
DLProf's. With --ncu_report, each op type also gets the roofline of its ops' ncu-profiled kernels
(``roofline.RATE_FIELDS``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ..context import RankContext
from .base import JobFigures, Report, merges, report
from .detail import empty
from .figures import COUNT, KEY, SUM, Field, Table, derive_averages, summed_over
from .op_stats import METRIC_FIELDS, average_pairs
from .roofline import carry_rates, rate_columns

FIELDS = (
    Field("op_type", "Op Type", merge=KEY),
    Field("ops", "# Ops", COUNT, merge=SUM),
    Field("calls", "# Calls", COUNT, merge=SUM),
    *METRIC_FIELDS,
)


def by_type(ops: pd.DataFrame) -> pd.DataFrame:
    """Op type rows from op rows (the detail report's figures)."""
    grouped = ops.groupby("op_type", sort=False)
    columns: dict[str, pd.Series] = {"ops": grouped.size(), "calls": grouped["calls"].sum()}
    for f in METRIC_FIELDS:
        if not f.key.endswith("_avg_ns"):
            how = "sum" if f.key.endswith("_total_ns") else "min" if f.key.endswith("_min_ns") else "max"
            columns[f.key] = grouped[f.key].agg(how)
    table = derive_averages(pd.DataFrame(columns), average_pairs("calls")).rename_axis("op_type").reset_index()
    table = table.sort_values("op_type", kind="stable")  # DLProf's order: by type name
    return table[[f.key for f in FIELDS]].reset_index(drop=True)


def build_from(detail: Report) -> Report:
    """The report from a detail report (one rank's, or several ranks' combined)."""
    ops = detail.main.frame
    if ops.empty:
        warnings = tuple(w.replace("detail:", "op_type:", 1) for w in detail.warnings if w.startswith("detail:"))
        return Report("op_type", "op_type", (Table("op_types", "Op Type Summary Report", FIELDS, empty(FIELDS)),),
                      warnings=warnings)
    return Report("op_type", "op_type", (Table("op_types", "Op Type Summary Report", FIELDS, by_type(ops)),))


@report("op_type", depends=("detail",))
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per op type: number of ops and calls, CPU/GPU time, CPU overhead and GPU idle."""
    built = build_from(deps["detail"])
    if ctx.options.ncu_report is None:
        return built
    fields, frame = rate_columns(ctx, built.main.fields, built.main.frame, ("op_type",))
    return Report(built.name, built.file_suffix, (Table(built.main.key, built.main.title, fields, frame),),
                  built.warnings)


@merges("op_type")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """From the job's combined detail report, as for one rank."""
    built = build_from(deps["detail"])
    table = carry_rates(summed_over(built.main, len(reports)), [r.main for r in reports], ("op_type",))
    return Report(built.name, built.file_suffix, (table,), built.warnings)
