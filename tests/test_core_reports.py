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

GPU_RECORDINGS = ("cuda_basic", "resnet_fp32", "resnet_amp", "dataloader_bound", "no_emit_nvtx", "h2d_heavy",
                  "cuda_graph")


def build(name: str, tmp_path: Path, **kw: object):
    options = Options(nsys_database=recording(name), reports=("summary", "kernel", "iteration"),
                      output_path=tmp_path, suppress_tb_files=True, verbosity="quiet", **kw)
    result = run(options)
    return {r.name: r for r in result.reports}, result


def meta(name: str) -> dict:
    return json.loads((recording_dir(name) / "meta.json").read_text())


@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_kernel_totals_equal_nsys_stats(name: str, tmp_path: Path) -> None:
    reports, _ = build(name, tmp_path)
    ours = reports["kernel"].table.groupby("Long Kernel Name").agg(
        total=("Total GPU Time (ns)", "sum"), calls=("Calls", "sum"))
    oracle = pd.read_csv(recording_dir(name) / f"{name}_gpukernsum.csv").groupby("Name").agg(
        total=("Total Time (ns)", "sum"), calls=("Instances", "sum"))
    assert len(ours) == len(oracle)
    joined = oracle.merge(ours, left_index=True, right_index=True, how="left", suffixes=("_nsys", ""))
    assert joined["total"].astype("int64").tolist() == joined["total_nsys"].tolist()
    assert joined["calls"].astype("int64").tolist() == joined["calls_nsys"].tolist()


@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_kernel_min_max_equal_nsys_stats_per_name(name: str, tmp_path: Path) -> None:
    reports, _ = build(name, tmp_path)
    ours = reports["kernel"].table.groupby("Long Kernel Name").agg(
        mn=("Min GPU Time (ns)", "min"), mx=("Max GPU Time (ns)", "max"))
    oracle = pd.read_csv(recording_dir(name) / f"{name}_gpukernsum.csv").groupby("Name").agg(
        mn=("Min (ns)", "min"), mx=("Max (ns)", "max"))
    joined = oracle.merge(ours, left_index=True, right_index=True, how="left", suffixes=("_nsys", ""))
    assert (joined["mn"] == joined["mn_nsys"]).all() and (joined["mx"] == joined["mx_nsys"]).all()


@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_iteration_report_holds_every_kernel_once(name: str, tmp_path: Path) -> None:
    reports, result = build(name, tmp_path)
    table = reports["iteration"].table
    assert len(table) == meta(name)["summary"]["kernels"]
    assert table["GPU Duration (ns)"].sum() == reports["kernel"].table["Total GPU Time (ns)"].sum()
    # Every kernel correlates with its launch call in these recordings.
    assert table["API Call Start (ns)"].notna().all()
    assert (table["API Call Start (ns)"] <= table["GPU Start Time (ns)"]).all()


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
    table = reports["iteration"].table
    assert sorted(table["Iteration"].unique()) == list(range(lo, hi + 1))
    # cuda_basic launches exactly 5 kernels per train_step
    assert len(table) == 5 * (hi - lo + 1)
    # Each kernel's launch call lies in its iteration's window (end of key i-1, end of key i].
    api = table["API Call Start (ns)"].to_numpy()
    it = table["Iteration"].to_numpy()
    assert (api > np.where(it > 0, its.ends[it - 1], its.starts[0] - 1)).all()
    assert (api <= its.ends[it]).all()
    summary = dict(reports["summary"].sections[2].table.values)
    assert summary["Aggregated Iterations"] == hi - lo + 1
    wall = dict(reports["summary"].sections[1].table.values)["Wall Clock Time (ns)"]
    assert wall == its.ends[hi] - its.starts[lo]


def test_summary_partition_sums_to_wall_clock(tmp_path: Path) -> None:
    reports, _ = build("resnet_amp", tmp_path)
    values = dict(reports["summary"].sections[1].table.values)
    shares = [v for k, v in values.items() if k.endswith("Duration %")]
    assert len(shares) == 7
    assert sum(shares) == pytest.approx(100.0, abs=0.4)  # each share is rounded to one decimal
    bd = reports["summary"].per_iteration
    parts = bd[["tc_kernel", "kernel", "memory", "dataloader", "io", "cpu", "other"]].sum(axis=1)
    assert (parts == bd["duration"]).all()


def test_summary_all_kernels_section_matches_kernel_report(tmp_path: Path) -> None:
    reports, _ = build("cuda_basic", tmp_path)
    kernels = reports["summary"].sections[3].table.set_index("")
    kernel_total = reports["kernel"].table["Total GPU Time (ns)"].sum()
    memory = kernels.loc["Memory", "GPU Time (ns)"]
    assert kernels.loc["All kernels", "GPU Time (ns)"] == kernel_total + memory
    oracle = pd.read_csv(recording_dir("cuda_basic") / "cuda_basic_gpumemtimesum.csv")
    assert memory == oracle["Total Time (ns)"].sum()
    # 5 kernel names + HtoD, DtoH, DtoD copies + memset
    assert kernels.loc["All kernels", "# Kernels"] == 5 + 4


def test_summary_system_config_from_the_export(tmp_path: Path) -> None:
    reports, _ = build("resnet_amp", tmp_path)
    config = dict(reports["summary"].sections[0].table.values)
    assert config["GPU Count"] == 1
    assert config["GPU Name(s)"] == "NVIDIA H200"
    assert config["GPU Driver Version"] == "580.159.04"
    assert config["NSys Version"] == "2022.4.2.1"


def test_cpu_only_export_writes_summary_and_says_why_not_kernels(tmp_path: Path) -> None:
    options = Options(nsys_database=recording("cpu_nvtx_numpy"), reports=("all",), output_path=tmp_path,
                      suppress_tb_files=True, verbosity="quiet")
    result = run(options)
    names = [r.name for r in result.reports]
    assert "summary" in names and "kernel" not in names and "iteration" not in names
    assert any("no CUDA kernels" in w for w in result.warnings)
    values = dict(result.reports[names.index("summary")].sections[1].table.values)
    assert values["GPU Utilization %"] == 0.0
    assert values["Other Duration %"] < 100.0  # CPU-side NVTX ranges were found


def test_library_run_without_any_output_format_builds_reports(tmp_path: Path) -> None:
    result = run(Options(nsys_database=recording("cuda_basic"), reports=("kernel",), formats=(),
                         output_path=tmp_path, suppress_tb_files=True, verbosity="quiet"))
    assert [r.name for r in result.reports] == ["kernel"] and result.written == ()
    assert list(tmp_path.iterdir()) == []
