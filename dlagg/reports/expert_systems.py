"""Expert systems report: problems found in the aggregated iterations, with evidence and fixes.

One row per finding, sorted by time at stake per iteration (largest first; findings without an
estimate last). DLProf's columns come first (``Problem``, ``Recommendation``), then dlagg's. A
second table lists every detector and whether it fired, stayed silent, or could not run for
lack of data, so an empty report is distinguishable from a profile nothing could be checked on.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..context import RankContext
from ..expert import Finding, run_detectors
from .base import Report, report
from .figures import NS, Field, Table

FIELDS = (
    Field("problem", "Problem"),
    Field("recommendation", "Recommendation"),
    Field("severity", "Severity"),
    Field("evidence", "Evidence"),
    Field("iterations", "Iterations"),
    Field("ops", "Ops"),
    Field("kernels", "Kernels"),
    Field("time_at_stake_ns", "Time At Stake Per Iteration (ns)", NS),
    Field("estimate", "Estimate"),
    Field("detector", "Detector"),
)
DETECTOR_FIELDS = (
    Field("detector", "Detector"),
    Field("status", "Status"),
    Field("missing_data", "Missing Data"),
)


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    stake = pd.array([None if f.time_at_stake_ns is None else round(f.time_at_stake_ns) for f in findings],
                     dtype="Int64")
    columns = {f.key: pd.Series([getattr(finding, f.key) for finding in findings], dtype=object)
               for f in FIELDS if f.key != "time_at_stake_ns"}
    frame = pd.DataFrame({**columns, "time_at_stake_ns": stake})
    return frame[[f.key for f in FIELDS]]


@report("expert_systems")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Problems found (GPU idle, input pipeline, launch bound, syncs, copies, AMP, ...) ranked by time at stake."""
    findings, outcomes = run_detectors(ctx)
    detectors = pd.DataFrame({
        "detector": [o.detector for o in outcomes],
        "status": [o.status for o in outcomes],
        "missing_data": [o.reason for o in outcomes],
    }, dtype=object)
    return Report("expert_systems", "expert_systems", (
        Table("findings", "Expert Systems Feedback", FIELDS, findings_frame(findings)),
        Table("detectors", "Detectors", DETECTOR_FIELDS, detectors),
    ))


def feedback_text(built: Report) -> str:
    """The findings as DLProf printed them on stdout."""
    table = built.main.frame
    lines = [f"Expert Systems Feedback: {len(table)} issue{'s' if len(table) != 1 else ''} detected."]
    for row in table.itertuples(index=False):  # one per finding
        lines += ["", "Problem detected:", f"  {row.problem}", "Recommended change:", f"  {row.recommendation}"]
        if not pd.isna(row.time_at_stake_ns):
            stake = row.time_at_stake_ns / 1e6
            lines.append(f"  (severity {row.severity}; about {stake:,.3f} ms per iteration at stake)")
        else:
            lines.append(f"  (severity {row.severity})")
    return "\n".join(lines)
