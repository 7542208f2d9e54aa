"""Comparing two profiles (--baseline): the compare report, the verdict, the command line.

Expected values come from the two profiles' own reports, written by separate runs, and from
hand-built exports whose iteration and kernel times are known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dlagg.baseline import load
from dlagg.options import Baseline, Options
from dlagg.pipeline import run
from dlagg.reports.compare import CONFIDENCE, Samples, bootstrap_ratio, compare, comparison_of
from dlagg.reports.figures import NS, Field, Table

from .builders import ExportBuilder
from .conftest import dlagg, ncu_csv, recording

STEPS = 15  # train_step iterations in the resnet recordings
# TensorBoard scalars are float32 in ms
F32_REL = 1e-6


def table(path: Path, key: str) -> pd.DataFrame:
    """A table of a written JSON report, columns named by field key."""
    doc = json.loads(path.read_text())
    (found,) = [t for t in doc["tables"] if t["key"] == key]
    return pd.DataFrame(found["rows"], columns=[f["key"] for f in found["fields"]])


def values(path: Path, key: str) -> dict[str, object]:
    """A key/value table of a written JSON report."""
    return table(path, key).iloc[0].to_dict()


def compared(out: Path, profile: str = "dlagg") -> pd.DataFrame:
    return table(out / f"{profile}_compare.json", "compare").set_index("key")


def section(rows: pd.DataFrame, name: str, *, total: bool = False) -> pd.DataFrame:
    part = rows[rows["section"] == name]
    return part if total else part[~part.index.str.endswith("_total")]


# --- resnet_fp32 -> resnet_amp ------------------------------------------------------------------

@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> dict[str, object]:
    """resnet_amp compared with resnet_fp32, and each profile's own reports from a run of its own."""
    out = tmp_path_factory.mktemp("resnet")
    reports = ("summary", "op_type", "expert_systems")
    result = run(Options(nsys_database=recording("resnet_amp"), baseline=Baseline(recording("resnet_fp32")),
                         reports=reports, formats=("csv", "json"), output_path=out, verbosity="quiet"))
    for name in ("resnet_fp32", "resnet_amp"):
        run(Options(nsys_database=recording(name), reports=reports, formats=("json",), output_path=out,
                    profile_name=name, suppress_tb_files=True, verbosity="quiet"))
    return {"out": out, "result": result, "rows": compared(out)}


def own(resnet: dict, profile: str, report: str) -> Path:
    return resnet["out"] / f"{profile}_{report}.json"  # type: ignore[operator]


def test_resnet_iteration_time_delta_is_the_difference_of_the_two_summaries(resnet: dict) -> None:
    rows = resnet["rows"]
    before = values(own(resnet, "resnet_fp32", "summary"), "iterations_summary")["iteration_time_avg_ns"]
    after = values(own(resnet, "resnet_amp", "summary"), "iterations_summary")["iteration_time_avg_ns"]
    row = rows.loc["summary:iterations_summary.iteration_time_avg_ns"]
    assert (row["baseline"], row["current"]) == (before, after)
    assert row["delta"] == after - before
    assert row["delta_pct"] == pytest.approx(100 * (after - before) / before)
    verdict = resnet["result"].comparison.verdict
    assert (verdict.baseline_ns, verdict.current_ns) == (pytest.approx(before, rel=1e-12),
                                                         pytest.approx(after, rel=1e-12))
    assert verdict.ratio == pytest.approx(after / before, rel=1e-12)


