"""Ops on hand-built exports: which range owns which GPU work, the §1.5 formulas, grouping, domains.

GIVEN a tiny nsys-shaped export, WHEN dlagg finds the ops, THEN every figure is the one worked
out by hand in the test (times in ns).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dlagg.context import RankContext
from dlagg.errors import OptionsError
from dlagg.ops import union_by_group
from dlagg.ops.assign import outermost_calls, outside_every_range
from dlagg.ops.markers import backward_op, classify_name, normalise_op
from dlagg.ops.tree import Forest
from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.reports import build_reports
from dlagg.timeline import intervals
from dlagg.timeline.iterations import detect_iterations

from .builders import PID, TID, ExportBuilder, global_tid
from .test_crossing import crossing_pairs

BWD_TID = TID + 1  # autograd's backward thread


class Builder(ExportBuilder):
    """ExportBuilder plus NVTX endGlobalTid (ranges ending on another thread) and memsets."""

    def __init__(self) -> None:
        super().__init__()
        self.end_tids: dict[int, int] = {}  # row in self.nvtx -> end thread
        self.memsets: list[tuple] = []

    def cross_thread_range(self, start: int, end: int, text: str, *, end_tid: int) -> None:
        self.end_tids[len(self.nvtx)] = global_tid(PID, end_tid)
        self.range(start, end, text, event_type=60)

    def memset(self, api_start: int, api_end: int, start: int, end: int, *, tid: int = TID) -> None:
        corr = self.api(api_start, api_end, "cudaMemsetAsync_v3020", tid=tid)
        self.memsets.append((start, end, 0, 7, corr, PID << 24, 64, 2))

    def write(self, path: Path) -> Path:
        super().write(path)
        conn = sqlite3.connect(path)
        conn.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN endGlobalTid INTEGER")
        for row, tid in self.end_tids.items():
            conn.execute("UPDATE NVTX_EVENTS SET endGlobalTid = ? WHERE rowid = ?", (tid, row + 1))
        conn.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
                        deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
                        bytes INTEGER, memKind INTEGER)""")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?)", self.memsets)
        conn.commit()
        conn.close()
        return path


def context(b: Builder, tmp_path: Path, **options: object) -> RankContext:
    path = b.write(tmp_path / f"ops{len(list(tmp_path.glob('*.sqlite')))}.sqlite")
    profile = load_profile(path)
    iterations = detect_iterations(profile, options.pop("key_node", None))  # type: ignore[arg-type]
    return RankContext(profile, iterations, Options(nsys_database=path, **options))  # type: ignore[arg-type]


def report(ctx: RankContext, name: str):
    return build_reports(ctx, [name])[name]


def detail(ctx: RankContext) -> pd.DataFrame:
    return report(ctx, "detail").main.frame


def by_name(ctx: RankContext) -> pd.DataFrame:
    """Op instances with their op's name, one row per instance."""
    return ctx.ops.instances.join(ctx.ops.ops, on="key").set_index("op_name")


# --- formulas (§1.5) ------------------------------------------------------------------------------

def test_overlapping_kernels_on_two_streams_count_once(tmp_path: Path) -> None:
    b = Builder()
    b.range(0, 1000, "aten::mm, seq = 1, op_id = 1")
    b.launch(10, 20, 100, 300, "gemm_a", stream=7)
    b.launch(30, 40, 200, 400, "gemm_b", stream=8)  # overlaps [200, 300) on another stream
    b.launch(50, 60, 600, 700, "gemm_c", stream=7)  # gap [400, 600) is GPU idle inside the op
    ctx = context(b, tmp_path)
    row = by_name(ctx).loc["aten::mm"]
    assert row["cpu"] == 1000
    assert row["gpu"] == 200 + 200 + 100 - 100 == 400  # union of [100,300) [200,400) [600,700)
    assert row["gpu_idle"] == (700 - 100) - 400
    assert row["api"] == 30
    assert row["cpu_overhead"] == 1000 - 30
    assert row["kernels"] == 3


