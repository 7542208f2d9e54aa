"""Expert systems report: problems found in the aggregated iterations, with evidence and fixes.

One row per finding, sorted by time at stake per iteration (largest first; findings without an
estimate last). DLProf's columns come first (``Problem``, ``Recommendation``), then dlagg's. The
CSV holds this one table with DLProf's two columns alone, as DLProf's file does, so that a script
reading it as one table reads problems only and one unpacking each row as ``problem, rec = row``
keeps working; dlagg's columns (severity, evidence, time at stake, ...) are in the JSON and in a
second CSV, ``<profile>_expert_systems_detail.csv`` (the same table with every column). A second
table, in the JSON and TensorBoard outputs only, lists every detector and whether it fired, stayed
silent, or could not run for lack of data, so an empty report is distinguishable from a profile nothing
could be checked on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..expert import Finding, run_detectors
from ..expert.base import LEADING, iteration_list
from ..model import stack_ranks
from .base import JobFigures, Report, merges, report
from .figures import NS, Field, Table
from .ranks import job_findings, straggler_consequences

FIELDS = (
    Field("problem", "Problem"),
    Field("recommendation", "Recommendation"),
    Field("severity", "Severity", csv=False),
    Field("evidence", "Evidence", csv=False),
    Field("iterations", "Iterations", csv=False),
    Field("ops", "Ops", csv=False),
    Field("kernels", "Kernels", csv=False),
    Field("time_at_stake_ns", "Time At Stake Per Iteration (ns)", NS, csv=False),
    Field("estimate", "Estimate", csv=False),
    Field("detector", "Detector", csv=False),
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


@report("expert_systems", detail_csv="expert_systems_detail")
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Problems found (GPU idle, input pipeline, launch bound, syncs, copies, AMP, ...) ranked by time at stake."""
    findings, outcomes = run_detectors(ctx)
    detectors = pd.DataFrame({
        "detector": [o.detector for o in outcomes],
        "status": [o.status for o in outcomes],
        "missing_data": [o.reason for o in outcomes],
    }, dtype=object)
    its = ctx.iterations
    durations = (its.ends - its.starts)[its.start:its.stop + 1]
    frame = findings_frame(findings)
    note = overlap_note(frame, float(np.median(durations)) if len(durations) else 0.0)
    return Report("expert_systems", "expert_systems", (
        Table("findings", "Expert Systems Feedback", FIELDS, frame, note=note),
        Table("detectors", "Detectors", DETECTOR_FIELDS, detectors, csv=False),
    ))


def overlap_note(frame: pd.DataFrame, iteration_ns: float) -> str:
    """A note when the findings' times at stake add up to more than a typical iteration (`iteration_ns`): each is
    what fixing its problem alone would save, and problems that share time (an idle GPU and the launches that
    leave it idle, a straggler and the others' waits) do not add up. Empty when they fit."""
    total = float(frame["time_at_stake_ns"].astype("Float64").fillna(0.0).sum())
    if iteration_ns <= 0 or total <= iteration_ns:
        return ""
    return (f"Times at stake overlap: they add up to {total / 1e6:.2f} ms per iteration, more than the "
            f"{iteration_ns / 1e6:.2f} ms of a typical iteration. Each is what fixing that problem alone would save "
            "at most; problems that share time do not add up.")


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
    if built.main.note:
        lines += ["", built.main.note]
    return "\n".join(lines)


@merges("expert_systems")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Each detector's finding of the rank where it has most at stake (with the ranks it fired on), and the
    findings only the ranks together show (straggler, communication); ranked by time at stake."""
    ranks = job.rank_numbers
    stacked = stack_ranks([r.main.frame for r in reports], ranks)
    fired = stacked.groupby("detector", sort=False)["rank"].agg(lambda values: iteration_list(values))
    worst = (stacked.assign(_stake=stacked["time_at_stake_ns"].astype("Float64").fillna(-1.0))
             .sort_values(["_stake", "rank"], ascending=[False, True], kind="stable").drop_duplicates("detector"))
    worst = worst.assign(ranks=fired.reindex(worst["detector"]).to_numpy(dtype=object),
                         # the figures a finding quotes are its rank's (a leading finding's words are DLProf's)
                         problem=worst["problem"].astype(str).where(
                             worst["detector"].isin(LEADING),
                             "On rank " + worst["rank"].astype(str) + ": " + worst["problem"].astype(str)),
                         evidence="rank " + worst["rank"].astype(str) + " (the rank with most at stake): "
                         + worst["evidence"].astype(str))
    job_found = findings_frame(job_findings(job)).assign(ranks="all")
    frame = pd.concat([worst.drop(columns=["_stake"]), job_found.assign(rank=-1)], ignore_index=True)
    frame, consequence = straggler_consequences(frame, job)
    # as each rank's: leading findings (a key node not found) first, then the causes by time at stake, then what
    # follows from the straggler
    frame = frame.assign(_lead=~frame["detector"].isin(LEADING), _after=consequence,
                         _stake=frame["time_at_stake_ns"].astype("Float64").fillna(-1.0)).sort_values(
        ["_lead", "_after", "_stake"], ascending=[True, True, False], kind="stable").drop(
        columns=["_lead", "_after", "_stake", "rank"])
    of_job = pd.DataFrame({"detector": ["straggler", "communication"],
                           "status": ["fired" if (job_found["detector"] == d).any() else "silent"
                                      for d in ("straggler", "communication")],
                           "missing_data": ["", ""]})
    detectors = pd.concat([_statuses(stack_ranks([r.table("detectors").frame for r in reports], ranks)), of_job],
                          ignore_index=True)
    fields = (*FIELDS, Field("ranks", "Ranks", csv=False))
    frame = frame[[f.key for f in fields]].reset_index(drop=True)
    typical = float(np.median(job.comm_iterations["duration"].to_numpy())) if len(job.comm_iterations) else 0.0
    return Report("expert_systems", "expert_systems", (
        Table("findings", "Expert Systems Feedback", fields, frame, note=overlap_note(frame, typical)),
        Table("detectors", "Detectors", DETECTOR_FIELDS, detectors[[f.key for f in DETECTOR_FIELDS]], csv=False),
    ))


def _statuses(rows: pd.DataFrame) -> pd.DataFrame:
    """Each detector's status over ranks (`rows`: every rank's, with its rank): 'fired on ranks 0-2', 'silent', or
    'not run' (and why); the detectors in order of first appearance."""
    detector = rows["detector"].to_numpy(dtype=object)
    status = rows["status"].to_numpy(dtype=object)
    rank = rows["rank"].to_numpy()
    missing = rows["missing_data"].to_numpy(dtype=object)
    out = []
    for name in pd.unique(detector):  # detectors, not events
        mine = detector == name
        fired = rank[mine & (status == "fired")]
        if len(fired):
            out.append((name, f"fired on ranks {iteration_list(fired)}", ""))
        elif (status[mine] == "not run").all():
            out.append((name, "not run", str(missing[mine][0])))
        else:
            out.append((name, "silent", ""))
    return pd.DataFrame(out, columns=["detector", "status", "missing_data"])
