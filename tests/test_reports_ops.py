"""Op reports (detail, op_type, group_node, tensor) and the summary's op rows on the real recordings."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile
from dlagg.reports.base import ReportContext
from dlagg.timeline.iterations import detect_iterations

from .conftest import SHARED, recording

OP_REPORTS = ("summary", "detail", "op_type", "group_node", "tensor", "kernel", "iteration")

# torchvision resnet18: 20 convolutions (17 in the blocks + conv1 + 3 downsample), 20 batch norms, one fc.
RESNET18_CONVS = 20
RESNET18_BATCH_NORMS = 20
STEPS = 15  # recorded train_step iterations in the resnet fixtures


@cache
def reports(name: str) -> tuple[dict, ReportContext]:
    path = recording(name)
    profile = load_profile(path)
    ctx = ReportContext(profile, detect_iterations(profile), Options(nsys_database=path))
    return {n: ctx.report(n) for n in OP_REPORTS}, ctx


def all_ops(built: dict) -> pd.DataFrame:
    return next(s.table for s in built["summary"].sections if s.title == "All Ops").set_index("")


def summary_value(built: dict, label: str) -> object:
    return dict(built["summary"].sections[1].table.values).get(label)


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp"])
def test_one_row_per_layer_op_and_direction(name: str) -> None:
    built, _ = reports(name)
    table = built["detail"].table
    assert not table.duplicated(["Op ID", "Direction", "Op Name"]).any()
    assert (table["No. Calls"] == STEPS).all()  # the same op in every iteration is one row, not one per op_id
    fprop = table[table["Direction"] == "fprop"]
    assert (fprop["Op Type"] == "conv2d").sum() == RESNET18_CONVS
    assert (fprop["Op Type"] == "batch_norm").sum() == RESNET18_BATCH_NORMS
    assert (fprop["Op Type"] == "linear").sum() == 1
    conv_bprop = table[table["Op Name"] == "ConvolutionBackward0"]
    assert len(conv_bprop) == RESNET18_CONVS
    # every convolution's backward carries the Op ID of its forward op (linked through autograd's seq)
    assert set(conv_bprop["Op ID"]) == set(fprop.loc[fprop["Op Type"] == "conv2d", "Op ID"])
    assert (conv_bprop["Op Type"] == "conv2d").all()


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp"])
def test_kernel_counts_per_op_add_up_to_every_kernel(name: str) -> None:
    built, ctx = reports(name)
    work = ctx.selected_work
    kernels = work[work["kind"].to_numpy() == 0]
    assert int(ctx.op_instances["kernels"].sum()) == len(kernels)
    assert (built["iteration"].table["Op ID"] != "").all()
    assert built["kernel"].table["Calls"].sum() == len(kernels)
    # every kernel of the kernel report sits under an op
    assert (built["kernel"].table["Op ID"] != "").all()


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp", "cuda_basic", "dataloader_bound", "h2d_heavy"])
def test_op_type_totals_add_up_to_all_ops(name: str) -> None:
    built, _ = reports(name)
    op_types = built["op_type"].table
    detail = built["detail"].table
    summary = all_ops(built)
    assert op_types["Total GPU Time (ns)"].sum() == summary.loc["All ops", "GPU Time (ns)"]
    assert op_types["Total CPU Time (ns)"].sum() == summary.loc["All ops", "CPU Time (ns)"]
    assert op_types["# Ops"].sum() == summary.loc["All ops", "# Ops"] == len(detail)
    assert op_types["# Calls"].sum() == detail["No. Calls"].sum()
    parts = summary.loc[["Ops using TC", "Ops eligible for TC but not using", "All other ops"]].sum()
    assert parts["# Ops"] == summary.loc["All ops", "# Ops"]
    assert parts["GPU Time (ns)"] == summary.loc["All ops", "GPU Time (ns)"]
    # root of the group tree holds every call
    root = built["group_node"].table.set_index("Name").loc["/"]
    assert root["Num Calls Aggregated"] == detail["No. Calls"].sum()
    assert root["Total GPU Time (ns)"] == summary.loc["All ops", "GPU Time (ns)"]


@pytest.mark.parametrize("name", ["resnet_fp32", "resnet_amp"])
def test_formulas_hold_on_every_row(name: str) -> None:
    built, ctx = reports(name)
    inst = ctx.op_instances
    assert (inst["gpu_idle"] >= 0).all() and (inst["cpu_overhead"] >= 0).all() and (inst["gpu"] >= 0).all()
    assert (inst["api"] <= inst["cpu"]).all()
    table = built["detail"].table
    for metric in ("CPU Time", "GPU Time", "CPU Overhead", "GPU Idle"):
        assert np.allclose(table[f"Avg. {metric} (ns)"], table[f"Total {metric} (ns)"] / table["No. Calls"], atol=0.06)
        assert (table[f"Min {metric} (ns)"] <= table[f"Max {metric} (ns)"]).all()


def test_resnet_amp_tensor_cores() -> None:
    built, _ = reports("resnet_amp")
    assert summary_value(built, "Tensor Core Kernel Utilization %") > 80
    tensor = built["tensor"].table
    assert set(tensor["Op Type"]) == {"conv2d", "linear"}
    convs = tensor[tensor["Op Type"] == "conv2d"]
    assert convs["TC GPU Time (ns)"].sum() > 0.8 * convs["Total GPU Time (ns)"].sum()
    assert all_ops(built).loc["Ops using TC", "# Ops"] > 0
    assert (tensor["TC Kernel Count"] + tensor["Non-TC Kernel Count"] == tensor["Total Kernel Count"]).all()


@pytest.mark.parametrize("name", ["resnet_fp32", "no_emit_nvtx"])
def test_fp32_runs_use_no_tensor_cores(name: str) -> None:
    built, _ = reports(name)
    assert all_ops(built).loc["Ops using TC", "# Ops"] == 0
    assert (built["kernel"].table["Uses TC"] == "no").all()
    assert (built["tensor"].table["TC GPU Time (ns)"] == 0).all()


def test_resnet_fp32_eligible_ops_not_using_tensor_cores() -> None:
    built, _ = reports("resnet_fp32")
    assert summary_value(built, "Tensor Core Kernel Utilization %") == 0.0
    eligible = all_ops(built).loc["Ops eligible for TC but not using", "# Ops"]
    detail = built["detail"].table
    assert eligible == (detail["TC Eligible"] == "yes").sum() > 2 * RESNET18_CONVS


def test_group_paths_follow_user_ranges() -> None:
    built, _ = reports("resnet_amp")
    groups = built["group_node"].table.set_index("Name")
    assert {"/", "/forward/", "/backward/", "/data/", "/optimizer/"} <= set(groups.index)
    assert groups.loc["/forward/", "Num TC Eligible Ops"] == RESNET18_CONVS + 1
    # autograd's thread has no user range; its ops join the main thread's `backward` range
    assert groups.loc["/backward/", "Num TC Eligible Ops"] == RESNET18_CONVS + 1
    children = groups.drop(index="/")
    assert children["Num Calls Aggregated"].sum() == groups.loc["/", "Num Calls Aggregated"]


def test_dlprof_marker_recording(tmp_path: Path) -> None:
    """A real DLProf v1.x PyTorch run (nvidia_dlprof_pytorch_nvtx markers), from a public repository."""
    path = SHARED / "public" / "MohanadOdema__DLProf__nsys_profile.sqlite"
    if not path.exists():
        pytest.skip("public DLProf export not available")
    options = Options(nsys_database=path, reports=("detail", "group_node"), output_path=tmp_path,
                      suppress_tb_files=True, verbosity="quiet")
    built = {r.name: r for r in run(options).reports}
    detail = built["detail"].table.set_index("Op ID")
    conv = detail.loc["CONV2D_1"]
    assert conv["Op Name"].startswith("/module/dummy_network::_call_impl/") and conv["Op Name"].endswith("/conv2d")
    assert conv["Data Type"] == "float32" and "dummy_network.py:25" in conv["Stack Trace"]
    assert conv["TC Eligible"] == "yes" and conv["Total GPU Time (ns)"] > 0
    names = set(built["group_node"].table["Name"])
    assert "/module/dummy_network::_call_impl/dummy_network::forward/" in names
