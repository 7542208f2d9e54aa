"""Expert systems report: problems found in the aggregated iterations, with evidence and fixes.

One row per finding, sorted by time at stake per iteration (largest first; findings without an
estimate last). DLProf's columns come first (``Problem``, ``Recommendation``), then dlagg's. A
second section lists every detector and whether it fired, stayed silent, or could not run for
lack of data, so an empty report is distinguishable from a profile nothing could be checked on.
"""

from __future__ import annotations

import pandas as pd

from ..expert.base import Finding
from .base import Report, ReportContext, Section, report

COLUMNS = ("Problem", "Recommendation", "Severity", "Evidence", "Iterations", "Ops", "Kernels",
           "Time At Stake Per Iteration (ns)", "Estimate", "Detector")


def findings_table(findings: list[Finding]) -> pd.DataFrame:
    stake = pd.array([None if f.time_at_stake_ns is None else round(f.time_at_stake_ns) for f in findings],
                     dtype="Int64")
    table = pd.DataFrame({
        "Problem": [f.problem for f in findings],
        "Recommendation": [f.recommendation for f in findings],
        "Severity": [f.severity for f in findings],
        "Evidence": [f.evidence for f in findings],
        "Iterations": [f.iterations for f in findings],
        "Ops": [f.ops for f in findings],
        "Kernels": [f.kernels for f in findings],
        "Time At Stake Per Iteration (ns)": stake,
        "Estimate": [f.estimate for f in findings],
        "Detector": [f.detector for f in findings],
    }, columns=list(COLUMNS))
    for column in COLUMNS:
        if column != "Time At Stake Per Iteration (ns)":
            table[column] = table[column].astype(object)
    return table


@report("expert_systems")
def build(ctx: ReportContext) -> Report:
    """Problems found (GPU idle, input pipeline, launch bound, syncs, copies, AMP, ...) ranked by time at stake."""
    from ..expert import run_detectors  # imported here: the detectors import other reports' modules

    findings, outcomes = run_detectors(ctx)
    detectors = pd.DataFrame({
        "Detector": [o.detector for o in outcomes],
        "Status": [o.status for o in outcomes],
        "Missing Data": [o.reason for o in outcomes],
    }, dtype=object)
    stakes = [f.time_at_stake_ns for f in findings if f.time_at_stake_ns is not None]
    return Report(
        "expert_systems",
        "expert_systems",
        (Section("Expert Systems Feedback", findings_table(findings)), Section("Detectors", detectors)),
        scalars={"expert_findings": float(len(findings)),
                 "expert_top_time_at_stake_ns": float(max(stakes)) if stakes else 0.0},
    )


def feedback_text(built: Report) -> str:
    """The findings as DLProf printed them on stdout."""
    table = built.table
    lines = [f"Expert Systems Feedback: {len(table)} issue{'s' if len(table) != 1 else ''} detected."]
    for row in table.itertuples(index=False):
        lines += ["", "Problem detected:", f"  {row.Problem}", "Recommended change:", f"  {row.Recommendation}"]
        stake = row[COLUMNS.index("Time At Stake Per Iteration (ns)")]
        if not pd.isna(stake):
            lines.append(f"  (severity {row.Severity}; about {stake / 1e6:,.3f} ms per iteration at stake)")
        else:
            lines.append(f"  (severity {row.Severity})")
    return "\n".join(lines)
