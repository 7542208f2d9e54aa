"""The ranks and collectives reports, and the findings only several ranks together can show.

Built once per job from every rank's figures (``comm`` computed each rank's collectives and
per-iteration communication figures; ``comm.match`` aligned the clocks and matched collectives).

ranks: one row per rank; figures are per-iteration means over the rank's aggregated iterations:

- Avg Iteration Time: the rank's iteration windows;
- Compute Kernel Time: union of the kernels that are not communication, inside the window;
- Communication Kernel Time: union of the communication kernels inside the window;
- Communication Wait Time: over the collectives launched in the iteration, the rank's duration minus
  the collective's shortest duration over ranks (its true cost);
- Exposed Communication Time: communication kernel time not overlapped by compute kernels on that GPU;
- GPU Idle Time: the window minus the time any kernel, copy or memset runs;
- Launch Lateness: over the same collectives, the rank's arrival (its kernel's start on the GPU,
  job clock) minus the earliest rank's;
- Clock Offset: what was added to the rank's timestamps to put them on the job's clock (the first
  file's), and Clock Residual: the median distance of its collectives' ends from their median end.

collectives: one row per collective instance and rank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pandas as pd

from ..comm.collectives import UNCOVERED, algorithm, bus_bandwidth, operation
from ..comm.match import KEY
from ..expert.base import MEDIUM_SHARE, Finding, iteration_list, ms, pct, severity_of
from .base import JOB, JobFigures, Report, report
from .figures import BYTES, COUNT, NS, PERCENT, Field, Table

RANK_FIELDS = (
    Field("rank", "Rank"),
    Field("file", "File"),
    Field("pid", "PID"),
    Field("gpu", "GPU"),
    Field("iterations", "Iterations", COUNT),
    Field("iteration_time_ns", "Avg Iteration Time (ns)", NS, digits=1),
    Field("gpu_utilization_pct", "GPU Utilization %", PERCENT, digits=1),
    Field("compute_kernel_ns", "Compute Kernel Time (ns)", NS, digits=1),
    Field("comm_kernel_ns", "Communication Kernel Time (ns)", NS, digits=1),
    Field("comm_wait_ns", "Communication Wait Time (ns)", NS, digits=1),
    Field("exposed_comm_ns", "Exposed Communication Time (ns)", NS, digits=1),
    Field("gpu_idle_ns", "GPU Idle Time (ns)", NS, digits=1),
    Field("launch_lateness_ns", "Launch Lateness (ns)", NS, digits=1),
    Field("clock_offset_ns", "Clock Offset (ns)", NS),
    Field("clock_residual_ns", "Clock Residual (ns)", NS, digits=1),
    Field("collectives", "Collectives", COUNT),
    Field("arrived_last", "Arrived Last", COUNT),
    Field("host", "Host"),
)
ITERATION_FIELDS = (
    Field("rank", "Rank"),
    Field("iteration", "Iteration"),
    Field("duration_ns", "Iteration Time (ns)", NS),
    Field("compute_kernel_ns", "Compute Kernel Time (ns)", NS, digits=1),
    Field("comm_kernel_ns", "Communication Kernel Time (ns)", NS, digits=1),
    Field("comm_wait_ns", "Communication Wait Time (ns)", NS),
    Field("exposed_comm_ns", "Exposed Communication Time (ns)", NS, digits=1),
    Field("gpu_idle_ns", "GPU Idle Time (ns)", NS, digits=1),
    Field("launch_lateness_ns", "Launch Lateness (ns)", NS),
)
COLLECTIVE_FIELDS = (
    Field("iteration", "Iteration"),
    Field("collective", "Collective"),
    Field("name", "Name"),
    Field("nvtx", "NVTX Range"),
    Field("rank", "Rank"),
    Field("start_ns", "Start (ns, job clock)", NS),
    Field("duration_ns", "Duration (ns)", NS),
    Field("wait_ns", "Wait (ns)", NS),
    Field("arrived_last", "Arrived Last"),
    Field("lateness_ns", "Lateness (ns)", NS),
    Field("stream", "Stream"),
    Field("operation", "Operation"),
    Field("algorithm", "Algorithm"),
    Field("bytes", "Size (B)", BYTES),
    Field("bus_bandwidth_gbs", "Bus Bandwidth (GB/s)", digits=2),
    Field("group", "Process Group"),
)
# A rank is the straggler when it arrives last at more than this share of the collectives...
STRAGGLER_MIN_LAST = 0.5
# ... and the others wait for it at least this share of a typical iteration (MEDIUM_SHARE: noise level).
STRAGGLER_MIN_STAKE = MEDIUM_SHARE
# Communication that no compute hides, as a share of the iteration, from which it is worth a finding.
EXPOSED_COMM_MIN_SHARE = 0.1


def aggregated_collectives(job: JobFigures) -> pd.DataFrame:
    """Matched and unmatched collectives of each rank's aggregated iterations (job clock)."""
    if job.matched is None:
        return pd.DataFrame(columns=[*KEY, "rank", "nvtx", "start", "end", "duration", "wait", "lateness", "last",
                                     "matched"])
    table = job.matched.collectives
    ranks = np.asarray(job.rank_numbers, dtype=np.int64)  # ordered by rank
    first = np.asarray([r.iterations.start for r in job.ranks], dtype=np.int64)
    last = np.asarray([r.iterations.stop for r in job.ranks], dtype=np.int64)
    rank = table["rank"].to_numpy()
    at = np.minimum(np.searchsorted(ranks, rank), len(ranks) - 1)
    iteration = table["iteration"].to_numpy()
    return table[(ranks[at] == rank) & (iteration >= first[at]) & (iteration <= last[at])]