def test_op_without_gpu_work(tmp_path: Path) -> None:
    b = Builder()
    b.range(0, 500, "aten::empty, op_id = 1")
    b.api(100, 180, "cudaMalloc_v3020")
    b.range(600, 900, "aten::relu, seq = 2, op_id = 2")
    b.launch(610, 620, 700, 750, "relu_kernel")
    ctx = context(b, tmp_path)
    table = detail(ctx).set_index("op_name")
    empty = table.loc["aten::empty"]
    assert empty["cpu_time_total_ns"] == 500 and empty["gpu_time_total_ns"] == 0
    assert empty["gpu_idle_total_ns"] == 0
    assert empty["cpu_overhead_total_ns"] == 500 - 80  # cudaMalloc counts: all API calls, not only launches
    assert table.loc["aten::relu", "gpu_time_total_ns"] == 50


def test_op_launching_a_memcpy_and_a_memset(tmp_path: Path) -> None:
    b = Builder()
    b.range(0, 1000, "aten::copy_, seq = 1, op_id = 1")
    b.copy(10, 50, 100, 400)
    b.memset(60, 70, 450, 500)
    ctx = context(b, tmp_path)
    row = by_name(ctx).loc["aten::copy_"]
    assert row["gpu"] == 300 + 50 and row["gpu_idle"] == (500 - 100) - 350
    assert row["kernels"] == 0 and row["kernel_time"] == 0
    # both memory operations carry the op
    assert set(pd.Series(ctx.op_columns(ctx.work.index)["op_name"])) == {"aten::copy_"}


def test_api_calls_nested_in_api_calls_are_counted_once(tmp_path: Path) -> None:
    b = Builder()
    b.range(0, 1000, "aten::mm, seq = 1, op_id = 1")
    b.launch(100, 300, 400, 500, "gemm")
    b.api(150, 250, "INVALID")  # a driver call made inside cudaLaunchKernel (CUDA 13 does this)
    ctx = context(b, tmp_path)
    assert by_name(ctx).loc["aten::mm", "cpu_overhead"] == 1000 - 200


def test_nested_ranges_innermost_op_and_group_paths(tmp_path: Path) -> None:
    b = Builder()
    b.range(0, 10_000, "forward")
    b.range(100, 2000, "aten::linear, seq = 5, op_id = 1")  # an op: the dispatcher chain below is its body
    b.range(200, 1900, "aten::addmm, seq = 5, op_id = 2")
    b.launch(300, 310, 400, 600, "gemm")
    b.range(3000, 9000, "encoder")  # user range enclosing a user leaf range: a group
    b.range(3100, 4000, "attention")  # user range enclosing nothing: an op
    b.launch(3200, 3210, 3300, 3400, "attn_kernel")
    b.launch(5000, 5010, 5100, 5200, "stray")  # in encoder, outside every op: no op
    ctx = context(b, tmp_path)
    ops = by_name(ctx)
    assert set(ops.index) == {"aten::linear", "attention"}
    assert ops.loc["aten::linear", "path"] == "/forward/" and ops.loc["aten::linear", "kernels"] == 1
    assert ops.loc["attention", "path"] == "/forward/encoder/" and ops.loc["attention", "kernels"] == 1
    assert ops.loc["aten::linear", "op_type"] == "linear" and ops.loc["aten::linear", "tc_eligible"]
    kernel_ops = pd.Series(np.asarray(ctx.op_columns(ctx.work.index)["op_name"]),
                           index=ctx.profile.strings.decode(ctx.work["name_id"]).to_numpy())
    assert kernel_ops.to_dict() == {"gemm": "aten::linear", "attn_kernel": "attention", "stray": ""}
    groups = report(ctx, "group_node").main.frame.set_index("name")
    assert list(groups.index) == ["/", "/forward/", "/forward/encoder/", "_CompleteModel_"]
    assert groups.loc["/", "calls"] == 2 and groups.loc["/forward/encoder/", "calls"] == 1
    assert groups.loc["_CompleteModel_", "calls"] == 2  # every call is inside some range: none unassociated
    assert groups.loc["/forward/", "tc_eligible_ops"] == 1
    assert groups.loc["/", "gpu_time_total_ns"] == 200 + 100


def test_range_ending_on_another_thread_defines_no_op(tmp_path: Path) -> None:
    b = Builder()
    b.cross_thread_range(0, 1000, "async_region", end_tid=TID + 5)
    b.launch(100, 110, 200, 300, "k")
    b.range(400, 600, "aten::add, seq = 1, op_id = 1")
    b.launch(410, 420, 430, 440, "add_kernel")
    ctx = context(b, tmp_path)
    assert set(by_name(ctx).index) == {"aten::add"}
    assert any("end on another thread" in w for w in ctx.ops.warnings)
    assert pd.Series(ctx.op_columns(ctx.work.index)["op_name"]).tolist() == ["", "aten::add"]


