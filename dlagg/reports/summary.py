"""Summary report: system, wall-clock partition, iterations and op and kernel totals (DLProf's sections,
in DLProf's order: System Config, Summary Report, Iterations, All Ops, All Kernels).

Besides DLProf's sections it holds two tables of per-iteration figures (not in the CSV): the time
partition of every iteration (``iterations``) and the GPU time per op type and iteration
(``op_type_iterations``), which the TensorBoard and HTML writers chart and a comparison samples;
and the GPU timeline of one typical iteration (``timeline_iteration``, ``timeline``: see
``gpu_timeline.py``), which the HTML page draws.

Iterations end with the GPU work launched in them (``model.Iterations``): the wall clock runs from
the first aggregated iteration's start to the end of the last one's GPU work. Each iteration's
CPU-side time (key-node instance to key-node instance: the host's pace) and GPU-side time (end of
the GPU work launched in the previous iteration to the end of its own: the GPU's pace) are figures
of the per-iteration table, their means of the Iterations section (JSON, TensorBoard), and a
warning says when the means differ by more than ``PACE_NOTE_SHARE`` (not without a key node, whose
one iteration has no CPU side to speak of).

Kernels are identified by their short name, as DLProf does: ``# Kernels`` counts distinct short
names (``fft2d_r2c_32x32`` once, whatever its template instances), and the Memory row distinct
CUDA API names of the calls that issued memory operations (``cudaMemcpyAsync``, ``cudaMemcpy``,
``cudaMemsetAsync``: 3).

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
from ..model import SYSTEM_INFO, share
from ..timeline.breakdown import CLASS_LABELS, CLASSES
from ..timeline.correlate import KERNEL, memory_label
from .base import JobFigures, Report, merges, report
from .detail import no_eligible_warning, tc_kernel_times
from .figures import ANY, COUNT, KEY, NS, PERCENT, SUM, Field, Table, key_values, merge_tables, summed_over, with_rank
from .gpu_timeline import timeline_tables
from .roofline import carry_lines, mfu_lines

PARTITION = (*CLASSES, "other")
# The CPU-side and GPU-side mean iteration times differing by more than this share of the longer one
# get a note (a warning): the host ran ahead of the GPU, or the GPU waited for the host.
PACE_NOTE_SHARE = 0.10

WALL_CLOCK = Field("wall_clock_ns", "Wall Clock Time (ns)", NS)
TC_UTILIZATION = Field("tc_kernel_utilization_pct", "Tensor Core Kernel Utilization %", PERCENT, digits=1)
# What the TC utilization is the share of (kept so that several ranks' figures combine exactly).
ELIGIBLE_KERNEL_TIME = Field("tc_eligible_kernel_time_ns", "Kernel Time of TC-Eligible Ops (ns)", NS, csv=False)
ELIGIBLE_TC_TIME = Field("tc_eligible_tc_kernel_time_ns", "TC Kernel Time of TC-Eligible Ops (ns)", NS, csv=False)
GPU_UTILIZATION = Field("gpu_utilization_pct", "GPU Utilization %", PERCENT, digits=1)
SHARES = {name: Field(f"{name}_duration_pct", CLASS_LABELS[name], PERCENT, digits=1) for name in PARTITION}

KEY_NODE = Field("key_node", "Key Node", csv=False)  # DLProf's file has no such line: stderr and JSON say it
ITERATION_TIME_AVG = Field("iteration_time_avg_ns", "Average Iteration Time (ns)", NS, digits=1)
ITERATION_TIME_STD = Field("iteration_time_std_ns", "Iteration Time Standard Deviation", NS, digits=1)
CPU_TIME_AVG = Field("cpu_iteration_time_avg_ns", "Average CPU-Side Iteration Time (ns)", NS, digits=1, csv=False)
GPU_TIME_AVG = Field("gpu_iteration_time_avg_ns", "Average GPU-Side Iteration Time (ns)", NS, digits=1, csv=False)

KERNEL_FIELDS = (
    Field("kernels", "", quote=False),
    Field("gpu_time_ns", "GPU Time (ns)", NS),
    Field("launch_api_time_ns", "CPU Time (ns)", NS),
    Field("distinct_kernels", "# Kernels", COUNT),
)
OP_FIELDS = (
    Field("ops", "", quote=False),
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
    Field("cpu_side_ns", "CPU-Side Iteration Time (ns)", NS),
    Field("gpu_side_ns", "GPU-Side Iteration Time (ns)", NS, digits=0),
    *(Field(f"{name}_ns", CLASS_LABELS[name].replace(" Duration %", " Time (ns)"), NS) for name in PARTITION),
    Field("gpu_busy_ns", "GPU Busy Time (ns, mean over GPUs)", NS, digits=1),
    Field("kernels", "Kernels Launched", COUNT),
    Field("kernel_time_ns", "Kernel Time (ns)", NS),
    Field("tc_kernel_time_ns", "Tensor Core Kernel Time (ns)", NS),
    Field("tc_eligible_kernel_time_ns", "Kernel Time of TC-Eligible Ops (ns)", NS),
    Field("tc_eligible_tc_kernel_time_ns", "TC Kernel Time of TC-Eligible Ops (ns)", NS),
)
KERNEL_NAME_FIELDS = (
    Field("name", "Kernel Name", merge=KEY),
    Field("tensor_core", "Uses TC", merge=ANY),
    Field("memory", "Memory Operation", merge=KEY),
)
OP_TYPE_ITERATION_FIELDS = (
    Field("iteration", "Iteration"),
    Field("op_type", "Op Type"),
    Field("gpu_time_ns", "GPU Time (ns)", NS),
)


def driver_version(raw: str) -> str:
    """nsys stores the driver version as digits: 58015904 is 580.159.04, 5154304 is 515.43.04 (three
    digits of major version, then the minor version, then two digits of patch level)."""
    if raw.isdigit() and len(raw) >= 7:
        return f"{int(raw[:3])}.{raw[3:-2]}.{raw[-2:]}"
    return raw


def _cuda_version(raw: str) -> str:
    """CUDA versions are stored as 1000 * major + 10 * minor (13000 = 13.0)."""
    if raw.isdigit():
        value = int(raw)
        return f"{value // 1000}.{value % 1000 // 10}"
    return raw


# the system environment's lines that system_config reads: three by name, and nsys 2022.1's SystemInfo table
CPU_KEY, DRIVER_KEY, CUDA_KEY = "CpuDescription", "NvDriverVersion", "CudaDriverVersion"
CONFIG_KEYS = (CPU_KEY, DRIVER_KEY, CUDA_KEY)


def config_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an export's system environment that `system_config` reads. A rank's figures carry only this:
    the rest (the CPU list as JSON, the target's environment variables) is 100 KB a rank that no report shows."""
    return {k: v for k, v in env.items() if k in CONFIG_KEYS or k.startswith(SYSTEM_INFO)}


