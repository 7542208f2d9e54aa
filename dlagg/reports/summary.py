"""Summary report: system, wall-clock partition, iterations and kernel and op totals (DLProf's sections).

Besides DLProf's sections it holds two tables of per-iteration figures (not in the CSV): the time
partition of every iteration (``iterations``) and the GPU time per op type and iteration
(``op_type_iterations``), which the TensorBoard and HTML writers chart and a comparison samples.

Two figures DLProf titles "CPU Time (ns)" mean different things, and their keys say which:
``launch_api_time_ns`` in All Kernels (the CUDA calls that launched the work) and
``range_time_ns`` in All Ops (the ops' NVTX range durations).

With --ncu_report the Summary Report section ends with the iteration's FLOPs as Nsight Compute
measured them against the peak (model FLOPs utilization, ``roofline.mfu_lines``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from .. import __version__
from ..context import RankContext
from ..timeline.breakdown import CLASS_LABELS, CLASSES
from ..timeline.correlate import KERNEL, memory_label
from .base import JobFigures, Report, merges, report
from .detail import tc_kernel_times
from .figures import COUNT, KEY, NS, PERCENT, SUM, Field, Table, key_values, merge_tables, summed_over, with_rank
from .roofline import carry_lines, mfu_lines

PARTITION = (*CLASSES, "other")

WALL_CLOCK = Field("wall_clock_ns", "Wall Clock Time (ns)", NS)
TC_UTILIZATION = Field("tc_kernel_utilization_pct", "Tensor Core Kernel Utilization %", PERCENT, digits=1)
# What the TC utilization is the share of (kept so that several ranks' figures combine exactly).
ELIGIBLE_KERNEL_TIME = Field("tc_eligible_kernel_time_ns", "Kernel Time of TC-Eligible Ops (ns)", NS, csv=False)
ELIGIBLE_TC_TIME = Field("tc_eligible_tc_kernel_time_ns", "TC Kernel Time of TC-Eligible Ops (ns)", NS, csv=False)
GPU_UTILIZATION = Field("gpu_utilization_pct", "GPU Utilization %", PERCENT, digits=1)
SHARES = {name: Field(f"{name}_duration_pct", CLASS_LABELS[name], PERCENT, digits=1) for name in PARTITION}

KERNEL_FIELDS = (
    Field("kernels", ""),
    Field("gpu_time_ns", "GPU Time (ns)", NS),
    Field("launch_api_time_ns", "CPU Time (ns)", NS),
    Field("distinct_kernels", "# Kernels", COUNT),
)
OP_FIELDS = (
    Field("ops", ""),
    Field("gpu_time_ns", "GPU Time (ns)", NS),
    Field("range_time_ns", "CPU Time (ns)", NS),
    Field("op_count", "# Ops", COUNT),
)
ITERATION_FIELDS = (
    Field("iteration", "Iteration"),
    Field("aggregated", "Aggregated"),
    Field("start_ns", "Start (ns)", NS),
    Field("end_ns", "End (ns)", NS),
    Field("duration_ns", "Iteration Time (ns)", NS),
    *(Field(f"{name}_ns", CLASS_LABELS[name].replace(" Duration %", " Time (ns)"), NS) for name in PARTITION),
    Field("gpu_busy_ns", "GPU Busy Time (ns, mean over GPUs)", NS, digits=1),
    Field("kernels", "Kernels Launched", COUNT),
    Field("kernel_time_ns", "Kernel Time (ns)", NS),
    Field("tc_kernel_time_ns", "Tensor Core Kernel Time (ns)", NS),
)
KERNEL_NAME_FIELDS = (
    Field("name", "Kernel Name", merge=KEY),
    Field("tensor_core", "Uses TC", merge=KEY),
    Field("memory", "Memory Operation", merge=KEY),
)
OP_TYPE_ITERATION_FIELDS = (
    Field("iteration", "Iteration"),
    Field("op_type", "Op Type"),
    Field("gpu_time_ns", "GPU Time (ns)", NS),
)


def _driver_version(raw: str) -> str:
    """nsys stores 580.159.04 as 58015904."""
    if raw.isdigit() and len(raw) >= 7:
        return f"{int(raw[:-5])}.{raw[-5:-2]}.{raw[-2:]}"
    return raw


def _cuda_version(raw: str) -> str:
    """CUDA versions are stored as 1000 * major + 10 * minor (13000 = 13.0)."""
    if raw.isdigit():
        value = int(raw)
        return f"{value // 1000}.{value % 1000 // 10}"
    return raw


def system_config(ctx: RankContext) -> list[tuple[Field, object]]:
    profile = ctx.profile
    env = profile.meta.system_env
    gpus = profile.gpus
    rows: list[tuple[Field, object]] = [(Field("gpu_count", "GPU Count", COUNT), len(gpus))]
    if len(gpus):
        rows.append((Field("gpu_names", "GPU Name(s)"), ", ".join(str(n) for n in gpus["name"])))
    if env.get("CpuDescription"):
        rows.append((Field("cpu_model", "CPU Model"), env["CpuDescription"]))
    if env.get("NvDriverVersion"):
        rows.append((Field("driver_version", "GPU Driver Version"), _driver_version(env["NvDriverVersion"])))
    if env.get("CudaDriverVersion"):
        rows.append((Field("cuda_driver_version", "CUDA Driver Version"), _cuda_version(env["CudaDriverVersion"])))
    if profile.meta.nsys_version:
        rows.append((Field("nsys_version", "NSys Version"), profile.meta.nsys_version))
    rows.append((Field("dlagg_version", "dlagg Version"), __version__))
    return rows


def share(part: float, whole: float) -> float:
    """`part` as a percentage of `whole` (0 when `whole` is 0)."""
    return 100.0 * part / whole if whole else 0.0


KERNEL_ROWS = ("All kernels", "Kernels using TC", "Memory", "All other kernels")


def kernel_names(ctx: RankContext) -> pd.DataFrame:
    """The distinct names of the aggregated iterations' GPU work: kernels (with their TC use) and
    memory operations (``[CUDA memcpy HtoD]``), which All Kernels counts."""
    work = ctx.selected_work
    is_kernel = work["kind"].to_numpy() == KERNEL
    ids = np.unique(work["name_id"].to_numpy()[is_kernel])
    memory = pd.unique(memory_label(ctx.profile, work[~is_kernel]).to_numpy(dtype=object))
    return pd.DataFrame({
        "name": np.concatenate((ctx.profile.strings.decode(ids).to_numpy(dtype=object), memory)),
        "tensor_core": np.concatenate((ctx.uses_tc(ids), np.zeros(len(memory), dtype=bool))),
        "memory": np.concatenate((np.zeros(len(ids), dtype=bool), np.ones(len(memory), dtype=bool))),
    })


def distinct_counts(names: pd.DataFrame) -> list[int]:
    """# Kernels of the All Kernels rows (KERNEL_ROWS order) from the distinct names."""
    tc, memory = names["tensor_core"].to_numpy(dtype=bool), names["memory"].to_numpy(dtype=bool)
    return [len(names), int(tc.sum()), int(memory.sum()), int((~tc & ~memory).sum())]


