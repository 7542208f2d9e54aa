"""DLProf / PyProf dict markers: which ranges are ops, their names, types, CPU times and directions.

GIVEN hand-built exports with the marker shapes of DLProf's plugin (``{'traceMarker': [...],
'funcStack': '/<module>/...'}`` around ``{'mod': ..., 'op': ..., 'args': [...]}``) and of PyProf
(the same without ``funcStack``, with PyTorch 1.4's ``name, seq = N`` ranges), WHEN dlagg finds the
ops, THEN each rule gives the figures worked out by hand (times in ns). The public DLProf export in
../shared is checked against SQL over its own NVTX table.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from dlagg.context import RankContext
from dlagg.ops.markers import MODOP, TRACE, USER, classify_name, stack_name
from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.reports import build_reports
from dlagg.timeline.iterations import detect_iterations

from .builders import TID, ExportBuilder
from .conftest import SHARED

BWD = TID + 1  # autograd's backward thread


def trace(func_stack: str | None, *lines: str) -> str:
    fields = {"traceMarker": list(lines or ["net.py:10"])}
    if func_stack is not None:
        fields["funcStack"] = func_stack
    return repr(fields)


def modop(mod: str, op: str, *shapes: tuple[int, ...], dtype: str = "float32") -> str:
    args = [{"name": "", "type": "tensor", "shape": s, "dtype": dtype} for s in shapes]
    return repr({"mod": mod, "op": op, "args": args})


def context(b: ExportBuilder, tmp_path: Path) -> RankContext:
    path = b.write(tmp_path / f"m{len(list(tmp_path.glob('*.sqlite')))}.sqlite")
    profile = load_profile(path)
    return RankContext(profile, detect_iterations(profile), Options(nsys_database=path))


def ops_of(ctx: RankContext) -> pd.DataFrame:
    """One row per op instance, with its op's fields, indexed by op name."""
    return ctx.ops.instances.join(ctx.ops.ops, on="key").set_index("op_name")


def kernel_ops(ctx: RankContext) -> list[str]:
    return list(ctx.op_columns(ctx.work.index)["op_name"])


# --- which ranges are ops ---------------------------------------------------------------------------


def test_nested_mod_op_ranges_belong_to_the_outermost(tmp_path: Path) -> None:
    """F.relu calls torch.relu: DLProf's plugin marks both; only F.relu is an op, with the kernel."""
    b = ExportBuilder()
    b.range(0, 1000, trace("/<module>/Net::forward/relu"))
    b.range(10, 990, modop("torch.nn.functional", "relu", (8, 16)))
    b.range(100, 900, trace("/<module>/Net::forward/relu/relu"))
    b.range(110, 890, modop("torch", "relu", (8, 16)))
    b.range(120, 880, "aten::relu, seq = 3")
    b.launch(200, 220, 300, 400, "relu_kernel")
    ctx = context(b, tmp_path)
    ops = ops_of(ctx)
    assert list(ops.index) == ["/module/Net::forward/relu"]
    relu = ops.iloc[0]
    assert relu["op_type"] == "relu" and relu["direction"] == "fprop" and relu["kernels"] == 1
    assert relu["cpu"] == 990 - 10 and relu["api"] == 20
    assert kernel_ops(ctx) == ["/module/Net::forward/relu"]


