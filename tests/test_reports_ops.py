"""Op reports (detail, op_type, group_node, tensor) and the summary's op rows on the real recordings."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.context import RankContext
from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile
from dlagg.reports import build_reports
from dlagg.timeline.iterations import detect_iterations

from .conftest import SHARED, recording
from .recorded import calls_outside_every_range, key_ends

OP_REPORTS = ("summary", "detail", "op_type", "group_node", "tensor", "kernel", "iteration")

# torchvision resnet18: 20 convolutions (17 in the blocks + conv1 + 3 downsample), 20 batch norms, one fc.
RESNET18_CONVS = 20
RESNET18_BATCH_NORMS = 20
STEPS = 15  # recorded train_step iterations in the resnet fixtures


@cache
def reports(name: str) -> tuple[dict, RankContext]:
    path = recording(name)
    profile = load_profile(path)
    ctx = RankContext(profile, detect_iterations(profile), Options(nsys_database=path))
    return build_reports(ctx, OP_REPORTS), ctx


def all_ops(built: dict) -> pd.DataFrame:
    return built["summary"].table("all_ops").frame.set_index("ops")


def summary_value(built: dict, key: str) -> object:
    return built["summary"].table("summary").values.get(key)


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp"])
def test_one_row_per_layer_op_and_direction(name: str) -> None:
    built, _ = reports(name)
    table = built["detail"].main.frame
    assert not table.duplicated(["op_id", "direction", "op_name"]).any()
    # CUDA calls outside every NVTX range are ops of their own (DLProf's unassociated_<api>): by SQL, the
    # outermost calls no range of their thread encloses, made before the last step ends
    outside = list(calls_outside_every_range(name, int(key_ends(name)[-1])).items())
    assert outside == [("cudaDeviceSynchronize_v3020", 1)]  # the one before the first step
    loose = table["op_name"].str.startswith("unassociated_")
    assert table.loc[loose, ["op_name", "calls"]].values.tolist() == [
        [f"unassociated_{api}", calls] for api, calls in outside]
    table = table[~loose]
    assert (table["calls"] == STEPS).all()  # the same op in every iteration is one row, not one per op_id
    fprop = table[table["direction"] == "fprop"]
    assert (fprop["op_type"] == "conv2d").sum() == RESNET18_CONVS
    assert (fprop["op_type"] == "batch_norm").sum() == RESNET18_BATCH_NORMS
    assert (fprop["op_type"] == "linear").sum() == 1
    conv_bprop = table[table["op_name"] == "ConvolutionBackward0"]
    assert len(conv_bprop) == RESNET18_CONVS
    # every convolution's backward carries the Op ID of its forward op (linked through autograd's seq)
    assert set(conv_bprop["op_id"]) == set(fprop.loc[fprop["op_type"] == "conv2d", "op_id"])
    assert (conv_bprop["op_type"] == "conv2d").all()


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp"])
def test_kernel_counts_per_op_add_up_to_every_kernel(name: str) -> None:
    built, ctx = reports(name)
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == 0]
    assert int(ctx.op_instances["kernels"].sum()) == len(kernels)
    assert (built["iteration"].main.frame["op_id"] != "").all()
    assert built["kernel"].main.frame["calls"].sum() == len(kernels)
    # every kernel of the kernel report sits under an op
    assert (built["kernel"].main.frame["op_id"] != "").all()


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp", "cuda_basic", "dataloader_bound", "h2d_heavy"])
def test_op_type_totals_add_up_to_all_ops(name: str) -> None:
    built, _ = reports(name)
    op_types = built["op_type"].main.frame
    detail = built["detail"].main.frame
    summary = all_ops(built)
    assert op_types["gpu_time_total_ns"].sum() == summary.loc["All ops", "gpu_time_ns"]
    assert op_types["cpu_time_total_ns"].sum() == summary.loc["All ops", "range_time_ns"]
    assert op_types["ops"].sum() == summary.loc["All ops", "op_count"] == len(detail)
    assert op_types["calls"].sum() == detail["calls"].sum()
    parts = summary.loc[["Ops using TC", "Ops eligible for TC but not using", "All other ops"]].sum()
    assert parts["op_count"] == summary.loc["All ops", "op_count"]
    assert parts["gpu_time_ns"] == summary.loc["All ops", "gpu_time_ns"]
    # the group report's last row holds every call; its root every call but the unassociated ones
    groups = built["group_node"].main.frame.set_index("name")
    assert groups.index[-1] == "_CompleteModel_"
    complete, root = groups.loc["_CompleteModel_"], groups.loc["/"]
    assert complete["calls"] == detail["calls"].sum()
    assert complete["gpu_time_total_ns"] == summary.loc["All ops", "gpu_time_ns"]
    loose = detail[detail["op_name"].str.startswith("unassociated_")]
    assert root["calls"] == detail["calls"].sum() - loose["calls"].sum()
    assert root["gpu_time_total_ns"] == summary.loc["All ops", "gpu_time_ns"] - loose["gpu_time_total_ns"].sum()


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp"])
def test_formulas_hold_on_every_row(name: str) -> None:
    built, ctx = reports(name)
    inst = ctx.op_instances
    assert (inst["gpu_idle"] >= 0).all() and (inst["cpu_overhead"] >= 0).all() and (inst["gpu"] >= 0).all()
    assert (inst["api"] <= inst["cpu"]).all()
    table = built["detail"].main.frame
    for metric in ("cpu_time", "gpu_time", "cpu_overhead", "gpu_idle"):
        assert np.allclose(table[f"{metric}_avg_ns"], table[f"{metric}_total_ns"] / table["calls"])
        assert (table[f"{metric}_min_ns"] <= table[f"{metric}_max_ns"]).all()


def test_resnet_amp_tensor_cores() -> None:
    built, _ = reports("resnet_amp")
    assert summary_value(built, "tc_kernel_utilization_pct") > 80
    tensor = built["tensor"].main.frame
    assert set(tensor["op_type"]) == {"conv2d", "linear"}
    convs = tensor[tensor["op_type"] == "conv2d"]
    assert convs["tc_kernel_time_ns"].sum() > 0.8 * convs["kernel_time_ns"].sum()
    assert all_ops(built).loc["Ops using TC", "op_count"] > 0
    assert (tensor["tc_kernels"] + tensor["non_tc_kernels"] == tensor["kernels"]).all()


@pytest.mark.parametrize("name", ["resnet_fp32", "no_emit_nvtx"])
def test_fp32_runs_use_no_tensor_cores(name: str) -> None:
    built, _ = reports(name)
    assert all_ops(built).loc["Ops using TC", "op_count"] == 0
    assert (~built["kernel"].main.frame["uses_tc"]).all()
    assert (built["tensor"].main.frame["tc_kernel_time_ns"] == 0).all()


def test_resnet_fp32_eligible_ops_not_using_tensor_cores() -> None:
    built, _ = reports("resnet_fp32")
    assert summary_value(built, "tc_kernel_utilization_pct") == 0.0
    eligible = all_ops(built).loc["Ops eligible for TC but not using", "op_count"]
    detail = built["detail"].main.frame
    assert eligible == detail["tc_eligible"].sum() > 2 * RESNET18_CONVS


def test_group_paths_follow_user_ranges() -> None:
    built, _ = reports("resnet_amp")
    groups = built["group_node"].main.frame.set_index("name")
    assert {"/", "/forward/", "/backward/", "/data/", "/optimizer/"} <= set(groups.index)
    assert groups.loc["/forward/", "tc_eligible_ops"] == RESNET18_CONVS + 1
    # autograd's thread has no user range; its ops join the main thread's `backward` range
    assert groups.loc["/backward/", "tc_eligible_ops"] == RESNET18_CONVS + 1
    children = groups[groups.index.str.fullmatch(r"/[^/]+/")]  # the root's direct children
    assert children["calls"].sum() == groups.loc["/", "calls"]


def test_dlprof_marker_recording(tmp_path: Path) -> None:
    """A real DLProf v1.x PyTorch run (nvidia_dlprof_pytorch_nvtx markers), from a public repository."""
    path = SHARED / "public" / "MohanadOdema__DLProf__nsys_profile.sqlite"
    if not path.exists():
        pytest.skip("public DLProf export not available")
    options = Options(nsys_database=path, reports=("detail", "group_node"), output_path=tmp_path,
                      suppress_tb_files=True, verbosity="quiet")
    built = {r.name: r for r in run(options).reports}
    detail = built["detail"].main.frame.set_index("op_id")
    conv = detail.loc["CONV2D_1"]
    assert conv["op_name"].startswith("/module/dummy_network::_call_impl/") and conv["op_name"].endswith("/conv2d")
    assert conv["data_type"] == "float32" and "dummy_network.py:25" in conv["stack_trace"]
    assert conv["tc_eligible"] and conv["gpu_time_total_ns"] > 0
    names = set(built["group_node"].main.frame["name"])
    assert "/module/dummy_network::_call_impl/dummy_network::forward/" in names