def kernel_totals(ctx: RankContext, names: pd.DataFrame) -> pd.DataFrame:
    """All Kernels: GPU time, launch-API time and distinct names of the aggregated iterations' GPU work."""
    work = ctx.selected_work
    is_kernel = work["kind"].to_numpy() == KERNEL
    tc = is_kernel & ctx.uses_tc(work["name_id"].to_numpy())
    gpu_time = (work["end"] - work["start"]).to_numpy()
    has_api = work["api_start"].to_numpy() >= 0
    api_time = np.where(has_api, (work["api_end"] - work["api_start"]).to_numpy(), 0)
    masks = (np.ones(len(work), dtype=bool), tc, ~is_kernel, is_kernel & ~tc)
    return pd.DataFrame({
        "kernels": KERNEL_ROWS,
        "gpu_time_ns": [int(gpu_time[m].sum()) for m in masks],
        "launch_api_time_ns": [int(api_time[m].sum()) for m in masks],
        "distinct_kernels": distinct_counts(names),
    })


def op_totals(ops: Table) -> pd.DataFrame:
    """All Ops: GPU and CPU (range) time summed over the detail report's op rows."""
    frame = ops.frame
    eligible = frame["tc_eligible"].to_numpy(dtype=bool)
    using = frame["using_tc"].to_numpy(dtype=bool)
    rows = []
    for label, mask in (("All ops", np.ones(len(frame), dtype=bool)), ("Ops using TC", using),
                        ("Ops eligible for TC but not using", eligible & ~using),
                        ("All other ops", ~eligible & ~using)):
        part = frame[mask]
        rows.append((label, int(part["gpu_time_total_ns"].sum()), int(part["cpu_time_total_ns"].sum()),
                     int(mask.sum())))
    return pd.DataFrame(rows, columns=[f.key for f in OP_FIELDS])


