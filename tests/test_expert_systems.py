"""Expert systems: which findings each real recording gets (both ways), and the report/stdout shape."""

from __future__ import annotations

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

from .conftest import recording

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


@pytest.mark.parametrize(("name", "expected", "absent"), [
    ("dataloader_bound", {"input_pipeline", "underutilized_gpu"}, {"amp", "launch_bound", "key_node"}),
    ("resnet_fp32", {"amp", "host_sync"}, {"underutilized_gpu", "launch_bound", "input_pipeline"}),
    ("resnet_amp", {"launch_bound", "underutilized_gpu"}, {"amp"}),
    ("no_emit_nvtx", {"amp", "iteration_variation", "dominant_kernels"}, {"underutilized_gpu", "launch_bound"}),
    ("h2d_heavy", {"pageable_copies", "launch_bound", "host_sync", "underutilized_gpu"}, {"amp"}),
    ("cuda_graph", {"amp"}, {"launch_bound", "host_sync", "underutilized_gpu"}),
    ("cuda_basic", {"pageable_copies", "iteration_variation"}, {"launch_bound", "amp"}),
    ("cpu_nvtx_numpy", {"iteration_variation"}, {"amp", "underutilized_gpu", "input_pipeline"}),
])
def test_findings_per_recording(name: str, expected: set[str], absent: set[str]) -> None:
    got = fired(name)
    assert expected <= got.keys(), f"{name}: missing {expected - got.keys()}"
    assert not absent & got.keys(), f"{name}: unexpected {absent & got.keys()}"


def test_no_emit_nvtx_steady_range_skips_start_up() -> None:
    """Its first step includes CUDA/cuBLAS start-up (1.27 s against ~1.4 ms steady steps)."""
    finding = fired("no_emit_nvtx")["iteration_variation"]
    start = int(finding.recommendation.split("--iter_start=")[1].split()[0])
    stop = int(finding.recommendation.split("--iter_stop=")[1].split(".")[0])
    assert start >= 1 and stop == 22
    assert "0" in finding.iterations.split(", ")[0]
    # Re-aggregating over the proposal leaves no leading or trailing outlier to cut.
    again = fired("no_emit_nvtx", iter_start=start, iter_stop=stop).get("iteration_variation")
    assert again is None or "--iter_start" not in again.recommendation


def test_amp_recommends_bf16_on_hopper() -> None:
    finding = fired("resnet_fp32")["amp"]
    assert "bfloat16" in finding.recommendation
    assert "compute capability 9.0" in finding.evidence
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


def test_underutilized_names_dataloader_and_matches_summary() -> None:
    got = fired("dataloader_bound")
    under = got["underutilized_gpu"]
    assert under.problem.endswith("dataloader")
    assert "Dataloader Duration 92." in under.evidence  # the summary report's figure
    loader = got["input_pipeline"]
    assert "num_workers>=" in loader.recommendation and "'data' x20" in loader.evidence
    # The idle time at stake is at least the exposed data-loading time.
    assert under.time_at_stake_ns >= loader.time_at_stake_ns > 30e6


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
    csv = (tmp_path / "dlagg_expert_systems.csv").read_text().splitlines()
    assert csv[0] == "Expert Systems Feedback"
    assert csv[1].split(",")[:3] == [f.title for f in FIELDS[:3]]
    table = pd.read_csv(tmp_path / "dlagg_expert_systems.csv", skiprows=1, nrows=count)
    assert list(table.columns) == [f.title for f in FIELDS]
    assert np.all(np.diff(table[STAKE].to_numpy()) <= 0)


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