def test_resnet_every_summary_figure_is_compared(resnet: dict) -> None:
    rows = resnet["rows"]
    for table_key in ("system", "summary", "iterations_summary"):
        path = {p: own(resnet, p, "summary") for p in ("resnet_fp32", "resnet_amp")}
        doc = json.loads(path["resnet_amp"].read_text())
        (meta,) = [t for t in doc["tables"] if t["key"] == table_key]
        figures = [f["key"] for f in meta["fields"] if f["unit"] and f["csv"]]
        before, after = values(path["resnet_fp32"], table_key), values(path["resnet_amp"], table_key)
        for key in figures:
            row = rows.loc[f"summary:{table_key}.{key}"]
            assert (row["baseline"], row["current"]) == (before[key], after[key]), key
    # All Ops of the two summaries, per iteration
    for name, column in (("resnet_fp32", "baseline"), ("resnet_amp", "current")):
        ops = table(own(resnet, name, "summary"), "all_ops").set_index("ops")
        assert rows.loc["summary:all_ops.All ops.gpu_time_ns", column] == pytest.approx(
            ops.loc["All ops", "gpu_time_ns"] / STEPS)
        assert rows.loc["summary:all_ops.All ops.op_count", column] == ops.loc["All ops", "op_count"]
    # the iteration time's median and spread, from the per-iteration times
    for name, column in (("resnet_fp32", "baseline"), ("resnet_amp", "current")):
        durations = table(own(resnet, name, "summary"), "iterations")["duration_ns"].to_numpy(dtype=float)
        q1, median, q3 = np.percentile(durations, [25, 50, 75])
        assert rows.loc["summary:iterations.median_ns", column] == pytest.approx(median)
        assert rows.loc["summary:iterations.iqr_ns", column] == pytest.approx(q3 - q1)


def test_resnet_op_type_deltas_add_up_to_the_gpu_time_delta(resnet: dict) -> None:
    rows = resnet["rows"]
    op_rows = section(rows, "Op Types")
    total = rows.loc["op_type_total"]
    before, after = (table(own(resnet, p, "summary"), "all_ops").set_index("ops").loc["All ops", "gpu_time_ns"]
                     for p in ("resnet_fp32", "resnet_amp"))
    assert total["delta"] == pytest.approx((after - before) / STEPS, rel=1e-12)
    assert op_rows["delta"].sum() == pytest.approx(total["delta"], rel=1e-12)
    assert rows.loc["summary:all_ops.All ops.gpu_time_ns", "delta"] == pytest.approx(total["delta"], rel=1e-12)
    # each op type: the difference of the two op_type reports' GPU time, per iteration
    types = {p: table(own(resnet, p, "op_type"), "op_types").set_index("op_type")["gpu_time_total_ns"]
             for p in ("resnet_fp32", "resnet_amp")}
    every = types["resnet_fp32"].index.union(types["resnet_amp"].index)
    assert sorted(op_rows.index) == sorted(f"op_type:{t}" for t in every)  # all op types
    for op_type in every:
        expected = (types["resnet_amp"].get(op_type, 0) - types["resnet_fp32"].get(op_type, 0)) / STEPS
        assert rows.loc[f"op_type:{op_type}", "delta"] == pytest.approx(expected, abs=1e-6), op_type
    appeared = set(types["resnet_amp"].index) - set(types["resnet_fp32"].index)  # the AMP grad scaler's ops
    assert appeared and {k.split(":", 1)[1] for k in op_rows.index[op_rows["note"] == "appeared"]} == appeared


def test_resnet_mixed_precision_finding_is_gone_and_convolution_leads(resnet: dict) -> None:
    rows = resnet["rows"]
    findings = {p: table(own(resnet, p, "expert_systems"), "findings").set_index("detector")
                for p in ("resnet_fp32", "resnet_amp")}
    assert "amp" in findings["resnet_fp32"].index and "amp" not in findings["resnet_amp"].index
    amp = rows.loc["finding:amp"]
    assert (amp["baseline"], amp["current"]) == (True, False)
    assert amp["delta"] == -findings["resnet_fp32"].loc["amp", "time_at_stake_ns"]
    shown = set(section(rows, "Findings").index)
    assert shown == {f"finding:{d}" for d in findings["resnet_fp32"].index.union(findings["resnet_amp"].index)}
    verdict = resnet["result"].comparison.verdict
    assert "amp" in verdict.gone
    assert set(verdict.new) == set(findings["resnet_amp"].index) - set(findings["resnet_fp32"].index)
    assert "Problems gone: mixed precision not used" in verdict.text
    # convolution's GPU time changed most, by the two op_type reports
    types = {p: table(own(resnet, p, "op_type"), "op_types").set_index("op_type")["gpu_time_total_ns"]
             for p in ("resnet_fp32", "resnet_amp")}
    change = types["resnet_amp"].sub(types["resnet_fp32"], fill_value=0).abs()
    assert change.idxmax() == "conv2d"
    assert verdict.contributors[0][0] == "conv2d" and len(verdict.contributors) == 3
    assert "biggest changes by op type: conv2d" in verdict.text