def rank_table(job: JobFigures) -> pd.DataFrame:
    colls = aggregated_collectives(job)
    ranks = job.rank_numbers
    means = job.comm_iterations.groupby("rank").mean().reindex(ranks)
    sums = colls.groupby("rank")[["wait", "lateness", "last"]].sum().reindex(ranks, fill_value=0)
    counts = colls.groupby("rank").size().reindex(ranks, fill_value=0)
    n = np.asarray([r.iterations.stop - r.iterations.start + 1 for r in job.ranks], dtype=np.float64)
    offsets, residual = job.offsets, job.matched.residual if job.matched else {}
    return pd.DataFrame({
        "rank": ranks,
        "file": [r.source.path.name for r in job.ranks],
        "pid": [r.source.pid for r in job.ranks],
        "gpu": [",".join(str(d) for d in r.source.devices) for r in job.ranks],
        "iterations": [r.iterations.count for r in job.ranks],
        "iteration_time_ns": means["duration"].to_numpy(dtype=np.float64),
        "gpu_utilization_pct": 100.0 * (means["kernels"] / means["duration"]).fillna(0.0).to_numpy(dtype=np.float64),
        "compute_kernel_ns": means["compute"].to_numpy(dtype=np.float64),
        "comm_kernel_ns": means["comm"].to_numpy(dtype=np.float64),
        "comm_wait_ns": sums["wait"].to_numpy(dtype=np.float64) / n,
        "exposed_comm_ns": means["exposed"].to_numpy(dtype=np.float64),
        "gpu_idle_ns": means["idle"].to_numpy(dtype=np.float64),
        "launch_lateness_ns": sums["lateness"].to_numpy(dtype=np.float64) / n,
        "clock_offset_ns": [int(offsets.get(rank, 0)) for rank in ranks],
        "clock_residual_ns": [float(residual.get(rank, 0.0)) for rank in ranks],
        "collectives": counts.to_numpy(dtype=np.int64),
        "arrived_last": sums["last"].to_numpy(dtype=np.int64),
        "host": [r.source.host for r in job.ranks],
    }, columns=[f.key for f in RANK_FIELDS])


def iteration_table(job: JobFigures) -> pd.DataFrame:
    """The ranks report's figures per rank and aggregated iteration (for charts)."""
    if not any(r.comm is not None for r in job.ranks):
        return pd.DataFrame({f.key: pd.Series(dtype=np.int64) for f in ITERATION_FIELDS})
    per = job.comm_iterations
    sums = (aggregated_collectives(job).groupby(["rank", "iteration"])[["wait", "lateness"]].sum()
            .reindex(pd.MultiIndex.from_arrays([per["rank"].to_numpy(), per["iteration"].to_numpy()])))
    return pd.DataFrame({
        "rank": per["rank"].to_numpy(),
        "iteration": per["iteration"].to_numpy(),
        "duration_ns": per["duration"].to_numpy(),
        "compute_kernel_ns": per["compute"].to_numpy(),
        "comm_kernel_ns": per["comm"].to_numpy(),
        "comm_wait_ns": sums["wait"].fillna(0).to_numpy(dtype=np.int64),
        "exposed_comm_ns": per["exposed"].to_numpy(),
        "gpu_idle_ns": per["idle"].to_numpy(),
        "launch_lateness_ns": sums["lateness"].fillna(0).to_numpy(dtype=np.int64),
    })[[f.key for f in ITERATION_FIELDS]]


