"""Kernel, iteration and summary reports on the real recordings, against nsys's own numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile

from .conftest import recording, recording_dir
from .recorded import short_names, sql

GPU_RECORDINGS = ("cuda_basic", "resnet_fp32", "resnet_amp", "dataloader_bound", "no_emit_nvtx", "h2d_heavy",
                  "cuda_graph")


def build(name: str, tmp_path: Path, **kw: object):
    options = Options(nsys_database=recording(name), reports=("summary", "kernel", "iteration"),
                      output_path=tmp_path, suppress_tb_files=True, verbosity="quiet", **kw)
    result = run(options)
    return {r.name: r for r in result.reports}, result


def meta(name: str) -> dict:
    return json.loads((recording_dir(name) / "meta.json").read_text())


def gpukernsum(name: str) -> pd.DataFrame:
    """nsys's gpukernsum rows with each demangled kernel name mapped to its short name (SQL): a kernel's
    identity in DLProf's reports is its short name."""
    table = pd.read_csv(recording_dir(name) / f"{name}_gpukernsum.csv")
    return table.assign(Name=table["Name"].map(short_names(name)))


@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_kernel_totals_equal_nsys_stats(name: str, tmp_path: Path) -> None:
    reports, _ = build(name, tmp_path)
    ours = reports["kernel"].main.frame.groupby("kernel_name").agg(
        total=("gpu_time_total_ns", "sum"), calls=("calls", "sum"))
    oracle = gpukernsum(name).groupby("Name").agg(total=("Total Time (ns)", "sum"), calls=("Instances", "sum"))
    assert len(ours) == len(oracle)
    joined = oracle.merge(ours, left_index=True, right_index=True, how="left", suffixes=("_nsys", ""))
    assert joined["total"].astype("int64").tolist() == joined["total_nsys"].tolist()
    assert joined["calls"].astype("int64").tolist() == joined["calls_nsys"].tolist()


@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_kernel_min_max_equal_nsys_stats_per_name(name: str, tmp_path: Path) -> None:
    reports, _ = build(name, tmp_path)
    ours = reports["kernel"].main.frame.groupby("kernel_name").agg(
        mn=("gpu_time_min_ns", "min"), mx=("gpu_time_max_ns", "max"))
    oracle = gpukernsum(name).groupby("Name").agg(mn=("Min (ns)", "min"), mx=("Max (ns)", "max"))
    joined = oracle.merge(ours, left_index=True, right_index=True, how="left", suffixes=("_nsys", ""))
    assert (joined["mn"] == joined["mn_nsys"]).all() and (joined["mx"] == joined["mx_nsys"]).all()


@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_iteration_report_holds_every_kernel_once(name: str, tmp_path: Path) -> None:
    reports, result = build(name, tmp_path)
    table = reports["iteration"].main.frame
    assert len(table) == meta(name)["summary"]["kernels"]
    assert table["gpu_duration_ns"].sum() == reports["kernel"].main.frame["gpu_time_total_ns"].sum()
    # Every kernel correlates with its launch call in these recordings.
    assert table["api_start_ns"].notna().all()
    assert (table["api_start_ns"] <= table["gpu_start_ns"]).all()


@pytest.mark.parametrize("name", [*GPU_RECORDINGS, "cpu_nvtx_numpy"])
def test_iteration_count_equals_train_step_ranges(name: str) -> None:
    from dlagg.timeline.iterations import detect_iterations

    profile = load_profile(recording(name))
    its = detect_iterations(profile)
    assert its.key_node == "train_step"
    assert its.count == meta(name)["summary"]["iterations_train_step"]


def test_iterations_are_cut_at_key_node_ends(tmp_path: Path) -> None:
    from dlagg.timeline.iterations import detect_iterations

    profile = load_profile(recording("cuda_basic"))
    its = detect_iterations(profile, "train_step")
    steps = profile.nvtx[profile.strings.decode(profile.nvtx["text_id"]).to_numpy() == "train_step"]
    ends = np.sort(steps["end"].to_numpy())
    assert its.ends.tolist() == ends.tolist()
    assert its.starts[0] == profile.meta.start
    assert its.starts[1:].tolist() == ends[:-1].tolist()


@pytest.mark.parametrize(("start", "stop"), [(0, 0), (3, 7), (9, 9), (2, None), (None, 4)])
def test_iter_start_stop_select_exactly_those_windows(start: int | None, stop: int | None, tmp_path: Path) -> None:
    reports, result = build("cuda_basic", tmp_path, iter_start=start, iter_stop=stop)
    its = result.iterations
    lo, hi = (start or 0), (9 if stop is None else stop)
    assert (its.start, its.stop) == (lo, hi)
    table = reports["iteration"].main.frame
    assert sorted(table["iteration"].unique()) == list(range(lo, hi + 1))
    # cuda_basic launches exactly 5 kernels per train_step
    assert len(table) == 5 * (hi - lo + 1)
    # Each kernel's launch call lies in its iteration's launch window (end of key i-1, end of key i].
    api = table["api_start_ns"].to_numpy()
    it = table["iteration"].to_numpy()
    assert (api > np.where(it > 0, its.launch_ends[it - 1], its.starts[0] - 1)).all()
    assert (api <= its.launch_ends[it]).all()
    assert reports["summary"].table("iterations_summary").values["aggregated_iterations"] == hi - lo + 1
    wall = reports["summary"].table("summary").values["wall_clock_ns"]
    assert wall == its.ends[hi] - its.starts[lo]