def iteration_figures(ctx: RankContext) -> pd.DataFrame:
    """Per iteration (all of them): the time partition, GPU busy time, kernels and their (TC) time."""
    bd = ctx.breakdown
    work = ctx.work
    iteration = work["iteration"].to_numpy()
    kernels = (work["kind"].to_numpy() == KERNEL) & (iteration >= 0)
    gpu = (work["end"] - work["start"]).to_numpy()[kernels].astype(np.float64)
    tc = ctx.uses_tc(work["name_id"].to_numpy()[kernels])
    k_iter = iteration[kernels]
    count = len(bd)
    frame = pd.DataFrame({
        "iteration": bd["iteration"].to_numpy(),
        "aggregated": bd["aggregated"].to_numpy(dtype=bool),
        "start_ns": bd["start"].to_numpy(),
        "end_ns": bd["end"].to_numpy(),
        "duration_ns": bd["duration"].to_numpy(),
        **{f"{name}_ns": bd[name].to_numpy() for name in PARTITION},
        "gpu_busy_ns": bd["gpu_busy"].to_numpy(dtype=np.float64),
        "kernels": bd["kernel_count"].to_numpy(),
        "kernel_time_ns": np.bincount(k_iter, weights=gpu, minlength=count)[:count].astype(np.int64),
        "tc_kernel_time_ns": np.bincount(k_iter[tc], weights=gpu[tc], minlength=count)[:count].astype(np.int64),
    })
    return frame[[f.key for f in ITERATION_FIELDS]]


def op_type_iterations(ctx: RankContext) -> pd.DataFrame:
    """GPU time per (iteration, op type) of the op calls starting in the iteration (as in the op_type
    report: a call's GPU time is the union of its kernels and memory operations)."""
    instances = ctx.ops.instances
    iteration = instances["iteration"].to_numpy()
    known = iteration >= 0
    columns = [f.key for f in OP_TYPE_ITERATION_FIELDS]
    if not known.any():
        return pd.DataFrame({"iteration": np.empty(0, np.int64), "op_type": np.empty(0, object),
                             "gpu_time_ns": np.empty(0, np.int64)})[columns]
    op_type = ctx.ops.ops["op_type"].reindex(instances["key"].to_numpy()[known]).to_numpy(dtype=object)
    frame = pd.DataFrame({"iteration": iteration[known], "op_type": op_type,
                          "gpu_time_ns": instances["gpu"].to_numpy()[known]})
    per = frame.groupby(["iteration", "op_type"], sort=True)["gpu_time_ns"].sum().reset_index()
    return per[columns]


