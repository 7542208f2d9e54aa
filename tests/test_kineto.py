"""PyTorch profiler (Kineto) traces against what the JSON says, the recorded ground truth and HTA.

Expected values come from the trace files themselves, parsed here with the standard library's json and
exact decimals (never through dlagg's reader), from ``truth_rank<R>.json`` (CUDA events the training script
recorded around each step) and from Holistic Trace Analysis 0.5.0's own output (``ddp2/hta/``).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from decimal import Decimal
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile

from . import dlprof_csv
from .conftest import dlagg, fixture_path
from .marks import quick_on

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")


def folder(name: str) -> Path:
    return fixture_path(f"kineto/{name}/truth_rank0.json", f"Kineto fixture {name}").parent


def traces(name: str) -> list[Path]:
    return sorted(folder(name).glob("*.pt.trace.json.gz"))


@cache
def events(path: Path) -> tuple[dict, ...]:
    with gzip.open(path, "rt") as handle:
        return tuple(json.load(handle, parse_float=Decimal)["traceEvents"])


def ns(value: Decimal | int) -> int:
    """A trace time (microseconds, three decimals) as exact nanoseconds."""
    exact = Decimal(value) * 1000
    assert exact == exact.to_integral_value()
    return int(exact)


def steps(path: Path) -> list[tuple[int, int]]:
    """(start, end) in ns of every ProfilerStep#N range, in order."""
    found = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events(path)
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    return sorted(found)


def launches(path: Path) -> dict[int, int]:
    """correlation id -> start (ns) of the runtime or driver call that launched it."""
    return {e["args"]["correlation"]: ns(e["ts"]) for e in events(path) if e.get("cat") in CALL_CATEGORIES}


def kernel_sums(path: Path, until: int | None = None) -> dict[str, int]:
    """Total kernel time (ns) per kernel name, of the kernels launched at or before `until` (all: None)."""
    launched = launches(path)
    sums: dict[str, int] = defaultdict(int)
    for e in events(path):
        if e.get("cat") == "kernel" and (until is None or launched[e["args"]["correlation"]] <= until):
            sums[e["name"]] += ns(e["dur"])
    return dict(sums)


@pytest.mark.parametrize("name", quick_on("resnet_amp", ["resnet_amp", "ddp2"]))
def test_the_reader_keeps_every_kernel_to_the_nanosecond(name: str) -> None:
    for path in traces(name):
        profile = load_profile(path)
        kernels = profile.kernels
        names = profile.strings.decode(kernels["name_id"]).to_numpy()
        got = pd.Series((kernels["end"] - kernels["start"]).to_numpy(), index=names).groupby(level=0).sum()
        assert got.to_dict() == kernel_sums(path)
        assert len(profile.runtime) == sum(e.get("cat") in CALL_CATEGORIES for e in events(path))
        assert len(profile.memcpy) == sum(e.get("cat") == "gpu_memcpy" for e in events(path))
        assert len(profile.memset) == sum(e.get("cat") == "gpu_memset" for e in events(path))


@pytest.mark.parametrize("name", quick_on("resnet_amp", ["resnet_amp", "ddp2"]))
def test_kernel_report_totals_equal_the_json_sums(name: str, tmp_path: Path, capsys) -> None:
    """Every kernel launched in the iterations (up to the last ProfilerStep's end), summed over ranks."""
    code, _, err = dlagg(capsys, f"--trace={folder(name)}", "--reports=kernel", f"--output_path={tmp_path}")
    assert code == 0, err
    report = dlprof_csv.table(tmp_path / "dlagg_kernel.csv")
    total = [c for c in report.columns if c.startswith("Total GPU Time (ns")][0]
    got = report.groupby("Kernel Name")[total].sum().astype(np.int64).to_dict()
    expected: dict[str, int] = defaultdict(int)
    for path in traces(name):
        for kernel, value in kernel_sums(path, until=steps(path)[-1][1]).items():
            expected[short(kernel)] += value
    assert got == dict(expected)


def short(name: str) -> str:
    """A demangled kernel name's function name, as nsys shortens it: the rows of the kernel report (kernels of
    one function with other template arguments are one row)."""
    text = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")
    return re.match(r"[^<(]*", text).group(0).split("::")[-1]  # type: ignore[union-attr]


def truth(name: str, rank: int) -> dict:
    return json.loads((folder(name) / f"truth_rank{rank}.json").read_text())