def test_helpers_inside_an_op_are_not_ops(tmp_path: Path) -> None:
    """F.max_pool2d dispatches through has_torch_function_unary and the boolean-dispatch ``fn``
    (``_max_pool2d``); F.linear calls has_torch_function_variadic. DLProf counts one op each."""
    b = ExportBuilder()
    b.range(0, 1000, trace("/<module>/Net::forward/max_pool2d"))
    b.range(10, 990, modop("torch.nn.functional", "max_pool2d", (1, 6, 30, 30)))
    b.range(20, 40, trace("/<module>/Net::forward/max_pool2d/has_torch_function_unary"))
    b.range(25, 35, modop("torch.nn.functional", "has_torch_function_unary", (1, 6, 30, 30)))
    b.range(50, 900, trace("/<module>/Net::forward/max_pool2d/fn"))
    b.range(60, 890, modop("torch.nn.functional", "_max_pool2d", (1, 6, 30, 30)))
    b.range(70, 880, "aten::max_pool2d, seq = 4")
    b.launch(100, 120, 150, 250, "max_pool_forward_nchw")
    b.range(1000, 2000, trace("/<module>/Net::forward/Linear::_call_impl(3)/Linear::forward/linear"))
    b.range(1010, 1990, modop("torch.nn.functional", "linear", (1, 400), (120, 400)))
    b.range(1020, 1030, trace("/<module>/Net::forward/Linear::_call_impl(3)/Linear::forward/linear/"
                              "has_torch_function_variadic"))
    b.range(1021, 1029, modop("torch.nn.functional", "has_torch_function_variadic", (1, 400)))
    b.range(1100, 1900, "aten::linear, seq = 5")
    b.launch(1200, 1220, 1300, 1500, "volta_sgemm_128x64_tn")
    ctx = context(b, tmp_path)
    ops = ops_of(ctx)
    assert sorted(ops["op_type"]) == ["linear", "max_pool2d"]
    assert ops.loc["/module/Net::forward/max_pool2d", "kernels"] == 1
    assert ops.loc["/module/Net::forward/Linear::_call_impl[3]/Linear::forward/linear", "kernels"] == 1


def test_cpu_time_is_the_mod_op_range_not_its_trace_marker(tmp_path: Path) -> None:
    """DLProf's flatten: its {'mod','op'} range lasts 35,815 ns, the traceMarker around it 47,281 ns."""
    b = ExportBuilder()
    b.range(0, 47_281, trace("/<module>/Net::forward/flatten", "net.py:27"))
    b.range(11_466, 47_281, modop("torch", "flatten", (1, 16, 26, 26)))
    b.api(1_000, 9_000, "cudaStreamIsCapturing_v10000")  # in the trace marker, before the op: not the op's
    b.range(20_000, 30_000, "aten::flatten, seq = 6")
    b.api(21_000, 24_000, "cudaGetDevice_v3020")
    b.api(25_000, 26_000, "cudaGetLastError_v3020")
    ctx = context(b, tmp_path)
    flatten = ops_of(ctx).loc["/module/Net::forward/flatten"]
    assert flatten["cpu"] == 35_815
    assert flatten["api"] == 3_000 + 1_000
    assert flatten["cpu_overhead"] == 35_815 - 4_000
    detail = build_reports(ctx, ["detail"])["detail"].main.frame.set_index("op_id")
    assert detail.loc["FLATTEN_1", "cpu_time_total_ns"] == 35_815
    assert detail.loc["FLATTEN_1", "cpu_overhead_total_ns"] == 31_815


def test_trace_marker_without_mod_op_is_an_op(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 500, trace("/<module>/Net::forward/custom_kernel_call"))
    b.launch(100, 120, 200, 300, "custom")
    ops = ops_of(context(b, tmp_path))
    assert list(ops.index) == ["/module/Net::forward/custom_kernel_call"]
    assert ops.iloc[0]["op_type"] == "custom_kernel_call" and ops.iloc[0]["kernels"] == 1


# --- names and types --------------------------------------------------------------------------------


def test_name_stack_and_group_come_from_the_trace_marker(tmp_path: Path) -> None:
    b = ExportBuilder()
    stack = "/<module>/Net::_call_impl/Net::forward/Conv2d::_call_impl(2)/Conv2d::forward/conv2d"
    b.range(0, 1000, trace(stack, "net.py:41", "net.py:26"))
    b.range(10, 990, modop("torch.nn.functional", "conv2d", (1, 6, 30, 30), (16, 6, 5, 5), dtype="float16"))
    b.launch(100, 120, 200, 400, "sm70_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128")
    ctx = context(b, tmp_path)
    conv = ops_of(ctx).iloc[0]
    assert conv.name == "/module/Net::_call_impl/Net::forward/Conv2d::_call_impl[2]/Conv2d::forward/conv2d"
    assert conv["stack"] == "net.py:41\nnet.py:26"
    # DLProf's labelled form of a convolution's input and filter shapes
    assert conv["data_types"] == "float16" and conv["input_shapes"] == "<N:1, C:6, H:30, W:30>; <K:16, C:6, R:5, S:5>"
    assert conv["op_id"] == "CONV2D_1" and conv["tc_eligible"] and conv["tc_kernels"] == 1
    groups = set(build_reports(ctx, ["group_node"])["group_node"].main.frame["name"])
    assert "/module/Net::_call_impl/Net::forward/Conv2d::_call_impl[2]/Conv2d::forward/" in groups
    assert not any("<" in g or "(" in g for g in groups)


