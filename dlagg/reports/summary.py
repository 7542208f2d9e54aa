"""Summary report: system, wall-clock partition, iterations and kernel totals (DLProf's sections)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import __version__
from ..timeline.breakdown import CLASSES
from ..timeline.correlate import KERNEL, memory_label
from .base import Report, ReportContext, Section, report
from .detail import all_ops_table, tc_kernel_utilization

DURATION_LABELS = {
    "tc_kernel": "Tensor Core Kernel Duration %",
    "kernel": "Non-Tensor Core Kernel Duration %",
    "memory": "Memory Duration %",
    "dataloader": "Dataloader Duration %",
    "io": "IO Duration %",
    "cpu": "CPU Duration %",
    "other": "Other Duration %",
}


def _kv(rows: list[tuple[str, object]]) -> pd.DataFrame:
    return pd.DataFrame({"Name": [r[0] for r in rows], "Value": pd.Series([r[1] for r in rows], dtype=object)})


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


def system_config(ctx: ReportContext) -> list[tuple[str, object]]:
    profile = ctx.profile
    env = profile.meta.system_env
    gpus = profile.gpus
    rows: list[tuple[str, object]] = [("GPU Count", len(gpus))]
    if len(gpus):
        rows.append(("GPU Name(s)", ", ".join(str(n) for n in gpus["name"])))
    if env.get("CpuDescription"):
        rows.append(("CPU Model", env["CpuDescription"]))
    if env.get("NvDriverVersion"):
        rows.append(("GPU Driver Version", _driver_version(env["NvDriverVersion"])))
    if env.get("CudaDriverVersion"):
        rows.append(("CUDA Driver Version", _cuda_version(env["CudaDriverVersion"])))
    if profile.meta.nsys_version:
        rows.append(("NSys Version", profile.meta.nsys_version))
    rows.append(("dlagg Version", __version__))
    return rows


def pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


@report("summary")
def build(ctx: ReportContext) -> Report:
    """System config, wall-clock partition (TC/kernel/memory/dataloader/IO/CPU/other), iterations, totals."""
    its = ctx.iterations
    bd = ctx.breakdown
    agg = bd[bd["aggregated"]]
    wall = int(agg["duration"].sum())
    gpu_util = pct(float(agg["gpu_busy"].sum()), wall)
    summary_rows: list[tuple[str, object]] = [("Wall Clock Time (ns)", wall), ("GPU Utilization %", gpu_util)]
    shares = {name: pct(float(agg[name].sum()), wall) for name in (*CLASSES, "other")}
    summary_rows += [(DURATION_LABELS[name], shares[name]) for name in (*CLASSES, "other")]
    tc_util = tc_kernel_utilization(ctx)  # defined in reports/detail.py and docs/ops.md
    if tc_util is not None:
        summary_rows.insert(1, ("Tensor Core Kernel Utilization %", tc_util))

    durations = agg["duration"].to_numpy(dtype=np.float64)
    iteration_rows: list[tuple[str, object]] = [
        ("Key Node", its.key_node or "(not found)"),
        ("Total Iterations", its.count),
        ("Aggregated Iterations", its.stop - its.start + 1),
        ("Start Iteration", its.start),
        ("Stop Iteration", its.stop),
        ("Average Iteration Time (ns)", round(float(durations.mean()), 1)),
        ("Iteration Time Standard Deviation", round(float(durations.std()), 1)),
    ]

    work = ctx.selected_work
    is_kernel = work["kind"].to_numpy() == KERNEL
    tc = np.zeros(len(work), dtype=bool)
    tc[is_kernel] = ctx.kernel_uses_tc.reindex(work["name_id"].to_numpy()[is_kernel]).fillna(False).to_numpy(dtype=bool)
    gpu_time = (work["end"] - work["start"]).to_numpy()
    has_api = work["api_start"].to_numpy() >= 0
    api_time = np.where(has_api, (work["api_end"] - work["api_start"]).to_numpy(), 0)
    memory_names = memory_label(ctx.profile, work[~is_kernel])

    def row(label: str, mask: np.ndarray, distinct: int) -> tuple[str, int, int, int]:
        return (label, int(gpu_time[mask].sum()), int(api_time[mask].sum()), distinct)

    names = work["name_id"].to_numpy()
    kernels_table = pd.DataFrame(
        [
            row("All kernels", np.ones(len(work), dtype=bool),
                len(np.unique(names[is_kernel])) + memory_names.nunique()),
            row("Kernels using TC", tc, len(np.unique(names[tc]))),
            row("Memory", ~is_kernel, memory_names.nunique()),
            row("All other kernels", is_kernel & ~tc, len(np.unique(names[is_kernel & ~tc]))),
        ],
        columns=["", "GPU Time (ns)", "CPU Time (ns)", "# Kernels"],
    )
    scalars = {"wall_clock_ns": float(wall), "gpu_utilization_pct": gpu_util,
               **{f"{name}_pct": shares[name] for name in shares}}
    if tc_util is not None:
        scalars["tc_kernel_utilization_pct"] = tc_util
    return Report(
        "summary",
        "summary",
        (
            Section("System Config", _kv(system_config(ctx)), header=False),
            Section("Summary Report", _kv(summary_rows), header=False),
            Section("Iterations", _kv(iteration_rows), header=False),
            Section("All Kernels", kernels_table),
            Section("All Ops", all_ops_table(ctx)),  # after All Kernels so earlier sections keep their place
        ),
        scalars=scalars,
        per_iteration=bd,
        warnings=() if tc_util is not None else (
            "summary: no Tensor Core Kernel Utilization %: no Tensor-Core-eligible op ran a kernel in the "
            "aggregated iterations (see the detail report)",),
    )