def test_zero_length_range_ending_on_another_thread_holds_no_call(tmp_path: Path) -> None:
    # (found by the property tests: such a range merges into no interval at all)
    b = Builder()
    b.cross_thread_range(100, 100, "async_mark", end_tid=TID + 5)
    b.launch(100, 110, 200, 300, "k")
    ctx = context(b, tmp_path)
    assert pd.Series(ctx.op_columns(ctx.work.index)["op_name"]).tolist() == ["unassociated_cudaLaunchKernel_v7000"]


def test_work_launched_on_another_annotated_thread_is_not_the_ranges(tmp_path: Path) -> None:
    b = Builder()
    b.range(0, 1000, "aten::mm, seq = 1, op_id = 1")
    b.range(2000, 3000, "aten::add, seq = 2, op_id = 2", tid=TID + 3)
    b.launch(100, 110, 200, 300, "k", tid=TID + 3)  # same time, other thread with its own ranges
    ctx = context(b, tmp_path)
    # not aten::mm's: outside every range of its thread, the call is an op of its own (DLProf's rule)
    assert pd.Series(ctx.op_columns(ctx.work.index)["op_name"]).tolist() == ["unassociated_cudaLaunchKernel_v7000"]
    assert by_name(ctx).loc["aten::mm", "gpu"] == 0


def test_work_from_an_unannotated_thread_goes_to_the_op_open_in_its_process(tmp_path: Path) -> None:
    """Without emit_nvtx autograd launches the backward pass from its own thread, which has no range."""
    b = Builder()
    b.range(0, 1000, "backward")
    b.launch(100, 110, 200, 300, "dgrad", tid=BWD_TID)  # during `backward`, from autograd's thread
    b.launch(1100, 1110, 1200, 1300, "late", tid=BWD_TID)  # after it: no op open
    b.launch(100, 110, 200, 300, "other_process", tid=BWD_TID, pid=PID + 1)
    ctx = context(b, tmp_path)
    # the other two are made while no range is open in their process: CUDA calls outside every range
    loose = "unassociated_cudaLaunchKernel_v7000"
    assert pd.Series(ctx.op_columns(ctx.work.index)["op_name"]).tolist() == ["backward", loose, loose]
    backward = by_name(ctx).loc["backward"]
    assert backward["gpu"] == 100 and backward["api"] == 0 and backward["cpu_overhead"] == 1000


# --- grouping across iterations, backward linking -------------------------------------------------

def training_steps(b: Builder, steps: int = 3) -> None:
    """`steps` iterations: forward conv2d, conv2d, linear; backward on autograd's thread."""
    for i in range(steps):
        t = i * 100_000
        seq = 10 * i
        b.range(t, t + 90_000, "train_step")
        b.range(t + 100, t + 40_000, "forward")
        for j, (op, kernel) in enumerate((("aten::conv2d", "h1688conv"), ("aten::conv2d", "sgemm_conv"),
                                         ("aten::linear", "h884gemm"))):
            s = t + 1000 + j * 10_000
            b.range(s, s + 5000, f"{op}, seq = {seq + j}, op_id = {1000 * i + j}, sizes = [[32, 3], [3, 3]]")
            b.launch(s + 100, s + 200, s + 300, s + 1300 + 100 * j, kernel)
        b.range(t + 45_000, t + 88_000, "backward")  # the main thread waits here while autograd works
        b.range(t + 45_100, t + 45_200, f"aten::ones_like, op_id = {9000 + i}")  # loss.backward() seeds the grad
        for j, node in enumerate(("AddmmBackward0", "ConvolutionBackward0", "ConvolutionBackward0")):
            s = t + 50_000 + j * 10_000
            fwd_seq = seq + 2 - j
            b.range(s, s + 5000, f"autograd::engine::evaluate_function: {node}, op_id = {500 + j}", tid=BWD_TID)
            b.range(s + 10, s + 4900, f"{node}, seq = {fwd_seq}, op_id = {600 + j}", tid=BWD_TID)
            b.launch(s + 100, s + 200, s + 300, s + 2300, "dgrad_h1688" if j else "h884gemm_bwd", tid=BWD_TID)
        b.range(t + 85_000, t + 86_000, "torch::autograd::AccumulateGrad, op_id = 9", tid=BWD_TID)