@pytest.mark.parametrize("name", ["resnet_amp", "ddp2"])
def test_iteration_times_follow_the_gpu_pace_recorded_by_the_script(name: str, tmp_path: Path) -> None:
    result = run(Options(nsys_database=folder(name), reports=("summary",), output_path=tmp_path, formats=("json",)))
    assert len(result.ranks) == len(traces(name))
    for figures in result.ranks:
        recorded = truth(name, figures.source.rank)
        iterations = figures.iterations
        assert iterations.count == recorded["profiled_steps"] == 10
        assert iterations.key_node == "ProfilerStep#*"
        times = np.diff(np.concatenate(([iterations.starts[0]], iterations.ends))) / 1e6
        assert times.mean() == pytest.approx(recorded["gpu_pace_ms_per_step"], rel=0.02)
        # each step after the first (the first also holds what ran before ProfilerStep#3 began)
        gpu_ms = np.array([s["gpu_ms"] for s in recorded["steps"]])
        assert np.abs(times[1:] / gpu_ms[1:] - 1).max() < 0.02


def test_the_ranks_report_has_both_ranks_with_ten_iterations(tmp_path: Path, capsys) -> None:
    code, _, err = dlagg(capsys, f"--trace={folder('ddp2')}", "--reports=all", "--formats=all",
                         f"--output_path={tmp_path}")
    assert code == 0, err
    assert "left out 2 files that are not a profiler trace (truth_rank0.json, truth_rank1.json)" in err
    ranks = dlprof_csv.table(tmp_path / "dlagg_ranks.csv")
    assert ranks["Rank"].tolist() == [0, 1]
    assert ranks["Iterations"].tolist() == [10, 10]
    assert ranks["GPU"].astype(str).tolist() == ["0", "1"]
    written = {p.name for p in tmp_path.iterdir()}
    for report in ("summary", "detailed", "kernel", "iteration", "tensor_core", "op_type", "group_op",
                   "expert_systems", "ranks", "collectives"):
        assert f"dlagg_{report}.csv" in written and f"dlagg_{report}.json" in written
    assert "dlagg_report.html" in written and (tmp_path / "event_files" / "dlagg").is_dir()


# HTA 0.5.0 reads trace times as doubles and rounds every event inward to whole microseconds (start up, end
# down: hta/common/trace_parser.py round_down_time_stamps), so a sub-microsecond kernel gets a negative duration;
# then it merges intervals sorted by start (utils.merge_kernel_intervals). Reproduced here on the JSON.
def _hta_merged(intervals: list[tuple[float, float]]) -> float:
    frame = pd.DataFrame(intervals, columns=["ts", "end"]).sort_values("ts", kind="stable")
    group = (frame["ts"] > frame["end"].shift().cummax()).cumsum()
    merged = frame.groupby(group).agg({"ts": "min", "end": "max"})
    return float(merged["end"].sum() - merged["ts"].sum())


def _union(intervals: list[tuple[int, int]]) -> int:
    total, start, end = 0, None, None
    for s, e in sorted(intervals):
        if start is None or s > end:
            total += 0 if start is None else end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (0 if start is None else end - start)


def _gpu_work(path: Path, kept: int) -> list[tuple[dict, bool]]:
    """GPU events launched in the first `kept` steps, each with whether it is compute (not NCCL, not a copy)."""
    launched, windows = launches(path), steps(path)[:kept]
    out = []
    for e in events(path):
        if e.get("cat") in GPU_CATEGORIES and any(s <= launched[e["args"]["correlation"]] <= t for s, t in windows):
            out.append((e, e["cat"] == "kernel" and not e["name"].startswith("nccl")))
    return out


def test_temporal_breakdown_against_hta(tmp_path: Path) -> None:
    """HTA drops the last step and rounds times to whole microseconds. Its figures are reproduced from the JSON
    with its rounding (which shows what its definitions are); dlagg's, over the same nine steps, are the same
    definitions on exact times: compute is the union of the compute kernels, exposed communication what the
    communication kernels add to it (HTA's non-compute also counts copies and memsets)."""
    hta = pd.read_csv(folder("ddp2") / "hta" / "hta_temporal_breakdown.csv").set_index("rank")
    result = run(Options(nsys_database=folder("ddp2"), reports=("ranks",), iter_stop=8, output_path=tmp_path,
                         formats=("json",)))
    per_iteration = next(r for r in result.reports if r.name == "ranks").table("iterations").frame
    for path in traces("ddp2"):
        rank = int(path.name[len("rank")])
        work = _gpu_work(path, kept=9)
        rounded = [(math.ceil(e["ts"]), math.floor(e["ts"] + e["dur"]), compute) for e, compute in work]
        compute = _hta_merged([(s, t) for s, t, c in rounded if c])
        busy = _hta_merged([(s, t) for s, t, _ in rounded])
        span = max(t for _, t, _ in rounded) - min(s for s, _, _ in rounded)
        assert compute == pytest.approx(hta.loc[rank, "compute_time(us)"], rel=0.01)
        assert busy - compute == pytest.approx(hta.loc[rank, "non_compute_time(us)"], rel=0.01)
        assert span - busy == pytest.approx(hta.loc[rank, "idle_time(us)"], rel=0.01)
        exact = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), c, e["name"].startswith("nccl")) for e, c in work]
        exact_compute = _union([(s, t) for s, t, c, _ in exact if c])
        exposed = _union([(s, t) for s, t, c, comm in exact if c or comm]) - exact_compute
        mine = per_iteration[per_iteration["rank"] == rank]
        assert len(mine) == 9
        assert mine["compute_kernel_ns"].sum() == pytest.approx(exact_compute, abs=1)
        assert mine["exposed_comm_ns"].sum() == pytest.approx(exposed, abs=1)