def test_resnet_outputs_and_tensorboard_runs_side_by_side(resnet: dict) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    out = resnet["out"]
    csv = (out / "dlagg_compare.csv").read_text().splitlines()
    assert csv[:2] == ["Comparison", "Section,Name,Baseline,Current,Delta,Delta %,Note"]
    stake = table(own(resnet, "resnet_fp32", "expert_systems"), "findings").set_index("detector").loc[
        "amp", "time_at_stake_ns"]
    assert any(line.startswith(f'"Findings","mixed precision not used","yes","no",{-stake},,"') for line in csv)
    aggregated = values(own(resnet, "resnet_amp", "summary"), "iterations_summary")["aggregated_iterations"]
    assert f'"Summary","Aggregated Iterations",{STEPS},{aggregated},0,0.0,""' in csv  # integers stay integers
    result = resnet["result"]
    assert result.reports[-1].name == "compare" and result.comparison.report.warnings == ()
    verdict = values(out / "dlagg_compare.json", "verdict")
    assert verdict["text"] == result.comparison.verdict.text
    assert verdict["confidence_pct"] == 100 * CONFIDENCE
    for run_name, profile in (("dlagg", "resnet_amp"), ("dlagg_baseline", "resnet_fp32")):
        acc = EventAccumulator(str(out / "event_files" / run_name), size_guidance={"tensors": 0})
        acc.Reload()
        times = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors("iteration/time_ms")]
        average = values(own(resnet, profile, "summary"), "iterations_summary")["iteration_time_avg_ns"]
        assert np.mean(times) * 1e6 == pytest.approx(average, rel=F32_REL)
        texts = {tag.split("/page ")[0] for tag in acc.Tags()["tensors"]}  # long tables come in pages
        assert ("compare/Comparison" in texts) == (run_name == "dlagg")


def test_resnet_verdict_read_back_from_the_report_is_the_comparisons(resnet: dict) -> None:
    """``Result.comparison`` reads the verdict back from the compare report's tables: the verdict the comparison
    made, figure for figure (the two profiles' saved figures, which the JSON runs of each wrote, compared again)."""
    made = compare(*(load(own(resnet, p, "figures")) for p in ("resnet_fp32", "resnet_amp")))
    assert comparison_of(made.report).verdict == made.verdict
    assert resnet["result"].comparison.verdict == made.verdict


# --- a profile compared with itself -------------------------------------------------------------

def test_profile_compared_with_itself_shows_no_change(tmp_path: Path, capsys) -> None:
    db = str(recording("resnet_amp"))
    code, out, err = dlagg(capsys, f"--nsys_database={db}", f"--baseline={db}", "--reports=summary",
                           "--formats=json", f"--output_path={tmp_path}", "-b", "--fail_if_slower=0")
    assert code == 0, err
    rows = compared(tmp_path)
    assert rows["delta"].notna().all() and (rows["delta"] == 0).all()  # every row has a delta, and it is 0
    assert "no significant change" in out
    verdict = values(tmp_path / "dlagg_compare.json", "verdict")
    assert verdict["ratio"] == 1.0 and verdict["ratio_ci_low"] <= 1.0 <= verdict["ratio_ci_high"]
    assert not verdict["significant"] and verdict["change"] == "no significant change"
    assert "No problem gone, none new." in verdict["text"]
    assert "warning: compare" not in err


# --- hand-built runs with known times ----------------------------------------------------------

BASE_STEPS = np.array([10_000, 10_100, 9_900, 10_050, 9_950, 10_000, 10_200, 9_800, 10_000, 10_000,
                       10_100, 9_900])