def test_ops_are_grouped_across_iterations_and_backward_shares_the_forward_id(tmp_path: Path) -> None:
    b = Builder()
    training_steps(b)
    ctx = context(b, tmp_path)
    table = detail(ctx)
    rows = table.set_index(["op_id", "direction"])
    assert sorted(rows.index) == [("ACCUMULATE_GRAD_1", "bprop"), ("CONV2D_1", "bprop"), ("CONV2D_1", "fprop"),
                                  ("CONV2D_2", "bprop"), ("CONV2D_2", "fprop"), ("LINEAR_1", "bprop"),
                                  ("LINEAR_1", "fprop"), ("ONES_LIKE_1", "fprop")]
    assert (table["calls"] == 3).all()  # one row per op, one call per iteration, never per op_id
    assert rows.loc[("CONV2D_1", "fprop"), "using_tc"] and not rows.loc[("CONV2D_2", "fprop"), "using_tc"]
    # ConvolutionBackward0 of seq 1 (second conv) ran third in the backward pass
    assert rows.loc[("CONV2D_2", "bprop"), "op_name"] == "ConvolutionBackward0"
    assert rows.loc[("LINEAR_1", "bprop"), "op_type"] == "linear"
    assert rows.loc[("LINEAR_1", "bprop"), "tc_eligible"]
    assert not rows.loc[("ACCUMULATE_GRAD_1", "bprop"), "tc_eligible"]
    # kernel counts per op add up to every kernel of the aggregated iterations
    kernels = ctx.ops.instances.groupby("key")["kernels"].sum().sum()
    assert kernels == len(ctx.selected_work) == 3 * (3 + 3)  # 3 steps of 3 forward and 3 backward launches
    # op_type totals add up to the All Ops summary
    op_types = report(ctx, "op_type").main.frame
    all_ops = report(ctx, "summary").table("all_ops").frame.set_index("ops")
    assert op_types["gpu_time_total_ns"].sum() == all_ops.loc["All ops", "gpu_time_ns"]
    assert op_types["cpu_time_total_ns"].sum() == all_ops.loc["All ops", "range_time_ns"]
    assert op_types["ops"].sum() == all_ops.loc["All ops", "op_count"] == len(table)
    # 2 conv2d and their 2 ConvolutionBackward0 (reported under the forward op's type) in each of 3 steps
    assert op_types.set_index("op_type").loc["conv2d", "calls"] == 3 * (2 + 2)
    # backward ops run on autograd's thread; they sit under the main thread's `backward` range
    paths = ctx.op_instances.groupby("direction")["path"].agg(set)
    assert paths.to_dict() == {"fprop": {"/forward/", "/backward/"}, "bprop": {"/backward/"}}
    fprop = ctx.work.index[np.asarray(ctx.op_columns(ctx.work.index)["direction"]) == "fprop"]
    assert set(ctx.input_shapes(fprop)) == {"[[32, 3], [3, 3]]"}


def test_iteration_range_selects_calls(tmp_path: Path) -> None:
    b = Builder()
    training_steps(b)
    ctx = context(b, tmp_path)
    ctx_range = RankContext(ctx.profile, detect_iterations(ctx.profile, None, 1, 1), ctx.options)
    assert (detail(ctx_range)["calls"] == 1).all()


def test_tensor_report_and_utilization(tmp_path: Path) -> None:
    b = Builder()
    training_steps(b, steps=2)
    ctx = context(b, tmp_path)
    tensor = report(ctx, "tensor").main.frame.set_index(["op_id", "direction"])
    conv2 = tensor.loc[("CONV2D_2", "fprop")]
    assert not conv2["uses_tc"] and conv2["tc_utilization_pct"] == 0.0
    assert conv2["kernel_time_ns"] == 2 * 1100 and conv2["non_tc_kernel_names"] == "sgemm_conv"
    conv1 = tensor.loc[("CONV2D_1", "fprop")]
    assert conv1["tc_kernel_time_ns"] == 2 * 1000 and conv1["tc_kernel_names"] == "h1688conv"
    assert ("ACCUMULATE_GRAD_1", "bprop") not in tensor.index
    # eligible kernel time: fwd 1000 + 1100 + 1200, bwd 2000 x 3 per iteration; TC: all but sgemm_conv
    summary = report(ctx, "summary").table("summary").values
    assert summary["tc_kernel_utilization_pct"] == pytest.approx(100 * (9300 - 1100) / 9300)