def test_hta_fails_on_resnet_amp_and_dlagg_does_not(tmp_path: Path, capsys) -> None:
    """HTA 0.5.0 stops with an assertion in its temporal breakdown of this trace (see the fixture's README)."""
    code, out, err = dlagg(capsys, f"--trace={traces('resnet_amp')[0]}", "--reports=all", "--formats=csv,json",
                           f"--output_path={tmp_path}")
    assert code == 0, err
    assert "Traceback" not in err
    summary = dlprof_csv.read(tmp_path / "dlagg_summary.csv")
    assert summary["Iterations"].values()["Total Iterations"] == 10


def test_collectives_carry_message_size_and_bus_bandwidth(tmp_path: Path, capsys) -> None:
    """Size and bus bandwidth as nccl-tests defines them (AllReduce: 2(n-1)/n of size over time), from the NCCL
    kernels' args in the JSON; the time is the instance's shortest duration on any rank (its transfer)."""
    code, _, err = dlagg(capsys, f"--trace={folder('ddp2')}", "--reports=collectives", f"--output_path={tmp_path}")
    assert code == 0, err
    report = dlprof_csv.table(tmp_path / "dlagg_collectives.csv")
    per_rank = []
    for path in traces("ddp2"):
        launched, last_end = launches(path), steps(path)[-1][1]
        nccl = [e for e in events(path) if e.get("cat") == "kernel" and e["name"].startswith("nccl")
                and launched[e["args"]["correlation"]] <= last_end]
        per_rank.append(sorted(nccl, key=lambda e: ns(e["ts"])))
    assert len(report) == sum(len(k) for k in per_rank) == 100
    sizes = [max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * 4 for e in per_rank[0]]  # Float
    assert all(e["args"]["dtype"] == "Float" for k in per_rank for e in k)
    shortest = [min(ns(a["dur"]), ns(b["dur"])) for a, b in zip(*per_rank, strict=True)]
    expected = [size / time * 2 * (2 - 1) / 2 for size, time in zip(sizes, shortest, strict=True)]
    mine = report[report["Rank"] == 0].sort_values(["Iteration", "Collective"])
    assert mine["Size (B)"].astype(np.int64).tolist() == sizes
    assert mine["Bus Bandwidth (GB/s)"].tolist() == pytest.approx(expected, abs=0.006)
    assert set(report["Algorithm"]) == {"RING_LL"} and set(report["Operation"]) == {"AllReduce"}


def test_a_trace_compares_with_an_nsys_export_of_the_same_model(tmp_path: Path, capsys) -> None:
    """The same ResNet-18 AMP step recorded by nsys (15 steps) and by torch.profiler (10): a verdict, per-iteration
    figures, and the Tensor Core share of both alike (the same kernels)."""
    nsys = fixture_path("nsys-2022.4/resnet_amp/resnet_amp.sqlite", "nsys fixture resnet_amp")
    code, out, err = dlagg(capsys, f"--trace={traces('resnet_amp')[0]}", f"--baseline={nsys}", "--reports=summary",
                           f"--output_path={tmp_path}")
    assert code == 0, err
    assert "Compared with the baseline: Iteration time" in out
    assert "the key nodes differ (baseline: train_step; current: ProfilerStep#*)" in err
    compare = dlprof_csv.read(tmp_path / "dlagg_compare.csv")
    assert compare
    # the nsys export's own figure is 83.0 % (README's summary of this recording)
    current = dlprof_csv.read(tmp_path / "dlagg_summary.csv")["Summary Report"].values()
    assert float(current["Tensor Core Kernel Utilization %"]) == pytest.approx(83.0, abs=1.0)