def _system_info(env: Mapping[str, str], word: str) -> str:
    """The first value of the export's SystemInfo table whose name contains `word` ('' when none)."""
    for name, value in env.items():  # a few dozen lines
        if name.startswith(SYSTEM_INFO) and word in name.lower():
            return value
    return ""


def system_config(ctx: RankContext) -> list[tuple[Field, object]]:
    """DLProf's System Config lines, in its order, each where the export holds the data (nsys 2022.1's
    SystemInfo table for Framework and cuDNN Version; none of our recordings has one)."""
    profile = ctx.profile
    env = profile.meta.system_env
    gpus = profile.gpus
    rows: list[tuple[Field, object]] = [(Field("gpu_count", "GPU Count", COUNT), len(gpus))]
    if len(gpus):
        rows.append((Field("gpu_names", "GPU Name(s)"), ", ".join(str(n) for n in gpus["name"])))
    if env.get(CPU_KEY):
        rows.append((Field("cpu_model", "CPU Model"), env[CPU_KEY]))
    if env.get(DRIVER_KEY):
        rows.append((Field("driver_version", "GPU Driver Version"), driver_version(env[DRIVER_KEY])))
    framework = _system_info(env, "framework")
    if framework:
        rows.append((Field("framework", "Framework"), framework))
    if env.get(CUDA_KEY):  # the CUDA version the driver supports: all an export says
        rows.append((Field("cuda_driver_version", "CUDA Version"), _cuda_version(env[CUDA_KEY])))
    cudnn = _system_info(env, "cudnn")
    if cudnn:
        rows.append((Field("cudnn_version", "cuDNN Version"), cudnn))
    if profile.meta.nsys_version:
        rows.append((Field("nsys_version", "NSys Version"), profile.meta.nsys_version))
    rows.append((Field("dlagg_version", "dlagg Version"), __version__))
    return rows