def hand_built(path: Path, steps: np.ndarray, *, conv_ns: int = 5_000, other: str = "relu", key: str = "train_step",
               ) -> Path:
    """Steps back to back from t=0 (iteration i lasts steps[i] exactly), each with a conv2d op (one
    kernel of `conv_ns`) and an `other` op (one 1,000 ns kernel)."""
    b = ExportBuilder()
    t = 0
    for duration in steps.tolist():  # a dozen steps
        b.range(t, t + duration, key)
        b.range(t + 100, t + 3_000, "conv2d")
        b.launch(t + 200, t + 300, t + 400, t + 400 + conv_ns, name="conv_kernel")
        b.range(t + 3_000, t + 4_000, other)
        b.launch(t + 3_100, t + 3_200, t + 400 + conv_ns, t + 1_400 + conv_ns, name=f"{other}_kernel")
        t += duration
    return b.write(path)


def test_significantly_slower_run_fails_with_fail_if_slower(tmp_path: Path, capsys) -> None:
    before = hand_built(tmp_path / "before.sqlite", BASE_STEPS)
    after = hand_built(tmp_path / "after.sqlite", BASE_STEPS * 6 // 5, conv_ns=6_000)  # 20 % slower
    args = [f"--nsys_database={after}", f"--baseline={before}", "--reports=summary", "--formats=json",
            f"--output_path={tmp_path / 'out'}", "-b", "--force"]
    code, out, err = dlagg(capsys, *args, "--fail_if_slower=10")
    assert code == 3, err
    assert "20.0% slower" in out and "more than --fail_if_slower=10" in err
    rows = compared(tmp_path / "out")
    avg = rows.loc["summary:iterations_summary.iteration_time_avg_ns"]
    assert (avg["baseline"], avg["current"]) == (BASE_STEPS.mean(), (BASE_STEPS * 6 // 5).mean())
    assert rows.loc["op_type:conv2d", "delta"] == 1_000.0 and rows.loc["op_type:relu", "delta"] == 0.0
    assert rows.loc["kernel:conv_kernel", "delta"] == 1_000.0
    verdict = values(tmp_path / "out" / "dlagg_compare.json", "verdict")
    assert verdict["ratio"] == pytest.approx(1.2) and verdict["ratio_ci_low"] > 1.1 and verdict["significant"]
    assert "biggest changes by op type: conv2d +0.001 ms." in verdict["text"]
    # slower, but not by more than 25 %: exit 0
    code, out, err = dlagg(capsys, *args, "--fail_if_slower=25")
    assert code == 0, err
    # the other way round it is faster
    code, out, err = dlagg(capsys, f"--nsys_database={before}", f"--baseline={after}", "--reports=summary",
                           f"--output_path={tmp_path / 'out'}", "-b", "--force", "--fail_if_slower=0")
    assert code == 0 and "16.7% faster" in out


def test_two_runs_with_different_op_sets(tmp_path: Path) -> None:
    before = hand_built(tmp_path / "before.sqlite", BASE_STEPS, other="relu")
    after = hand_built(tmp_path / "after.sqlite", BASE_STEPS, other="gelu")
    result = run(Options(nsys_database=after, baseline=Baseline(before, iter_start=2), reports=("summary",),
                         formats=("json",), output_path=tmp_path, suppress_tb_files=True, verbosity="quiet"))
    rows = compared(tmp_path)
    # the baseline's own iteration range: iterations 2 to 11
    assert rows.loc["summary:iterations_summary.aggregated_iterations", ["baseline", "current"]].tolist() == [
        len(BASE_STEPS) - 2, len(BASE_STEPS)]
    assert rows.loc["summary:iterations_summary.iteration_time_avg_ns", "baseline"] == BASE_STEPS[2:].mean()
    assert any("the baseline aggregates 10 iterations, the current profile 12" in w for w in result.warnings)
    assert rows.loc["op_type:relu", ["baseline", "current", "note"]].tolist() == [1_000.0, 0.0, "disappeared"]
    assert rows.loc["op_type:gelu", ["baseline", "current", "note"]].tolist() == [0.0, 1_000.0, "appeared"]
    assert rows.loc["op_type:conv2d", ["delta", "note"]].tolist() == [0.0, ""]
    assert rows.loc["kernel:relu_kernel", "note"] == "disappeared"
    assert rows.loc["kernel:gelu_kernel", "note"] == "appeared"
    assert section(rows, "Op Types")["delta"].sum() == rows.loc["op_type_total", "delta"] == 0.0
    assert result.comparison.verdict.contributors == (("gelu", 1_000.0), ("relu", -1_000.0))


def test_profiles_of_different_models_and_gpus_compare_with_warnings(tmp_path: Path, capsys) -> None:
    before = hand_built(tmp_path / "before.sqlite", BASE_STEPS, key="my_step")  # a 'Test GPU'
    code, out, err = dlagg(capsys, f"--nsys_database={recording('dataloader_bound')}", f"--baseline={before}",
                           "--baseline_key_node=my_step", "--reports=summary", "--formats=json",
                           f"--output_path={tmp_path}", "-b")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning: compare:" in line]
    assert any("different GPUs" in w and "Test GPU" in w and "NVIDIA H200" in w for w in warnings)
    assert any("key nodes differ" in w and "my_step" in w and "train_step" in w for w in warnings)
    assert any("op sets differ: 0% of the baseline's op GPU time" in w for w in warnings)
    profiles = table(tmp_path / "dlagg_compare.json", "profiles").set_index("side")
    assert profiles.loc["baseline", "key_node"] == "my_step"
    assert profiles.loc["baseline", "aggregated_iterations"] == len(BASE_STEPS)
    assert "Iteration time" in out


# --- statistics ---------------------------------------------------------------------------------

def samples(times: np.ndarray) -> Samples:
    return Samples(times.astype(float), np.ones(len(times)), float(times.mean()))


def test_bootstrap_is_reproducible_and_brackets_the_ratio() -> None:
    rng = np.random.default_rng(0)
    base = 10_000 + rng.normal(0, 300, 40)
    cur = 11_000 + rng.normal(0, 300, 40)
    low, high = bootstrap_ratio(samples(base), samples(cur))
    assert (low, high) == bootstrap_ratio(samples(base), samples(cur))  # fixed seed
    assert low < cur.mean() / base.mean() < high and low > 1.0
    # no spread: the interval is the ratio itself
    assert bootstrap_ratio(samples(np.full(5, 100.0)), samples(np.full(7, 150.0))) == (1.5, 1.5)


def test_interval_ends_barely_depend_on_the_seed() -> None:
    """Enough resamples that the fixed seed is not what decides a verdict."""
    rng = np.random.default_rng(1)
    base, cur = samples(15_000 + rng.normal(0, 600, 15)), samples(15_800 + rng.normal(0, 1_300, 15))
    ends = np.array([bootstrap_ratio(base, cur, seed=seed) for seed in range(20)])
    assert (ends.std(axis=0) < 0.002).all()


def test_ranks_of_an_iteration_are_resampled_together() -> None:
    """GIVEN two ranks' iterations (a merged summary has a row per rank and iteration) WHEN sampled THEN each
    aggregated iteration is one cluster of its ranks' rows, and the mean is over every row."""
    fields = (Field("rank", "Rank"), Field("iteration", "Iteration"), Field("aggregated", "Aggregated"),
              Field("duration_ns", "Iteration Time (ns)", NS))
    frame = pd.DataFrame({"rank": [0, 0, 0, 0, 1, 1, 1], "iteration": [0, 1, 2, 3, 0, 1, 2],
                          "aggregated": [True, True, True, False, True, True, True],
                          "duration_ns": [10, 11, 20, 99, 12, 11, 22]})
    its = Table("iterations", "Iterations", fields, frame, csv=False)
    side = SimpleNamespace(table=lambda report, key: its if (report, key) == ("summary", "iterations") else None)
    got = Samples.of(side)  # type: ignore[arg-type]
    assert got.sums.tolist() == [22.0, 22.0, 42.0] and got.counts.tolist() == [2.0, 2.0, 2.0]
    assert got.mean == 86 / 6
    low, high = bootstrap_ratio(got, Samples(got.sums * 2, got.counts, got.mean * 2))
    assert low <= 2.0 <= high


# --- several ranks on each side (the 2-GPU recordings) ----------------------------------------------

def test_several_ranks_on_each_side(tmp_path: Path, multi) -> None:
    spec = str(multi("ddp2_gpt_per_rank") / "*.sqlite")
    result = run(Options(nsys_database=spec, baseline=Baseline(spec), reports=("summary",), formats=("json",),
                         output_path=tmp_path, verbosity="quiet", workers=1))
    rows = compared(tmp_path)
    assert (rows["delta"].dropna() == 0).all()
    assert result.comparison.verdict.change == "no significant change"
    profiles = table(tmp_path / "dlagg_compare.json", "profiles").set_index("side")
    assert profiles["ranks"].tolist() == [2, 2]
    summary = values(tmp_path / "dlagg_summary.json", "iterations_summary")
    assert rows.loc["summary:iterations_summary.iteration_time_avg_ns", "current"] == summary["iteration_time_avg_ns"]
    for run_name in ("dlagg", "dlagg_baseline"):
        assert {p.name for p in (tmp_path / "event_files" / run_name).iterdir() if p.is_dir()} == {"rank0", "rank1"}


# --- the command line ---------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "code", "message"), [
    (["--fail_if_slower=5"], 2, "--fail_if_slower need(s) --baseline"),
    (["--baseline_key_node=x"], 2, "--baseline_key_node need(s) --baseline"),
    (["--reports=compare"], 2, "--reports=compare compares with a baseline"),
    (["--baseline=/nonexistent/before.sqlite"], 1, "--baseline: "),
    (["--baseline={db}", "--baseline_profile_name=dlagg"], 2, "--baseline_profile_name=dlagg"),
    (["--baseline={db}", "--fail_if_slower=-1"], 2, "percentage of at least 0"),
])
def test_command_line_mistakes(tmp_path: Path, capsys, args: list[str], code: int, message: str) -> None:
    db = recording("cuda_basic")
    got, out, err = dlagg(capsys, f"--nsys_database={db}", f"--output_path={tmp_path}", "-b",
                          *(a.format(db=db) for a in args))
    assert got == code and message in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())  # nothing written