def test_op_type_keeps_the_in_place_underscore(tmp_path: Path) -> None:
    b = ExportBuilder()
    for k, (start, shape) in enumerate(((0, (6, 3, 3, 3)), (1000, (6,)))):
        b.range(start, start + 500, trace(f"/<module>/Net::__init__/Conv2d::reset_parameters/init{k}/uniform_"))
        b.range(start + 10, start + 490, modop("Tensor", "uniform_", shape))
    ops = ops_of(context(b, tmp_path))
    assert sorted(ops["op_id"]) == ["UNIFORM__1", "UNIFORM__2"]
    assert set(ops["op_type"]) == {"uniform_"}


def test_pyprof_markers_name_the_op_by_module_and_op(tmp_path: Path) -> None:
    """PyProf writes no funcStack: the op is `mod.op`, its stack the traceMarker's list."""
    b = ExportBuilder()
    b.range(0, 1000, trace(None, "language-model.py:319", "language-model.py:106"))
    b.range(10, 990, modop("torch.nn.functional", "embedding", (35, 20), (33278, 200), dtype="int64"))
    b.range(20, 980, "embedding, seq = 65")  # PyTorch 1.4: no aten:: namespace
    b.launch(100, 120, 200, 300, "indexSelectLargeIndex")
    ops = ops_of(context(b, tmp_path))
    embedding = ops.loc["torch.nn.functional.embedding"]
    assert embedding["stack"] == "language-model.py:319\nlanguage-model.py:106"
    assert embedding["op_type"] == "embedding" and embedding["direction"] == "fprop"
    assert embedding["kernels"] == 1 and list(ops.index) == ["torch.nn.functional.embedding"]


# --- directions: PyProf's seq pairing -----------------------------------------------------------------


def pyprof_step(b: ExportBuilder) -> None:
    """F.linear (forward, main thread), then on autograd's thread: MmBackward (paired through seq 5),
    AccumulateGrad > add_ (seq 0), and an engine-level ``sum, seq = 0`` between nodes."""
    b.range(0, 1000, trace(None, "lm.py:100"))
    b.range(10, 990, modop("torch.nn.functional", "linear", (35, 200), (600, 200)))
    b.range(100, 900, "matmul, seq = 5")
    b.range(200, 800, "mm, seq = 5")
    b.launch(300, 320, 400, 600, "volta_sgemm_64x32_sliced1x4_tn")
    b.range(2000, 2500, "MmBackward, seq = 5", tid=BWD)
    b.range(2010, 2490, "mm, seq = 0", tid=BWD)
    b.launch(2100, 2120, 2200, 2400, "volta_sgemm_64x32_sliced1x4_nt", tid=BWD)
    b.range(2600, 2700, "AddBackward0, seq = 6", tid=BWD)
    b.range(2710, 2800, "sum, seq = 0", tid=BWD)
    b.launch(2720, 2730, 2740, 2790, "reduce_kernel", tid=BWD)
    b.range(3000, 3500, "torch::autograd::AccumulateGrad", tid=BWD)
    b.range(3010, 3490, "add_, seq = 0", tid=BWD)
    b.launch(3100, 3110, 3200, 3300, "elementwise_kernel", tid=BWD)


def test_pyprof_directions_and_backward_pairing(tmp_path: Path) -> None:
    b = ExportBuilder()
    pyprof_step(b)
    ctx = context(b, tmp_path)
    columns = pd.DataFrame(ctx.op_columns(ctx.work.index)).astype(str)
    got = list(zip(columns["op_type"], columns["direction"], columns["op_id"], strict=True))
    # the backward GEMM is the linear's (same Op ID); AccumulateGrad's add_ and the engine's sum are
    # named by their seq markers and, without a Backward marker around them, fprop (PyProf's rule)
    assert got == [("linear", "fprop", "LINEAR_1"), ("linear", "bprop", "LINEAR_1"), ("sum", "fprop", "SUM_1"),
                   ("add_", "fprop", "ADD__1")]