@report("summary", depends=("detail",))
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """System config, wall-clock partition (TC/kernel/memory/dataloader/IO/CPU/other), iterations, totals."""
    its = ctx.iterations
    per_iteration = iteration_figures(ctx)
    names = kernel_names(ctx)
    agg = per_iteration[per_iteration["aggregated"].to_numpy()]
    wall = int(agg["duration_ns"].sum())
    summary: list[tuple[Field, object]] = [(WALL_CLOCK, wall)]
    eligible, eligible_tc = tc_kernel_times(ctx)  # defined in reports/detail.py and docs/ops.md
    tc_util = share(eligible_tc, eligible) if eligible else None
    if tc_util is not None:
        summary.append((TC_UTILIZATION, tc_util))
    summary.append((GPU_UTILIZATION, share(float(agg["gpu_busy_ns"].sum()), wall)))
    summary += [(SHARES[name], share(float(agg[f"{name}_ns"].sum()), wall)) for name in PARTITION]
    summary += [(ELIGIBLE_KERNEL_TIME, eligible), (ELIGIBLE_TC_TIME, eligible_tc)]

    durations = agg["duration_ns"].to_numpy(dtype=np.float64)
    roofline_warnings: tuple[str, ...] = ()
    if ctx.options.ncu_report is not None:
        lines, roofline_warnings = mfu_lines(ctx, float(durations.mean()) if len(durations) else 0.0)
        summary += lines
    iterations: list[tuple[Field, object]] = [
        (Field("key_node", "Key Node"), its.key_node or "(not found)"),
        (Field("total_iterations", "Total Iterations", COUNT), its.count),
        (Field("aggregated_iterations", "Aggregated Iterations", COUNT), its.stop - its.start + 1),
        (Field("start_iteration", "Start Iteration"), its.start),
        (Field("stop_iteration", "Stop Iteration"), its.stop),
        (Field("iteration_time_avg_ns", "Average Iteration Time (ns)", NS, digits=1), float(durations.mean())),
        (Field("iteration_time_std_ns", "Iteration Time Standard Deviation", NS, digits=1), float(durations.std())),
    ]
    return Report(
        "summary",
        "summary",
        (
            key_values("system", "System Config", system_config(ctx)),
            key_values("summary", "Summary Report", summary),
            key_values("iterations_summary", "Iterations", iterations),
            Table("all_kernels", "All Kernels", KERNEL_FIELDS, kernel_totals(ctx, names)),
            Table("all_ops", "All Ops", OP_FIELDS, op_totals(deps["detail"].main)),
            Table("iterations", "Iterations", ITERATION_FIELDS, per_iteration, csv=False),
            Table("op_type_iterations", "GPU Time per Op Type and Iteration", OP_TYPE_ITERATION_FIELDS,
                  op_type_iterations(ctx), csv=False),
            Table("kernel_names", "Kernel Names", KERNEL_NAME_FIELDS, names, csv=False),
        ),
        warnings=(() if tc_util is not None else (
            "summary: no Tensor Core Kernel Utilization %: no Tensor-Core-eligible op ran a kernel in the "
            "aggregated iterations (see the detail report)",)) + roofline_warnings,
    )


def _job_system(reports: Sequence[Report], job: JobFigures) -> list[tuple[Field, object]]:
    """Rank 0's system lines, with the GPUs the ranks ran on (a device per host, named from each rank's export)."""
    used: dict[tuple[str, int], str] = {}
    for rank in job.ranks:  # ranks, not events
        names = dict(zip(rank.gpus["device_id"].to_numpy().tolist(), rank.gpus["name"].astype(str), strict=True))
        for device in rank.source.devices:
            used.setdefault((rank.source.host, device), names.get(device, ""))
    first = reports[0].table("system")
    lines: list[tuple[Field, object]] = [(f, first.values[f.key]) for f in first.fields]
    lines = [(f, v) for f, v in lines if f.key not in ("gpu_count", "gpu_names")]
    gpus: list[tuple[Field, object]] = [(Field("gpu_count", "GPU Count", COUNT), len(used))]
    if any(used.values()):
        gpus.append((Field("gpu_names", "GPU Name(s)"), ", ".join(n for _, n in sorted(used.items()))))
    return gpus + lines