def test_existing_compare_report_needs_force(tmp_path: Path, capsys) -> None:
    db = recording("cuda_basic")
    (tmp_path / "dlagg_compare.csv").write_text("mine")
    code, _, err = dlagg(capsys, f"--nsys_database={db}", f"--baseline={db}", f"--output_path={tmp_path}", "-b")
    assert code == 1 and "dlagg_compare.csv: already exists" in err
    assert (tmp_path / "dlagg_compare.csv").read_text() == "mine"
    code, out, err = dlagg(capsys, f"--nsys_database={db}", f"--baseline={db}", f"--output_path={tmp_path}", "-b",
                           "--force", "--reports=compare")
    assert code == 0, err
    assert {p.name for p in tmp_path.iterdir()} == {"dlagg_compare.csv"}  # --reports=compare: the comparison only
    assert "Iteration time" in out


def test_baseline_options_override_the_current_ones_and_leave_the_ncu_report_out() -> None:
    current = Options(nsys_database="after.sqlite", key_node="train_step", iter_start=2, domains=("a",),
                      ncu_report="step.csv", peaks="peaks.json", ncu_rank=1, profile_name="amp")
    reads = Baseline("before.sqlite", iter_start=0, domains=()).options(current, ("summary",))
    assert (reads.nsys_database, reads.key_node, reads.iter_start, reads.domains) == ("before.sqlite", "train_step",
                                                                                     0, ())
    assert (reads.ncu_report, reads.peaks, reads.ncu_rank, reads.baseline) == (None, None, None, None)
    assert reads.profile_name == "amp_baseline" and reads.reports == ("summary",)


def test_baseline_needs_an_nsys_export_to_compare_with(tmp_path: Path, capsys) -> None:
    code, _, err = dlagg(capsys, f"--ncu_report={ncu_csv('resnet_amp')}", f"--baseline={recording('resnet_fp32')}",
                         f"--output_path={tmp_path}", "-b")
    assert code == 2 and "--baseline compares two nsys exports: pass --nsys_database" in err
    assert not list(tmp_path.iterdir())