KERNEL_ROWS = ("All kernels", "Kernels using TC", "Memory", "All other kernels")


def api_names(ctx: RankContext, ids: np.ndarray) -> np.ndarray:
    """CUDA API names without nsys' version suffix (``cudaMemcpyAsync_v3020`` -> ``cudaMemcpyAsync``)."""
    return ctx.profile.strings.decode(ids).str.replace(r"_v\d+$", "", regex=True).to_numpy(dtype=object)


def kernel_names(ctx: RankContext) -> pd.DataFrame:
    """The distinct names of the aggregated iterations' GPU work that All Kernels counts: kernels by short
    name (with their TC use: any of its instances) and memory operations by the CUDA API call that
    issued them (its kind, ``[CUDA memcpy HtoD]``, when no call correlates)."""
    work = ctx.selected_work
    is_kernel = work["kind"].to_numpy() == KERNEL
    ids = np.unique(work["name_id"].to_numpy()[is_kernel])
    kernels = pd.DataFrame({"name": ctx.profile.strings.decode(ctx.short_name_ids(ids)).to_numpy(dtype=object),
                            "tensor_core": ctx.uses_tc(ids)}).groupby("name", sort=True)["tensor_core"].any()
    memory = work[~is_kernel]
    has_api = memory["api_name_id"].to_numpy() >= 0
    labels = memory_label(ctx.profile, memory).to_numpy(dtype=object).copy()
    labels[has_api] = api_names(ctx, memory["api_name_id"].to_numpy()[has_api])
    memory_names = np.unique(labels.astype(str)) if len(labels) else np.empty(0, dtype=object)
    return pd.DataFrame({
        "name": np.concatenate((kernels.index.to_numpy(dtype=object), memory_names.astype(object))),
        "tensor_core": np.concatenate((kernels.to_numpy(dtype=bool), np.zeros(len(memory_names), dtype=bool))),
        "memory": np.concatenate((np.zeros(len(kernels), dtype=bool), np.ones(len(memory_names), dtype=bool))),
    })


def distinct_counts(names: pd.DataFrame) -> list[int]:
    """# Kernels of the All Kernels rows (KERNEL_ROWS order) from the distinct names."""
    tc, memory = names["tensor_core"].to_numpy(dtype=bool), names["memory"].to_numpy(dtype=bool)
    return [len(names), int(tc.sum()), int(memory.sum()), int((~tc & ~memory).sum())]


def _launch_time(api_row: np.ndarray, api_time: np.ndarray, mask: np.ndarray) -> int:
    """Time in the CUDA calls that launched the `mask` rows, each call once (one cudaGraphLaunch
    launches every kernel and memset of its graph)."""
    _, first = np.unique(api_row[mask], return_index=True)
    return int(api_time[mask][first].sum())


def kernel_totals(ctx: RankContext, names: pd.DataFrame) -> pd.DataFrame:
    """All Kernels: GPU time, launch-API time and distinct names of the aggregated iterations' GPU work."""
    work = ctx.selected_work
    is_kernel = work["kind"].to_numpy() == KERNEL
    tc = is_kernel & ctx.uses_tc(work["name_id"].to_numpy())
    gpu_time = (work["end"] - work["start"]).to_numpy()
    has_api = work["api_start"].to_numpy() >= 0
    api_time = (work["api_end"] - work["api_start"]).to_numpy()
    api_row = work["api_row"].to_numpy()
    masks = (np.ones(len(work), dtype=bool), tc, ~is_kernel, is_kernel & ~tc)
    return pd.DataFrame({
        "kernels": KERNEL_ROWS,
        "gpu_time_ns": [int(gpu_time[m].sum()) for m in masks],
        "launch_api_time_ns": [_launch_time(api_row, api_time, m & has_api) for m in masks],
        "distinct_kernels": distinct_counts(names),
    })


def op_totals(ops: Table) -> pd.DataFrame:
    """All Ops: GPU and CPU (range) time summed over the detail report's op rows (unassociated CUDA
    calls included)."""
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