@report("ranks", scope=JOB, only_with_ranks=True)
def build_ranks(job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Per rank: iteration time, compute and communication kernel time, waits, exposed communication, lateness."""
    warnings = job.matched.warnings if job.matched else ()
    return Report("ranks", "ranks", (
        Table("ranks", "Ranks Report", RANK_FIELDS, rank_table(job)),
        Table("iterations", "Ranks per Iteration", ITERATION_FIELDS, iteration_table(job), csv=False),
    ), warnings=tuple(warnings))


def collective_table(job: JobFigures) -> pd.DataFrame:
    colls = aggregated_collectives(job)
    if colls.empty:
        return pd.DataFrame({f.key: pd.Series(dtype=object) for f in COLLECTIVE_FIELDS})
    first = colls.groupby(KEY, sort=False)["start"].transform("min")
    number = (colls.assign(first=first.to_numpy()).drop_duplicates(KEY).sort_values(["iteration", "first"],
                                                                                    kind="stable"))
    number["collective"] = number.groupby("iteration").cumcount()
    order = colls.merge(number[[*KEY, "collective"]], on=KEY, how="left")
    frame = pd.DataFrame({
        "iteration": order["iteration"].to_numpy(),
        "collective": order["collective"].to_numpy(),
        "name": order["name"].to_numpy(dtype=object),
        "nvtx": order["nvtx"].to_numpy(dtype=object),
        "rank": order["rank"].to_numpy(),
        "start_ns": order["start"].to_numpy(),
        "duration_ns": order["duration"].to_numpy(),
        "wait_ns": order["wait"].to_numpy(),
        "arrived_last": order["last"].to_numpy(dtype=bool),
        "lateness_ns": order["lateness"].to_numpy(),
        "stream": order["stream"].to_numpy(),
        **_message_figures(order, len(job.rank_numbers)),
    })
    return frame.sort_values(["iteration", "collective", "rank"], kind="stable").reset_index(drop=True)


def _message_figures(order: pd.DataFrame, ranks: int) -> dict[str, object]:
    """Per collective row: the operation and NCCL's algorithm (from the kernel's name), the message size where the
    profile says it, and the bus bandwidth (nccl-tests' definition) over the transfer time: the instance's shortest
    duration on any rank (duration less wait), as the time the others spend waiting for the last to arrive moves
    no data. No bandwidth for a collective not found on every rank (its wait is not known)."""
    names, inverse = np.unique(order["name"].to_numpy(dtype=object).astype(str), return_inverse=True)
    operations = np.array([operation(n) for n in names], dtype=object)[inverse]  # distinct kernel names
    size = order["bytes"].to_numpy(dtype=np.int64) if "bytes" in order else np.full(len(order), -1, np.int64)
    group_ranks = order["group_ranks"].to_numpy(dtype=np.int64) if "group_ranks" in order else np.zeros(len(order))
    group_ranks = np.where(group_ranks > 0, group_ranks, ranks)
    transfer = (order["duration"].to_numpy() - order["wait"].to_numpy()).astype(np.float64)
    transfer[~order["matched"].to_numpy(dtype=bool)] = np.nan
    bandwidth = np.full(len(order), np.nan)
    for op in np.unique(operations.astype(str)):  # a few kinds of collective
        at = operations == op
        bandwidth[at] = bus_bandwidth(op, size[at], transfer[at], group_ranks[at])
    return {
        "operation": operations,
        "algorithm": np.array([algorithm(n) for n in names], dtype=object)[inverse],
        "bytes": pd.Series(pd.array(np.where(size >= 0, size, 0), dtype="Int64")).where(size >= 0).array,
        "bus_bandwidth_gbs": bandwidth,
        "group": order["group"].to_numpy(dtype=object) if "group" in order else np.full(len(order), "", object),
    }


@report("collectives", scope=JOB, only_with_ranks=True)
def build_collectives(job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Per collective instance and rank: aligned start, duration, wait, and whether the rank arrived last."""
    frame = collective_table(job)
    warnings = () if len(frame) else ("collectives: no communication kernel (NCCL, RCCL, NVSHMEM) ran in the "
                                      "aggregated iterations",)
    return Report("collectives", "collectives", (Table("collectives", "Collectives Report", COLLECTIVE_FIELDS,
                                                       frame),), warnings=warnings)


# --- findings -----------------------------------------------------------------------------------

def _typical_iteration(job: JobFigures) -> float:
    values = job.comm_iterations["duration"].to_numpy(dtype=np.float64)
    return float(np.median(values)) if len(values) else 0.0


def straggler(job: JobFigures) -> list[Finding]:
    """The rank the others wait for at the collectives, what the step would gain if it were as fast as they are,
    and where in its step it loses the time."""
    if len(job.ranks) < 2:
        return []
    colls = aggregated_collectives(job)
    colls = colls[colls["matched"].to_numpy(dtype=bool)]
    if colls.empty:
        return []
    n_collectives = colls.drop_duplicates(KEY).shape[0]
    last = colls[colls["last"].to_numpy(dtype=bool)].groupby("rank").size()
    rank = int(last.idxmax())
    share_last = float(last.max()) / n_collectives
    if share_last <= STRAGGLER_MIN_LAST:
        return []
    typical = _typical_iteration(job)
    own = _own_time(job)
    saving = _saving(own, rank)
    stake = min(float(np.median(saving.to_numpy())), typical) if len(saving) else 0.0
    if stake < STRAGGLER_MIN_STAKE * typical:
        return []
    table = rank_table(job).set_index("rank")
    wait = float(table.drop(index=rank)["comm_wait_ns"].mean())  # the ranks report's figure, the others' mean
    where = _cause(job, own, rank)
    source = next(r for r in job.ranks if r.source.rank == rank).source
    gpu = ",".join(str(d) for d in source.devices) or "none"
    return [Finding(
        detector="straggler",
        problem=(f"Rank {rank} is a straggler: it arrives last at {share_last:.0%} of the collectives, where the "
                 f"other ranks wait {ms(wait)} per iteration (ranks report: Communication Wait Time); the step "
                 f"would be about {ms(stake)} shorter if it were as fast as the others"),
        recommendation=(f"Make rank {rank} as fast as the others: {where[1]} Data-parallel ranks should do the "
                        "same work: check for uneven batches or sequence lengths, work only this rank does (logging, "
                        "checkpointing, evaluation on rank 0), a slower GPU or host (clocks, thermal limits, other "
                        "processes), and compare this rank's kernels with another rank's (--per_rank=true)."),
        evidence=(f"rank {rank} (GPU {gpu}, {source.path.name}, pid {source.pid}) arrived last at "
                  f"{int(last.max())} of {n_collectives} collectives; the other ranks wait {ms(wait)} per iteration "
                  f"at the collectives (ranks report: Communication Wait Time, Launch Lateness; collectives report: "
                  f"Arrived Last); in a median iteration the other ranks work on their own for "
                  f"{ms(float(np.median(_others_own(own, rank).to_numpy())))} of {ms(typical)}; {where[0]}"),
        time_at_stake_ns=stake,
        estimate=("what the step would save if this rank were as fast as the others: the median per iteration of "
                  "its iteration time less the longest time another rank works on its own (its iteration less the "
                  "time its host waits for the GPU, or less the time its GPU idles or waits at the collectives, "
                  "whichever is longer). An order of magnitude, not a bound: the others' hosts may slow down once "
                  "this rank works as much as they do, or wait for it without a synchronising call (docs/ranks.md)"),
        iterations=iteration_list(saving.index.to_numpy()),
    )]


def _own_time(job: JobFigures) -> pd.DataFrame:
    """Per rank and aggregated iteration: the iteration, and the time the rank works on its own: the longer of its
    host's (the iteration less the time the host waits for the GPU) and its GPU's (the iteration less the time the
    GPU idles or waits at the collectives for other ranks)."""
    per = job.comm_iterations
    index = pd.MultiIndex.from_arrays([per["rank"].to_numpy(), per["iteration"].to_numpy()])
    wait = aggregated_collectives(job).groupby(["rank", "iteration"])["wait"].sum().reindex(index).fillna(0.0)
    duration = per["duration"].to_numpy(dtype=np.float64)
    host = duration - per["blocked"].to_numpy(dtype=np.float64)
    device = duration - per["idle"].to_numpy(dtype=np.float64) - wait.to_numpy(dtype=np.float64)
    return pd.DataFrame({"rank": per["rank"].to_numpy(), "iteration": per["iteration"].to_numpy(),
                         "duration": duration, "host": host, "gpu": device, "own": np.maximum(host, device)})


def _others_own(own: pd.DataFrame, rank: int) -> pd.Series:
    """Per iteration, the longest own time of the ranks other than `rank`."""
    return own[own["rank"].to_numpy() != rank].groupby("iteration")["own"].max()


def _saving(own: pd.DataFrame, rank: int) -> pd.Series:
    """Per iteration, what the step would save if `rank` needed no more time than the other ranks work on their
    own: its iteration time less the others' longest own time (at least 0)."""
    mine = own[own["rank"].to_numpy() == rank].set_index("iteration")["duration"]
    others = _others_own(own, rank).reindex(mine.index)
    return (mine - others).dropna().clip(lower=0.0)


def _cause(job: JobFigures, own: pd.DataFrame, rank: int) -> tuple[str, str]:
    """(evidence, advice): the class of the straggler's extra time, with the figure behind it: more GPU kernel time
    than the other ranks, or host time (in a named sub-range of the key node, or outside every sub-range)."""
    mine = own[own["rank"].to_numpy() == rank]
    others = own[own["rank"].to_numpy() != rank]
    per = job.comm_iterations
    compute = per.groupby("rank")["compute"].mean()
    extra_gpu = float(compute.get(rank, 0.0) - compute.drop(index=rank).median())
    extra_host = float(mine["host"].median() - others.groupby("rank")["host"].median().median())
    if mine["gpu"].median() > mine["host"].median() and extra_gpu > extra_host:
        return (f"its GPU is what it waits for: its compute kernels take {ms(extra_gpu)} more per iteration than the "
                f"other ranks' (ranks report: Compute Kernel Time {ms(float(compute.get(rank, 0.0)))} vs "
                f"{ms(float(compute.drop(index=rank).median()))})",
                f"its GPU runs {ms(extra_gpu)} more compute kernel time per iteration than the other ranks; compare "
                "its kernels with another rank's (kernel report, --per_rank=true).")
    return _where_it_loses(job, rank)


def _where_it_loses(job: JobFigures, rank: int) -> tuple[str, str]:
    """(evidence, advice) naming the key node's sub-range where `rank` spends most more than the others."""
    comms = [(r.source.rank, r.comm) for r in job.ranks if r.comm is not None and len(r.comm.parts)]
    stacked = pd.DataFrame({
        "rank": np.repeat(np.asarray([k for k, _ in comms], dtype=np.int64), [len(c.parts) for _, c in comms]),
        "part": np.concatenate([c.parts["part"].to_numpy(dtype=object) for _, c in comms]) if comms else [],
        "time": np.concatenate([c.parts["time"].to_numpy() for _, c in comms]) if comms else [],
    })
    mean = stacked.groupby(["part", "rank"])["time"].mean().unstack("rank")  # sub-range x rank
    if rank not in mean.columns or mean.shape[1] < 2:
        return ("its step has no NVTX sub-ranges to compare with the other ranks'",
                "add NVTX ranges for the phases of the step (data, forward, backward, optimizer) to see where.")
    mine = mean[rank].dropna()
    others = mean.drop(columns=rank).median(axis=1).reindex(mine.index).fillna(0.0)
    excess = (mine - others).sort_values(ascending=False)
    part, extra = str(excess.index[0]), float(excess.iloc[0])
    label = "time inside the key range outside every sub-range" if part == UNCOVERED else f"sub-range '{part}'"
    detail = ", ".join(f"{'outside sub-ranges' if k == UNCOVERED else k} {ms(mine[k])} vs {ms(others[k])}"
                       for k in excess.index[:3])
    return (f"per iteration it spends most more than the other ranks in {label}: {ms(extra)} more (this rank vs "
            f"the others' median: {detail})",
            f"its {label} takes {ms(extra)} longer per iteration than on the other ranks; start there.")


def communication(job: JobFigures) -> list[Finding]:
    """Communication that no compute hides: how much is waiting for other ranks, how much is transfer."""
    frame = job.comm_iterations
    if frame.empty or frame["comm"].sum() == 0:
        return []
    typical = _typical_iteration(job)
    exposed = frame.groupby("iteration")["exposed"].mean()
    stake = min(float(np.median(exposed.to_numpy())), typical)
    if stake < EXPOSED_COMM_MIN_SHARE * typical:
        return []
    colls = aggregated_collectives(job)
    n_iterations = frame.groupby("rank").size().max()
    comm = float(frame["comm"].mean())
    wait = float(colls["wait"].sum()) / len(job.ranks) / max(n_iterations, 1)
    transfer = max(comm - wait, 0.0)
    overlap = 1.0 - float(frame["exposed"].sum()) / float(frame["comm"].sum())
    if wait >= transfer:
        recommendation = ("Most communication time is waiting for other ranks, not moving data: balance the ranks' "
                          "work first (see the straggler finding and the ranks report's Launch Lateness); faster "
                          "links or NCCL settings would not help while ranks arrive at different times.")
    else:
        recommendation = ("Most communication time is transfer that runs while no compute does: overlap it with the "
                          "backward pass (DistributedDataParallel overlaps gradient all-reduces with backward: tune "
                          "bucket_cap_mb, keep static_graph/gradient_as_bucket_view on), communicate less often "
                          "(gradient accumulation with no_sync()), or less (bf16 gradient compression hooks, "
                          "FSDP/ZeRO sharding); check NCCL's algorithm and transport (NCCL_DEBUG=INFO) for the link.")
    return [Finding(
        detector="communication",
        problem=(f"Communication is exposed: {pct(stake, typical)} of a typical iteration the GPU runs communication "
                 "kernels and no compute"),
        recommendation=recommendation,
        evidence=(f"per iteration and rank (ranks report): communication kernels {ms(comm)}, of which waiting for "
                  f"other ranks {ms(wait)} and transfer {ms(transfer)}; {overlap:.0%} of the communication time "
                  f"overlaps compute kernels; exposed {ms(float(frame['exposed'].mean()))} on average"),
        time_at_stake_ns=stake,
        estimate=("upper bound: median per iteration of the ranks' mean exposed communication time; hiding all of "
                  "it behind compute (or removing the waits) saves at most this"),
        iterations=iteration_list(np.unique(frame["iteration"].to_numpy())),
    )]


# Per-rank findings that, on a rank other than the straggler, are at least partly the wait for it: its GPU idles,
# or its host blocks at a synchronisation, until the collectives the straggler holds up complete.
WAITING_DETECTORS = ("underutilized_gpu", "host_sync")


def straggler_consequences(frame: pd.DataFrame, job: JobFigures) -> tuple[pd.DataFrame, np.ndarray]:
    """The job's findings (`frame`: a ``rank`` column, -1 for the job's own) with those that follow from the
    straggler said so, and which they are (ranked below the cause): the exposed communication when the straggler
    finding is there, and the waiting kinds of finding (WAITING_DETECTORS) of another rank."""
    consequence = np.zeros(len(frame), dtype=bool)
    fired = (frame["detector"] == "straggler").to_numpy()
    if not fired.any():
        return frame, consequence
    found = re.match(r"Rank (\d+) is a straggler", str(frame["problem"].to_numpy()[fired][0]))
    late = int(found.group(1)) if found else -1
    rank = frame["rank"].to_numpy()
    consequence = (frame["detector"] == "communication").to_numpy() | (
        frame["detector"].isin(WAITING_DETECTORS).to_numpy() & (rank >= 0) & (rank != late))
    said = np.where(consequence, f" (much of it follows from the straggler, rank {late}: see that finding)", "")
    return frame.assign(problem=frame["problem"].astype(str) + said), consequence


def job_findings(job: JobFigures) -> list[Finding]:
    """The findings only a job's ranks together show, each with its severity from its share of a typical iteration
    (as a rank's findings get theirs: expert.run_detectors)."""
    typical = _typical_iteration(job)
    return [replace(f, severity=severity_of(f, typical)) for f in (*straggler(job), *communication(job))]