def test_two_ranks_fall_into_the_same_rows(tmp_path: Path) -> None:
    """Each process has its own key-node ranges; its ops join the other rank's rows (calls add up)."""
    b = Builder()
    for pid in (PID, PID + 1):
        for i in range(2):
            t = i * 10_000
            b.range(t, t + 9000, "train_step", pid=pid)
            b.range(t + 100, t + 5000, "forward", pid=pid)
            b.range(t + 200, t + 900, f"aten::mm, seq = {i}, op_id = {i}", pid=pid)
            b.launch(t + 300, t + 310, t + 400, t + 500, "gemm", pid=pid)
    ctx = context(b, tmp_path)
    table = detail(ctx)
    assert table[["op_id", "calls"]].values.tolist() == [["MM_1", 4]]
    assert set(ctx.op_instances["path"]) == {"/forward/"}


def test_domains_option(tmp_path: Path) -> None:
    b = Builder()
    b.range(-5, None, "CCCL", event_type=75, domain=2)
    b.range(0, 1000, "sort_step")
    b.range(100, 900, "cub::DeviceRadixSort", domain=2)
    b.launch(200, 210, 300, 400, "radix_sort_kernel")
    everything = context(b, tmp_path)
    assert set(by_name(everything).index) == {"CCCL:cub::DeviceRadixSort"}
    only_default = context(b, tmp_path, domains=("default",))
    assert set(by_name(only_default).index) == {"sort_step"}
    with pytest.raises(OptionsError, match="no NVTX domain 'cuBLAS'.*'default', 'CCCL'"):
        _ = context(b, tmp_path, domains=("cuBLAS",)).ops


def test_no_ranges_gives_only_unassociated_ops_with_a_warning(tmp_path: Path) -> None:
    b = Builder()
    b.launch(0, 10, 20, 30, "k")
    ctx = context(b, tmp_path)
    built = report(ctx, "detail")
    # the one CUDA call is outside every range: DLProf's unassociated op, nothing else
    assert built.main.frame[["op_id", "op_name", "direction", "op_type", "calls"]].values.tolist() == [
        ["CUDALAUNCHKERNEL_V7000_1", "unassociated_cudaLaunchKernel_v7000", "", "cudaLaunchKernel_v7000", 1]]
    assert any("defines an op" in w and "unassociated" in w for w in built.warnings)
    assert report(ctx, "op_type").main.frame["op_type"].tolist() == ["cudaLaunchKernel_v7000"]
    assert report(ctx, "group_node").main.frame["name"].tolist() == ["_CompleteModel_"]  # no group path
    assert pd.Series(ctx.op_columns(ctx.work.index)["op_id"]).tolist() == ["CUDALAUNCHKERNEL_V7000_1"]


# --- building blocks ------------------------------------------------------------------------------

def test_forest_parent_and_innermost() -> None:
    # thread 1: A[0,100] > B[10,50] > C[20,30]; D[60,90] in A; thread 2: E[0,100]
    tid = np.array([1, 1, 1, 1, 2])
    start = np.array([10, 0, 20, 60, 0])
    end = np.array([50, 100, 30, 90, 100])
    forest = Forest.build(tid, start, end)
    names = np.array(list("BACDE"))[forest.order]
    parent = {names[i]: (names[p] if p >= 0 else None) for i, p in enumerate(forest.parent)}
    assert parent == {"A": None, "B": "A", "C": "B", "D": "A", "E": None}
    hits = forest.innermost(np.array([1, 1, 1, 1, 2, 3]), np.array([25, 35, 55, 70, 5, 5]),
                            np.array([26, 36, 56, 95, 6, 6]))
    assert [names[h] if h >= 0 else None for h in hits] == ["C", "B", "A", "A", "E", None]


def test_forest_rows_out_of_start_order_whose_last_row_starts_last() -> None:
    # nsys writes ranges as they end: inner B[2,3] before its parent A[0,10]; a later top-level
    # range C[20,30] ends the table. The rows are not in start order although the last one starts last.
    forest = Forest.build(np.zeros(3, np.int64), np.array([2, 0, 20]), np.array([3, 10, 30]))
    names = np.array(list("BAC"))[forest.order]
    parent = {names[i]: (names[p] if p >= 0 else None) for i, p in enumerate(forest.parent)}
    assert parent == {"A": None, "B": "A", "C": None}