@merges("summary")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """Per-GPU figures over ranks: the wall clock spans every rank's aggregated iterations (job clock);
    utilization and duration percentages are each rank's, averaged over the ranks (as DLProf averaged
    GPU utilization over GPUs); iteration times are every rank's iterations; kernel and op time totals
    add up over the ranks' GPUs."""
    ranks = job.rank_numbers
    offsets = job.offsets
    per = with_rank([r.table("iterations") for r in reports], ranks)
    shift = per.frame["rank"].map(offsets).to_numpy()
    frame = per.frame.assign(start_ns=per.frame["start_ns"] + shift, end_ns=per.frame["end_ns"] + shift)
    per = per.with_frame(frame)
    agg = frame[frame["aggregated"].to_numpy(dtype=bool)]
    wall = int(agg["end_ns"].max() - agg["start_ns"].min()) if len(agg) else 0
    values = [r.table("summary").values for r in reports]

    def mean(key: str) -> float:
        return float(np.mean([v[key] for v in values]))

    eligible = sum(int(v[ELIGIBLE_KERNEL_TIME.key]) for v in values)
    eligible_tc = sum(int(v[ELIGIBLE_TC_TIME.key]) for v in values)
    summary: list[tuple[Field, object]] = [(WALL_CLOCK, wall)]
    if eligible:
        summary.append((TC_UTILIZATION, share(eligible_tc, eligible)))
    summary.append((GPU_UTILIZATION, mean(GPU_UTILIZATION.key)))
    summary += [(SHARES[name], mean(SHARES[name].key)) for name in PARTITION]
    summary += [(ELIGIBLE_KERNEL_TIME, eligible), (ELIGIBLE_TC_TIME, eligible_tc)]
    summary += carry_lines(values)

    counts = [r.iterations.count for r in job.ranks]
    key_nodes = list(dict.fromkeys(r.iterations.key_node or "(not found)" for r in job.ranks))
    first = job.ranks[0].iterations
    durations = agg["duration_ns"].to_numpy(dtype=np.float64)
    iterations: list[tuple[Field, object]] = [
        (Field("key_node", "Key Node"), ", ".join(key_nodes)),
        (Field("total_iterations", "Total Iterations", COUNT), min(counts)),
        (Field("aggregated_iterations", "Aggregated Iterations", COUNT), first.stop - first.start + 1),
        (Field("start_iteration", "Start Iteration"), first.start),
        (Field("stop_iteration", "Stop Iteration"), min(r.iterations.stop for r in job.ranks)),
        (Field("iteration_time_avg_ns", "Average Iteration Time (ns)", NS, digits=1),
         float(durations.mean()) if len(durations) else 0.0),
        (Field("iteration_time_std_ns", "Iteration Time Standard Deviation", NS, digits=1),
         float(durations.std()) if len(durations) else 0.0),
    ]
    names = merge_tables([r.table("kernel_names") for r in reports])
    totals = pd.concat([r.table("all_kernels").frame for r in reports]).groupby("kernels", sort=False)[
        ["gpu_time_ns", "launch_api_time_ns"]].sum().reindex(KERNEL_ROWS).reset_index()
    totals["distinct_kernels"] = distinct_counts(names.frame)
    sums = tuple(replace(f, merge=SUM) if f.unit == NS else f for f in KERNEL_FIELDS)
    warnings = list(dict.fromkeys(w for r in reports for w in r.warnings))
    if len(set(counts)) > 1:
        warnings.append("summary: ranks found different numbers of iterations ("
                        + ", ".join(f"rank {n}: {c}" for n, c in zip(ranks, counts, strict=True))
                        + "); Total Iterations is the smallest")
    return Report("summary", "summary", (
        key_values("system", "System Config", _job_system(reports, job)),
        key_values("summary", "Summary Report", summary),
        key_values("iterations_summary", "Iterations", iterations),
        summed_over(Table("all_kernels", "All Kernels", sums, totals[[f.key for f in KERNEL_FIELDS]]), len(ranks)),
        summed_over(Table("all_ops", "All Ops", tuple(replace(f, merge=SUM) if f.unit == NS else f for f in OP_FIELDS),
                          op_totals(deps["detail"].main)), len(ranks)),
        per,
        with_rank([r.table("op_type_iterations") for r in reports], ranks),
        names,
    ), warnings=tuple(warnings))