def test_summary_partition_sums_to_wall_clock(tmp_path: Path) -> None:
    reports, _ = build("resnet_amp", tmp_path)
    values = reports["summary"].table("summary").values
    shares = [v for k, v in values.items() if k.endswith("_duration_pct")]
    assert len(shares) == 7
    assert sum(shares) == pytest.approx(100.0)
    bd = reports["summary"].table("iterations").frame
    parts = bd[[f"{c}_ns" for c in ("tc_kernel", "kernel", "memory", "dataloader", "io", "cpu", "other")]].sum(axis=1)
    assert (parts == bd["duration_ns"]).all()


def test_summary_all_kernels_section_matches_kernel_report(tmp_path: Path) -> None:
    reports, _ = build("cuda_basic", tmp_path)
    kernels = reports["summary"].table("all_kernels").frame.set_index("kernels")
    kernel_total = reports["kernel"].main.frame["gpu_time_total_ns"].sum()
    memory = kernels.loc["Memory", "gpu_time_ns"]
    assert kernels.loc["All kernels", "gpu_time_ns"] == kernel_total + memory
    oracle = pd.read_csv(recording_dir("cuda_basic") / "cuda_basic_gpumemtimesum.csv")
    assert memory == oracle["Total Time (ns)"].sum()
    # 5 kernel names + the distinct CUDA calls that issued memory operations (DLProf counts those)
    calls = sql("cuda_basic", """
        SELECT COUNT(DISTINCT s.value) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
        WHERE r.correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY
                                  UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET)""")[0][0]
    assert calls == 4  # cudaMemcpy, cudaMemcpyAsync, cudaMemset, cudaMemsetAsync (meta.json's description)
    assert kernels.loc["Memory", "distinct_kernels"] == calls
    assert kernels.loc["All kernels", "distinct_kernels"] == 5 + calls


def test_summary_system_config_from_the_export(tmp_path: Path) -> None:
    reports, _ = build("resnet_amp", tmp_path)
    config = reports["summary"].table("system").values
    assert config["gpu_count"] == 1
    assert config["gpu_names"] == "NVIDIA H200"
    assert config["driver_version"] == "580.159.04"
    assert config["nsys_version"] == "2022.4.2.1"


def test_cpu_only_export_writes_summary_and_says_why_not_kernels(tmp_path: Path) -> None:
    options = Options(nsys_database=recording("cpu_nvtx_numpy"), reports=("all",), output_path=tmp_path,
                      suppress_tb_files=True, verbosity="quiet")
    result = run(options)
    names = [r.name for r in result.reports]
    assert "summary" in names and "kernel" not in names and "iteration" not in names
    assert any("no CUDA kernels" in w for w in result.warnings)
    values = result.reports[names.index("summary")].table("summary").values
    assert values["gpu_utilization_pct"] == 0.0
    assert values["other_duration_pct"] < 100.0  # CPU-side NVTX ranges were found


def test_library_run_without_any_output_format_builds_reports(tmp_path: Path) -> None:
    result = run(Options(nsys_database=recording("cuda_basic"), reports=("kernel",), formats=(),
                         output_path=tmp_path, suppress_tb_files=True, verbosity="quiet"))
    assert [r.name for r in result.reports] == ["kernel"] and result.written == ()
    assert list(tmp_path.iterdir()) == []


def test_iteration_report_grid_sizes_are_shown_as_recorded(tmp_path: Path) -> None:
    """Grid and block sizes fit 32 bits in any real export (CUDA's limits) and are held so in the iteration report;
    a damaged export's larger size is shown as recorded, not wrapped."""
    from . import dlprof_csv
    from .builders import ExportBuilder

    b = ExportBuilder()
    for i, grid in enumerate([(2**33, 1, 1), (4, 65535, 1)]):
        b.range(1000 * i, 1000 * i + 900, "train_step")
        b.launch(1000 * i + 10, 1000 * i + 20, 1000 * i + 100, 1000 * i + 700, name="gemm", grid=grid)
    path = b.write(tmp_path / "grid.sqlite")
    run(Options(nsys_database=str(path), reports=("iteration",), formats=("csv",), output_path=tmp_path / "out",
                suppress_tb_files=True, verbosity="quiet"))
    rows = dlprof_csv.table(tmp_path / "out" / "dlagg_iteration.csv")
    assert rows["Grid X"].tolist() == [2**33, 4] and rows["Grid Y"].tolist() == [1, 65535]
