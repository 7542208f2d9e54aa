"""Expert systems: which findings each real recording gets (both ways), and the report/stdout shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.cli import main
from dlagg.context import RankContext
from dlagg.expert import DETECTORS, run_detectors
from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.reports.expert_systems import FIELDS
from dlagg.timeline.iterations import detect_iterations

from . import dlprof_csv, recorded
from .builders import ExportBuilder
from .conftest import RECORDINGS, recording
from .marks import quick_on

STAKE = "Time At Stake Per Iteration (ns)"


def findings(name: str, **kw: object):
    path = recording(name)
    profile = load_profile(path)
    iterations = detect_iterations(profile, kw.pop("key_node", None), kw.pop("iter_start", None),
                                   kw.pop("iter_stop", None))
    return run_detectors(RankContext(profile, iterations, Options(nsys_database=path)))


def fired(name: str, **kw: object) -> dict[str, object]:
    found, _ = findings(name, **kw)
    return {f.detector: f for f in found}


# --- which detectors fire on each recording, derived without dlagg ----------------------------------

def json_statuses(path: Path) -> dict[str, str]:
    """{detector: fired/silent/not run} from an expert_systems JSON file (the CSV holds the problems only)."""
    doc = json.loads(path.read_text())
    table = next(t for t in doc["tables"] if t["key"] == "detectors")
    keys = [f["key"] for f in table["fields"]]
    return {row[keys.index("detector")]: row[keys.index("status")] for row in table["rows"]}


def detector_status(name: str, tmp_path: Path, *options: str) -> tuple[dict[str, str], pd.DataFrame]:
    """({detector: fired/silent/not run}, findings): the statuses from the CLI's expert_systems JSON,
    the findings from its CSV, which holds that one table, as DLProf's file does."""
    out = tmp_path / name
    assert main([f"--nsys_database={recording(name)}", "--reports=summary,expert_systems", "--formats=csv,json",
                 f"--output_path={out}", "-b", "--verbosity=quiet", *options]) == 0
    sections = dlprof_csv.read(out / "dlagg_expert_systems_detail.csv")
    assert list(sections) == ["Expert Systems Feedback"]
    return json_statuses(out / "dlagg_expert_systems.json"), sections["Expert Systems Feedback"].frame()


