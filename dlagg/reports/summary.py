"""Summary report: system, wall-clock partition, iterations and kernel and op totals (DLProf's sections).

Besides DLProf's sections it holds two tables of per-iteration figures (not in the CSV): the time
partition of every iteration (``iterations``) and the GPU time per op type and iteration
(``op_type_iterations``), which the TensorBoard and HTML writers chart and a comparison samples.

Two figures DLProf titles "CPU Time (ns)" mean different things, and their keys say which:
``launch_api_time_ns`` in All Kernels (the CUDA calls that launched the work) and
``range_time_ns`` in All Ops (the ops' NVTX range durations).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from .. import __version__
from ..context import RankContext
from ..timeline.breakdown import CLASS_LABELS, CLASSES
from ..timeline.correlate import KERNEL, memory_label
from .base import Report, report
from .detail import tc_kernel_utilization
from .figures import COUNT, NS, PERCENT, Field, Table, key_values

PARTITION = (*CLASSES, "other")

WALL_CLOCK = Field("wall_clock_ns", "Wall Clock Time (ns)", NS)
TC_UTILIZATION = Field("tc_kernel_utilization_pct", "Tensor Core Kernel Utilization %", PERCENT, digits=1)
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


def kernel_totals(ctx: RankContext) -> pd.DataFrame:
    """All Kernels: GPU time, launch-API time and distinct names of the aggregated iterations' GPU work."""
    work = ctx.selected_work
    is_kernel = work["kind"].to_numpy() == KERNEL
    tc = is_kernel & ctx.uses_tc(work["name_id"].to_numpy())
    gpu_time = (work["end"] - work["start"]).to_numpy()
    has_api = work["api_start"].to_numpy() >= 0
    api_time = np.where(has_api, (work["api_end"] - work["api_start"]).to_numpy(), 0)
    memory_names = memory_label(ctx.profile, work[~is_kernel])
    names = work["name_id"].to_numpy()

    def row(label: str, mask: np.ndarray, distinct: int) -> tuple[str, int, int, int]:
        return (label, int(gpu_time[mask].sum()), int(api_time[mask].sum()), distinct)

    return pd.DataFrame(
        [
            row("All kernels", np.ones(len(work), dtype=bool),
                len(np.unique(names[is_kernel])) + memory_names.nunique()),
            row("Kernels using TC", tc, len(np.unique(names[tc]))),
            row("Memory", ~is_kernel, memory_names.nunique()),
            row("All other kernels", is_kernel & ~tc, len(np.unique(names[is_kernel & ~tc]))),
        ],
        columns=[f.key for f in KERNEL_FIELDS],
    )


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
    agg = per_iteration[per_iteration["aggregated"].to_numpy()]
    wall = int(agg["duration_ns"].sum())
    summary: list[tuple[Field, object]] = [(WALL_CLOCK, wall)]
    tc_util = tc_kernel_utilization(ctx)  # defined in reports/detail.py and docs/ops.md
    if tc_util is not None:
        summary.append((TC_UTILIZATION, tc_util))
    summary.append((GPU_UTILIZATION, share(float(agg["gpu_busy_ns"].sum()), wall)))
    summary += [(SHARES[name], share(float(agg[f"{name}_ns"].sum()), wall)) for name in PARTITION]

    durations = agg["duration_ns"].to_numpy(dtype=np.float64)
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
            Table("all_kernels", "All Kernels", KERNEL_FIELDS, kernel_totals(ctx)),
            Table("all_ops", "All Ops", OP_FIELDS, op_totals(deps["detail"].main)),
            Table("iterations", "Iterations", ITERATION_FIELDS, per_iteration, csv=False),
            Table("op_type_iterations", "GPU Time per Op Type and Iteration", OP_TYPE_ITERATION_FIELDS,
                  op_type_iterations(ctx), csv=False),
        ),
        warnings=() if tc_util is not None else (
            "summary: no Tensor Core Kernel Utilization %: no Tensor-Core-eligible op ran a kernel in the "
            "aggregated iterations (see the detail report)",),
    )