def _eligible_per_iteration(ctx: RankContext, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: kernel time and Tensor Core kernel time of the TC-eligible ops' calls starting in it
    (the Tensor Core Kernel Utilization % of one iteration is the second over the first)."""
    inst = ctx.ops.instances
    if inst.empty:
        return np.zeros(count, dtype=np.int64), np.zeros(count, dtype=np.int64)
    eligible = ctx.ops.ops["tc_eligible"].reindex(inst["key"].to_numpy()).to_numpy(dtype=bool)
    iteration = inst["iteration"].to_numpy()
    mine = eligible & (iteration >= 0)

    def per(column: str) -> np.ndarray:
        return np.bincount(iteration[mine], weights=inst[column].to_numpy()[mine].astype(np.float64),
                           minlength=count)[:count].astype(np.int64)

    return per("kernel_time"), per("tc_kernel_time")


def iteration_figures(ctx: RankContext) -> pd.DataFrame:
    """Per iteration (all of them): window, CPU-side and GPU-side times, the time partition, GPU busy time,
    kernels and their (TC) time, and the TC-eligible ops' kernel times."""
    bd = ctx.breakdown
    its = ctx.iterations
    work = ctx.work
    iteration = work["iteration"].to_numpy()
    kernels = (work["kind"].to_numpy() == KERNEL) & (iteration >= 0)
    gpu = (work["end"] - work["start"]).to_numpy()[kernels].astype(np.float64)
    tc = ctx.uses_tc(work["name_id"].to_numpy()[kernels])
    k_iter = iteration[kernels]
    count = len(bd)
    eligible, eligible_tc = _eligible_per_iteration(ctx, count)
    frame = pd.DataFrame({
        "iteration": bd["iteration"].to_numpy(),
        "aggregated": bd["aggregated"].to_numpy(dtype=bool),
        "start_ns": bd["start"].to_numpy(),
        "end_ns": bd["end"].to_numpy(),
        "duration_ns": bd["duration"].to_numpy(),
        "cpu_side_ns": its.cpu_times,
        "gpu_side_ns": its.gpu_times,
        **{f"{name}_ns": bd[name].to_numpy() for name in PARTITION},
        "gpu_busy_ns": bd["gpu_busy"].to_numpy(dtype=np.float64),
        "kernels": bd["kernel_count"].to_numpy(),
        "kernel_time_ns": np.bincount(k_iter, weights=gpu, minlength=count)[:count].astype(np.int64),
        "tc_kernel_time_ns": np.bincount(k_iter[tc], weights=gpu[tc], minlength=count)[:count].astype(np.int64),
        "tc_eligible_kernel_time_ns": eligible,
        "tc_eligible_tc_kernel_time_ns": eligible_tc,
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


def pace(agg: pd.DataFrame) -> tuple[float, float]:
    """(mean CPU-side, mean GPU-side) iteration time of these per-iteration rows (NaN when undefined)."""
    cpu = agg["cpu_side_ns"].to_numpy(dtype=np.float64)
    gpu = agg["gpu_side_ns"].to_numpy(dtype=np.float64)
    gpu = gpu[~np.isnan(gpu)]
    return (float(cpu.mean()) if len(cpu) else float("nan"), float(gpu.mean()) if len(gpu) else float("nan"))


PACE_NOTE = "summary: the CPU-side and GPU-side iteration times differ"


def pace_note(cpu: float, gpu: float) -> str | None:
    """The summary's note when the mean CPU-side and GPU-side iteration times differ by more than
    PACE_NOTE_SHARE of the longer one (None when they do not, or one is unknown)."""
    if np.isnan(cpu) or np.isnan(gpu) or abs(cpu - gpu) <= PACE_NOTE_SHARE * max(cpu, gpu):
        return None
    if gpu > cpu:
        why = ("the host ran ahead of the GPU (it queues launches without waiting), so iterations end when their "
               "GPU work does and follow the GPU's pace")
    else:
        why = "the GPU waited for the host, so iterations follow the host's pace"
    return (f"{PACE_NOTE}: {cpu / 1e6:,.3f} ms per iteration on the CPU side (key-node range to key-node range), "
            f"{gpu / 1e6:,.3f} ms on the GPU side (end of one iteration's GPU work to the next's); {why}. "
            "Average Iteration Time is the later of the two ends per iteration (JSON and TensorBoard have both)")


def _iterations_section(its_key_node: str, counts: tuple[int, int, int, int], agg: pd.DataFrame) -> list[
        tuple[Field, object]]:
    total, aggregated, first, last = counts
    durations = agg["duration_ns"].to_numpy(dtype=np.float64)
    cpu, gpu = pace(agg)
    return [
        (KEY_NODE, its_key_node),
        (Field("total_iterations", "Total Iterations", COUNT), total),
        (Field("aggregated_iterations", "Aggregated Iterations", COUNT), aggregated),
        (Field("start_iteration", "Start Iteration"), first),
        (Field("stop_iteration", "Stop Iteration"), last),
        (ITERATION_TIME_AVG, float(durations.mean()) if len(durations) else 0.0),
        (ITERATION_TIME_STD, float(durations.std()) if len(durations) else 0.0),
        (CPU_TIME_AVG, cpu),
        (GPU_TIME_AVG, gpu),
    ]


@report("summary", depends=("detail",), spill=("timeline",))
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """System config, wall-clock partition (TC/kernel/memory/dataloader/IO/CPU/other), iterations, totals."""
    its = ctx.iterations
    per_iteration = iteration_figures(ctx)
    names = kernel_names(ctx)
    agg = per_iteration[per_iteration["aggregated"].to_numpy()]
    first, last = its.window
    wall = last - first  # the aggregated iterations are contiguous: the sum of their times
    summary: list[tuple[Field, object]] = [(WALL_CLOCK, wall)]
    eligible, eligible_tc = tc_kernel_times(ctx)  # defined in reports/detail.py and docs/ops.md
    # DLProf wrote the row in every summary: 0.0 where no eligible op ran a kernel (a warning says why)
    summary.append((TC_UTILIZATION, share(eligible_tc, eligible) if eligible else 0.0))
    summary.append((GPU_UTILIZATION, share(float(agg["gpu_busy_ns"].sum()), wall)))
    summary += [(SHARES[name], share(float(agg[f"{name}_ns"].sum()), wall)) for name in PARTITION]
    summary += [(ELIGIBLE_KERNEL_TIME, eligible), (ELIGIBLE_TC_TIME, eligible_tc)]
    durations = agg["duration_ns"].to_numpy(dtype=np.float64)
    roofline_warnings: tuple[str, ...] = ()
    if ctx.options.ncu_report is not None:
        lines, roofline_warnings = mfu_lines(ctx, float(durations.mean()) if len(durations) else 0.0)
        summary += lines
    iterations = _iterations_section(its.key_node or "(not found)", (its.count, its.stop - its.start + 1, its.start,
                                                                     its.stop), agg)
    ops = op_totals(deps["detail"].main)
    warnings = []
    if not eligible:
        warnings.append("summary: " + no_eligible_warning(int(ops["op_count"].iloc[1]), _tc_share(agg)))
    note = pace_note(*pace(agg)) if its.found else None  # without a key node there is no CPU side
    if note:
        warnings.append(note)
    return Report(
        "summary",
        "summary",
        (
            key_values("system", "System Config", system_config(ctx)),
            key_values("summary", "Summary Report", summary),
            key_values("iterations_summary", "Iterations", iterations),
            Table("all_ops", "All Ops", OP_FIELDS, ops),
            Table("all_kernels", "All Kernels", KERNEL_FIELDS, kernel_totals(ctx, names)),
            Table("iterations", "Iterations", ITERATION_FIELDS, per_iteration, csv=False),
            Table("op_type_iterations", "GPU Time per Op Type and Iteration", OP_TYPE_ITERATION_FIELDS,
                  op_type_iterations(ctx), csv=False),
            Table("kernel_names", "Kernel Names", KERNEL_NAME_FIELDS, names, csv=False),
            *timeline_tables(ctx, per_iteration),
        ),
        warnings=tuple(warnings) + roofline_warnings,
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
    # (a rank whose window has no length, every GPU row of it dropped as damage, has no shares to average)
    timed = [v for v in values if v[WALL_CLOCK.key]] or values

    def mean(key: str) -> float:
        return float(np.mean([v[key] for v in timed]))

    eligible = sum(int(v[ELIGIBLE_KERNEL_TIME.key]) for v in values)
    eligible_tc = sum(int(v[ELIGIBLE_TC_TIME.key]) for v in values)
    summary: list[tuple[Field, object]] = [(WALL_CLOCK, wall)]
    summary.append((TC_UTILIZATION, share(eligible_tc, eligible) if eligible else 0.0))  # as a rank's
    summary.append((GPU_UTILIZATION, mean(GPU_UTILIZATION.key)))
    summary += [(SHARES[name], mean(SHARES[name].key)) for name in PARTITION]
    summary += [(ELIGIBLE_KERNEL_TIME, eligible), (ELIGIBLE_TC_TIME, eligible_tc)]
    summary += carry_lines(values)

    counts = [r.iterations.count for r in job.ranks]
    key_nodes = list(dict.fromkeys(r.iterations.key_node or "(not found)" for r in job.ranks))
    first = job.ranks[0].iterations
    stop = min(r.iterations.stop for r in job.ranks)  # the iterations every rank has
    iterations = _iterations_section(", ".join(key_nodes), (min(counts), stop - first.start + 1, first.start, stop),
                                     agg)
    names = merge_tables([r.table("kernel_names") for r in reports])
    totals = pd.concat([r.table("all_kernels").frame for r in reports]).groupby("kernels", sort=False)[
        ["gpu_time_ns", "launch_api_time_ns"]].sum().reindex(KERNEL_ROWS).reset_index()
    totals["distinct_kernels"] = distinct_counts(names.frame)
    sums = tuple(replace(f, merge=SUM) if f.unit == NS else f for f in KERNEL_FIELDS)
    ops = op_totals(deps["detail"].main)
    warnings = _job_warnings(reports, job, agg, has_eligible=eligible > 0, op_count=int(ops["op_count"].iloc[1]))
    return Report("summary", "summary", (
        key_values("system", "System Config", _job_system(reports, job)),
        key_values("summary", "Summary Report", summary),
        key_values("iterations_summary", "Iterations", iterations),
        summed_over(Table("all_ops", "All Ops", tuple(replace(f, merge=SUM) if f.unit == NS else f for f in OP_FIELDS),
                          ops), len(ranks)),
        summed_over(Table("all_kernels", "All Kernels", sums, totals[[f.key for f in KERNEL_FIELDS]]), len(ranks)),
        per,
        with_rank([r.table("op_type_iterations") for r in reports], ranks),
        names,
        *_job_timeline(reports, job),
    ), warnings=tuple(warnings))


def _job_warnings(reports: Sequence[Report], job: JobFigures, agg: pd.DataFrame, *, has_eligible: bool,
                  op_count: int) -> list[str]:
    """The job summary's warnings: the ranks' own, but the notes the job restates once for all ranks (no
    Tensor-Core-eligible kernel, the host's pace), and ranks that found different numbers of iterations."""
    # the ranks' notes are replaced by the job's (one warning per cause)
    warnings = list(dict.fromkeys(w for r in reports for w in r.warnings
                                  if not w.startswith(PACE_NOTE) and not w.startswith("summary: no Tensor-Core")))
    if not has_eligible:
        warnings.append("summary: " + no_eligible_warning(op_count, _tc_share(agg)))
    note = pace_note(*pace(agg)) if all(r.iterations.found for r in job.ranks) else None
    if note:
        warnings.append(note)
    counts = [r.iterations.count for r in job.ranks]
    if len(set(counts)) > 1:
        warnings.append("summary: ranks found different numbers of iterations ("
                        + ", ".join(f"rank {n}: {c}" for n, c in zip(job.rank_numbers, counts, strict=True))
                        + "); Total Iterations is the smallest")
    return warnings


def _tc_share(agg: pd.DataFrame) -> float | None:
    """The Tensor Core share (%) of the kernel time of the aggregated iterations `agg` (None: no kernel time)."""
    total = float(agg["kernel_time_ns"].sum())
    return 100.0 * float(agg["tc_kernel_time_ns"].sum()) / total if total else None


def _job_timeline(reports: Sequence[Report], job: JobFigures) -> tuple[Table, Table]:
    """Every rank's timeline (each of its own typical iteration; offsets from that iteration's start),
    the windows on the job's clock."""
    windows = with_rank([r.table("timeline_iteration") for r in reports], job.rank_numbers)
    shift = windows.frame["rank"].map(job.offsets).to_numpy()
    windows = windows.with_frame(windows.frame.assign(start_ns=windows.frame["start_ns"] + shift,
                                                      end_ns=windows.frame["end_ns"] + shift))
    return windows, with_rank([r.table("timeline") for r in reports], job.rank_numbers)