def test_union_by_group() -> None:
    group = np.array([0, 0, 0, 1, 1, -1])
    start = np.array([0, 5, 20, 0, 0, 0])
    end = np.array([10, 15, 30, 5, 5, 100])
    assert union_by_group(group, start, end, 3).tolist() == [25, 5, 0]


@pytest.mark.parametrize(("name", "op_type"), [
    ("aten::relu_", "relu"), ("aten::_foreach_add_", "_foreach_add"), ("torch.nn.functional.conv2d", "conv2d"),
    ("aten::__and__", "__and__"),
])
def test_normalise_op(name: str, op_type: str) -> None:
    assert normalise_op(name) == op_type


@pytest.mark.parametrize(("name", "node", "op_type"), [
    ("autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0", "convolution"),
    ("CudnnBatchNormBackward0", "CudnnBatchNormBackward0", "cudnn_batch_norm"),
    ("torch::autograd::AccumulateGrad", "AccumulateGrad", "accumulate_grad"),
    ("ScaledDotProductFlashAttentionBackward0", "ScaledDotProductFlashAttentionBackward0",
     "scaled_dot_product_flash_attention"),
])
def test_backward_names(name: str, node: str, op_type: str) -> None:
    assert backward_op(name) == (node, op_type)


def test_classify_marker_kinds() -> None:
    assert classify_name('{"model_config": {"emit_nvtx": true}}', False)["kind"] == 6  # IGNORE
    assert classify_name("{not a dict", False)["op_name"] == "{not a dict"  # plain range
    assert classify_name("Optimizer.step#SGD.step", True)["direction"] == ""
    assert classify_name("aten::mm", False)["direction"] == "fprop"
    assert classify_name("MmBackward0", True)["direction"] == "bprop"



def _spans(shortest: int) -> st.SearchStrategy[list[tuple[int, int, int]]]:
    """(thread, start, length) rows: few threads and times, so that spans tie and touch."""
    return st.lists(st.tuples(st.integers(0, 1), st.integers(0, 12), st.integers(shortest, 6)), min_size=1, max_size=12)


@settings(max_examples=300)
@given(_spans(0), _spans(1))  # (ranges of no length define nothing: find_ops leaves them out of the forest)
# Crossing ranges the forest's search misses one of: [10, 11] is inside [8, 13], which crosses [4, 9].
@example(calls=[(0, 8, 5), (0, 10, 1)], ranges=[(0, 4, 5), (0, 8, 5), (0, 6, 2), (0, 9, 1)])
def test_calls_outside_every_range_are_the_outermost_calls_no_range_encloses(calls, ranges) -> None:
    """`outside_every_range` looks for enclosing calls among the calls outside every range alone when the ranges
    nest (a call enclosing one that no range encloses is enclosed by none): the answer of the search among all
    calls, for nesting and crossing ranges alike. (Calls on threads with ranges: the process rule aside.)"""
    def frame(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
        tid, start, length = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
        return pd.DataFrame({"global_tid": tid, "start": start, "end": start + length})

    api, nvtx = frame(calls), frame(ranges)
    api = api[api["global_tid"].isin(nvtx["global_tid"])].reset_index(drop=True)
    forest = Forest.build(nvtx["global_tid"], nvtx["start"], nvtx["end"])
    assert forest.nested == (crossing_pairs(*(nvtx[c].to_numpy() for c in ("global_tid", "start", "end"))) == 0)
    api_range = forest.innermost(api["global_tid"].to_numpy(), api["start"].to_numpy(), api["end"].to_numpy())
    expected = (api_range < 0) & outermost_calls(api)
    assert (outside_every_range(forest, api, api_range) == expected).all()


@settings(max_examples=200)
@given(_spans(1))
def test_nested_ranges_cover_what_their_top_level_covers(ranges) -> None:
    """`outside_every_range` merges only the top-level ranges of a nested forest: the same union as all of them."""
    tid, start, length = (np.array(c, dtype=np.int64) for c in zip(*ranges, strict=True))
    forest = Forest.build(tid & 0, start, start + length)  # (one process: its threads' ranges together)
    if not forest.nested:
        return
    top = forest.depth == 0
    whole = intervals.merge(forest.start, forest.end)
    assert all((a == b).all() for a, b in zip(whole, intervals.merge(forest.start[top], forest.end[top]), strict=True))