def window_shares(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per iteration window (SQL): duration, share with GPU work, share in `data` ranges without GPU work.
    Windows end with the GPU work launched in them (recorded.gpu_side_ends)."""
    ends = recorded.gpu_side_ends(name)
    lo, hi = np.r_[recorded.windows(name)[0][0], ends[:-1]], ends
    gpu = recorded.gpu_intervals(name)
    data = recorded.named_ranges(name, "data")
    busy = recorded.covered(gpu, lo, hi)
    loading = recorded.covered(np.concatenate((gpu, data)), lo, hi) - busy
    return hi - lo, busy / (hi - lo), loading / (hi - lo)


def gpu_utilization(name: str) -> float:
    """The summary's GPU Utilization % (time with a kernel running: one GPU in these recordings) of the
    median iteration, as a share (SQL)."""
    ends = recorded.gpu_side_ends(name)
    lo, hi = np.r_[recorded.windows(name)[0][0], ends[:-1]], ends
    kernels = np.array(recorded.sql(name, 'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL'),
                       dtype=np.int64).reshape(-1, 2)
    return float(np.median(recorded.covered(kernels, lo, hi) / (hi - lo)))


def steady_range(durations: np.ndarray) -> tuple[int, int, np.ndarray]:
    """docs/expert_systems.md: outliers take more than 1.5x the median; the steady range cuts
    leading and trailing ones. Returns (first, last, outlier flags)."""
    outlier = durations > 1.5 * np.median(durations)
    first = int(np.argmin(outlier))
    last = len(outlier) - 1 - int(np.argmin(outlier[::-1]))
    return first, last, outlier


@pytest.mark.parametrize("name", quick_on("h2d_heavy", RECORDINGS))
def test_rule_based_detectors_agree_with_sql(name: str, tmp_path: Path) -> None:
    """key_node, iteration_variation, underutilized_gpu and input_pipeline, both ways, from the
    documented rules (docs/expert_systems.md) applied to windows and intervals read with SQL."""
    status, _ = detector_status(name, tmp_path)
    assert status["key_node"] == ("silent" if len(recorded.key_ends(name)) else "fired")
    durations, busy, loading = window_shares(name)
    _, _, outlier = steady_range(durations)
    ratio = durations / np.median(durations)
    assert (ratio > 1.45).any() == (ratio > 1.55).any(), "premise: the verdict does not hinge on the 1.5x threshold"
    varies = len(durations) >= 4 and outlier.any()
    assert status["iteration_variation"] == ("fired" if varies else "silent")
    has_kernels = recorded.meta(name)["summary"]["kernels"] > 0
    if not has_kernels:  # cpu_nvtx_numpy: "no CUDA at all" (meta.json)
        assert status["underutilized_gpu"] == status["input_pipeline"] == "not run"
        return
    utilization = gpu_utilization(name)  # the summary's figure decides (one definition)
    assert abs(utilization - 0.5) > 0.1, "premise: GPU Utilization is clear of the 50% threshold"
    assert status["underutilized_gpu"] == ("fired" if utilization < 0.5 else "silent")
    if not len(recorded.named_ranges(name, "data")):
        assert status["input_pipeline"] == "not run"
    else:
        assert abs(np.median(loading) - 0.05) > 0.02, "premise: clear of the 5% threshold"
        assert status["input_pipeline"] == ("fired" if np.median(loading) >= 0.05 else "silent")
    # A dominant-kernel finding's time at stake is GPU time: it cannot reach 5% of an iteration with less
    # GPU work. AMP has no such threshold (DLProf advised it to small models too): then it is low severity.
    if np.median(busy) < 0.05:
        assert status["dominant_kernels"] == "silent"
        if status["amp"] == "fired":
            _, found = detector_status(name, tmp_path / "again")
            assert found.set_index("Detector").loc["amp", "Severity"] == "low"


# What each recording was built to show (the phrase is checked in its meta.json description).
DESIGNED = [
    ("resnet_fp32", "amp", "fired", "FP32 with TF32 disabled (no Tensor Core GEMMs/convs)"),
    ("resnet_fp32", "host_sync", "fired", "loss.item() every step"),
    ("no_emit_nvtx", "amp", "fired", "FP32, SGD"),
    ("resnet_amp", "amp", "silent", "torch.autocast float16 + GradScaler"),
    ("h2d_heavy", "pageable_copies", "fired", "32 small pageable H2D copies"),
    ("h2d_heavy", "launch_bound", "fired", "Launch/copy-bound step"),
    ("h2d_heavy", "host_sync", "fired", "D2H via .item() and .cpu()"),
    ("cuda_basic", "pageable_copies", "fired", "pageable H2D 4 MiB"),
    ("cuda_graph", "launch_bound", "silent", "captured once into a torch.cuda.CUDAGraph"),
    ("cpu_nvtx_numpy", "amp", "not run", "no CUDA at all"),
    ("cpu_nvtx_numpy", "host_sync", "not run", "no CUDA at all"),
]


@pytest.mark.parametrize(("name", "detector", "expected", "design"), DESIGNED)
def test_detectors_find_what_the_recording_was_built_to_show(name: str, detector: str, expected: str, design: str,
                                                             tmp_path: Path) -> None:
    assert design in recorded.meta(name)["description"]
    status, _ = detector_status(name, tmp_path)
    assert status[detector] == expected


def test_no_emit_nvtx_steady_range_skips_start_up(tmp_path: Path) -> None:
    """Its first steps include CUDA/cuBLAS start-up (meta.json): the proposed range is the one the
    documented rule gives on the iteration windows read with SQL."""
    first, last, outlier = steady_range(window_shares("no_emit_nvtx")[0])
    assert (first, last) == (2, 22) and outlier[0]  # SQL: iterations 0, 1 and 3 are outliers
    _, found = detector_status("no_emit_nvtx", tmp_path)
    finding = found.set_index("Detector").loc["iteration_variation"]
    assert f"--iter_start={first} --iter_stop={last}" in finding["Recommendation"]
    # Re-aggregating over the proposal leaves no leading or trailing outlier to cut.
    status, again = detector_status("no_emit_nvtx", tmp_path / "again", f"--iter_start={first}",
                                    f"--iter_stop={last}")
    variation = again[again["Detector"] == "iteration_variation"]
    assert variation.empty or "--iter_start" not in variation["Recommendation"].iloc[0]


TF32_GEMM = ("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8"
             "_execute_kernel")
FP32_GEMM = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4"
             "_execute_kernel")
FP16_GEMM = "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"


@pytest.mark.parametrize(("gemm", "stake", "severity", "precision"), [
    # docs/expert_systems.md: stake = GPU-bound time x (1 - 1/1.5) for TF32, x (1 - 1/3) for FP32;
    # severity high from 25% of the typical iteration (1 ms here), medium from 5%.
    (TF32_GEMM, 600_000 * (1 - 1 / 1.5), "medium", "FP32/TF32"),
    (FP32_GEMM, 600_000 * (1 - 1 / 3), "high", "FP32"),
    (FP16_GEMM, None, None, None),  # already at reduced precision on Tensor Cores: nothing to say
])
def test_amp_on_tf32_and_fp32_gemms(tmp_path: Path, gemm: str, stake: float | None, severity: str | None,
                                    precision: str | None) -> None:
    """GIVEN 4 steps of 1 ms, each a 600 us GEMM with an elementwise kernel queued behind it (launched
    before the GEMM starts, so all 600 us are GPU-bound) on an H100-class GPU (compute capability 9.0)."""
    b = ExportBuilder()
    for i in range(4):
        t = 1_000_000 * i
        b.range(t, t + 1_000_000, "train_step")
        b.launch(t + 10_000, t + 20_000, t + 100_000, t + 700_000, gemm)
        b.launch(t + 30_000, t + 40_000, t + 700_000, t + 750_000,
                 "void at::native::vectorized_elementwise_kernel<(int)4>(int)")
    path = b.write(tmp_path / "gemm.sqlite")
    out = tmp_path / "out"
    assert main([f"--nsys_database={path}", "--reports=expert_systems", f"--output_path={out}", "-b",
                 "--formats=csv,json", "--verbosity=quiet"]) == 0
    sections = dlprof_csv.read(out / "dlagg_expert_systems_detail.csv")
    status = json_statuses(out / "dlagg_expert_systems.json")
    found = sections["Expert Systems Feedback"].frame().set_index("Detector")
    if stake is None:
        assert status["amp"] == "silent" and "amp" not in found.index
        return
    amp = found.loc["amp"]
    assert status["amp"] == "fired"
    assert amp[STAKE] == round(stake) and amp["Severity"] == severity
    assert f"run in {precision}: 100.0% of the GEMM/convolution GPU time" in amp["Problem"]
    assert ("100.0% in TF32" in amp["Evidence"]) == (precision == "FP32/TF32")
    assert "bfloat16" in amp["Recommendation"]  # compute capability 9.0 >= 8.0: bf16, no GradScaler
    assert amp["Kernels"].startswith(gemm)


def test_amp_recommends_bf16_on_hopper() -> None:
    finding = fired("resnet_fp32")["amp"]
    assert "bfloat16" in finding.recommendation
    assert "compute capability 9.0" in finding.evidence  # meta.json: NVIDIA H200 (GH100, Hopper: sm_90)
    assert "ffma" in finding.kernels or "engine" in finding.kernels


def test_gpu_detectors_do_not_run_without_gpu_data() -> None:
    _, outcomes = findings("cpu_nvtx_numpy")
    status = {o.detector: o for o in outcomes}
    for name in ("amp", "launch_bound", "host_sync", "pageable_copies", "underutilized_gpu", "input_pipeline"):
        assert status[name].status == "not run" and status[name].reason
    assert set(status) == set(DETECTORS)


@pytest.mark.parametrize("name", ["h2d_heavy", "no_emit_nvtx", "resnet_amp"])
def test_sorted_by_time_at_stake_with_severity(name: str) -> None:
    found, _ = findings(name)
    stakes = [f.time_at_stake_ns for f in found if f.time_at_stake_ns is not None]
    assert stakes == sorted(stakes, reverse=True)
    assert all(f.severity in ("high", "medium", "low") for f in found)
    assert all(f.evidence and f.estimate and f.problem and f.recommendation for f in found)


def test_underutilized_names_dataloader_with_the_sql_loading_share(tmp_path: Path) -> None:
    """The evidence cites the summary's Dataloader Duration %: the time in `data` ranges without GPU
    work over the aggregated iterations, worked out here with SQL."""
    durations, _, loading = window_shares("dataloader_bound")
    share = 100 * float((loading * durations).sum() / durations.sum())
    _, found = detector_status("dataloader_bound", tmp_path)
    under = found.set_index("Detector").loc["underutilized_gpu"]
    assert under["Problem"].endswith("dataloader")
    assert f"Dataloader Duration {share:.1f}%" in under["Evidence"]
    summary = dlprof_csv.read(tmp_path / "dataloader_bound" / "dlagg_summary.csv")["Summary Report"].values()
    assert summary["Dataloader Duration %"] == round(share, 1)
    loader = found.set_index("Detector").loc["input_pipeline"]
    assert "num_workers>=" in loader["Recommendation"]
    assert f"'data' x{len(recorded.named_ranges('dataloader_bound', 'data'))}" in loader["Evidence"]
    # docs/expert_systems.md: at stake, the median exposed loading time per iteration (here by SQL);
    # the idle time at stake is at least that.
    assert loader[STAKE] == pytest.approx(np.median(loading * durations), abs=1)
    assert under[STAKE] >= loader[STAKE]


def test_report_and_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = recording("h2d_heavy")
    code = main([f"--nsys_database={db}", "--reports=expert_systems", "--formats=csv,json",
                 f"--output_path={tmp_path}", "-b"])
    assert code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    count = int(lines[0].split(": ")[1].split()[0])
    assert lines[0] == f"Expert Systems Feedback: {count} issues detected."
    assert out.count("Problem detected:") == count == out.count("Recommended change:")
    # DLProf's dlprof_expert_systems.csv (MohanadOdema/DLProf): the title, then "Problem,Recommendation" and
    # two cells a row, so that a script doing `problem, rec = row` keeps working
    csv = (tmp_path / "dlagg_expert_systems.csv").read_text().splitlines()
    assert csv[:2] == ["Expert Systems Feedback", "Problem,Recommendation"]
    rows = list(__import__("csv").reader(csv[2:]))
    assert len(rows) == count and all(len(row) == 2 for row in rows)
    for problem, rec in rows:
        assert f"  {problem}" in out and f"  {rec}" in out
    # dlagg's columns (severity, evidence, time at stake...) in a separate file, the same rows
    detail = pd.read_csv(tmp_path / "dlagg_expert_systems_detail.csv", skiprows=1, nrows=count)
    assert list(detail.columns) == [f.title for f in FIELDS]
    assert [list(r) for r in detail[["Problem", "Recommendation"]].itertuples(index=False)] == rows
    assert np.all(np.diff(detail[STAKE].to_numpy()) <= 0)


@pytest.mark.parametrize("verbosity", ["quiet", "minimal"])
def test_stdout_silent_when_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str], verbosity: str) -> None:
    db = recording("h2d_heavy")
    assert main([f"--nsys_database={db}", "--reports=expert_systems", f"--output_path={tmp_path}", "-b",
                 f"--verbosity={verbosity}"]) == 0
    assert capsys.readouterr().out == ""


def test_amp_uses_op_ranges_when_present() -> None:
    """resnet_fp32 has emit_nvtx op ranges: every conv2d/linear op runs without Tensor Cores."""
    finding = fired("resnet_fp32")["amp"]
    assert finding.ops.startswith("CONV2D_")
    # resnet18 has 20 convolutions and 1 linear layer (torchvision): 21 forward ops and their 21 backward ops
    assert "tensor report: 42 of 42 Tensor-Core-eligible ops (conv2d, linear)" in finding.evidence
    # no_emit_nvtx has no op ranges: the kernel-level rule alone decides, and Ops stays empty.
    assert fired("no_emit_nvtx")["amp"].ops == ""


def test_eligibility_ignores_parameter_types() -> None:
    from dlagg.expert.precision import _classes

    names = pd.Series([
        "void fft2d_r2c_32x32<float, (bool)0, (unsigned int)0, (bool)0>(float2 *, const T1 *, int, "
        "cudnn::reduced_divisor, bool, int2, int, int)",
        "void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::implicit_gemm::"
        "wgrad_indexed::Params>(T1)",
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>>(int, T2, T3)",
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1",
    ])
    math, helper, tf32 = _classes(names)
    assert math.tolist() == [True, False, False, True]
    assert helper.tolist() == [False, True, True, False]
    assert tf32.tolist() == [False, False, False, True]