def test_emit_nvtx_rules_are_unchanged_without_dict_markers(tmp_path: Path) -> None:
    """The same emit_nvtx ranges in a profile without dict markers: AccumulateGrad is the op (bprop,
    nsys-era rule) and aten names lose the in-place underscore."""
    b = ExportBuilder()
    b.range(3000, 3500, "torch::autograd::AccumulateGrad", tid=BWD)
    b.range(3010, 3490, "aten::add_, seq = 0, op_id = 9", tid=BWD)
    b.launch(3100, 3110, 3200, 3300, "elementwise_kernel", tid=BWD)
    b.range(4000, 4500, "aten::relu_, seq = 1, op_id = 10")
    b.launch(4100, 4110, 4200, 4300, "relu_kernel")
    ctx = context(b, tmp_path)
    columns = pd.DataFrame(ctx.op_columns(ctx.work.index)).astype(str)
    assert list(zip(columns["op_name"], columns["op_type"], columns["direction"], strict=True)) == [
        ("AccumulateGrad", "accumulate_grad", "bprop"), ("aten::relu_", "relu", "fprop")]


# --- parsing ------------------------------------------------------------------------------------------


def test_markers_are_parsed_never_evaluated(tmp_path: Path) -> None:
    flag = tmp_path / "evaluated"
    text = f"{{'mod': __import__('pathlib').Path({str(flag)!r}).touch(), 'op': 'x', 'args': []}}"
    assert classify_name(text, False)["kind"] == USER  # not a literal: a plain range name
    assert not flag.exists()
    assert classify_name(modop("torch", "mm", (2, 3)), False)["kind"] == MODOP
    assert classify_name(trace("/<module>/f"), False)["kind"] == TRACE
    assert stack_name("/<module>/a::b(2)/<lambda>/c(10)") == "/module/a::b[2]/lambda/c[10]"


# --- the public DLProf export ------------------------------------------------------------------------


DLPROF = SHARED / "public" / "MohanadOdema__DLProf__nsys_profile.sqlite"


@pytest.fixture(scope="module")
def dlprof() -> tuple[RankContext, list[tuple]]:
    if not DLPROF.exists():
        pytest.skip("public DLProf export not available (../shared)")
    with sqlite3.connect(f"file:{DLPROF}?mode=ro&immutable=1", uri=True) as conn:
        rows = conn.execute("SELECT rowid, start, end, globalTid, text FROM NVTX_EVENTS").fetchall()
    profile = load_profile(DLPROF)
    return RankContext(profile, detect_iterations(profile), Options(nsys_database=DLPROF)), rows


def test_dlprof_export_ops_are_the_outermost_mod_op_ranges(dlprof) -> None:
    ctx, rows = dlprof
    modops = [r for r in rows if r[4].startswith("{'mod': ")]
    outermost = [r for r in modops if not any(o is not r and o[3] == r[3] and o[1] <= r[1] and r[2] <= o[2]
                                              for o in modops)]
    emit = [r for r in rows if r[4].startswith("aten::")]
    loose = [r for r in emit if not any(o[3] == r[3] and o[1] <= r[1] and r[2] <= o[2] for o in modops)]
    assert not loose  # every emit_nvtx range of this run is inside a {'mod','op'} range
    ops = ctx.ops.ops
    # CUDA calls outside every range are ops of their own (unassociated_<api>, tested elsewhere)
    unassociated = ops.index[ops["op_name"].str.startswith("unassociated_")]
    instances = ctx.ops.instances[~ctx.ops.instances["key"].isin(unassociated)]
    assert len(instances) == len(outermost) == 26
    assert sorted(instances["cpu"]) == sorted(r[2] - r[1] for r in outermost)
    assert not ops["op_name"].str.contains("<|>|\\(\\d+\\)").any()
    assert "has_torch_function_variadic" not in set(ops["op_type"])
    flatten = ops[ops["op_type"] == "flatten"].index
    (row,) = [r for r in outermost if "'op': 'flatten'" in r[4]]
    assert instances.set_index("key").loc[flatten, "cpu"].tolist() == [row[2] - row[1]]
    assert {"UNIFORM__1", "CONV2D_1", "CONV2D_2", "LINEAR_1", "FLATTEN_1"} <= set(ops["op_id"])
