"""Property tests: generated exports, valid and damaged, through the command line (tests/exports.py).

On every example: kernel totals per name equal a direct SQL sum over the rows the reader must keep;
the iterations partition the aggregated window; every percentage lies in [0, 100]; the summary's
duration rows add up to 100 %; no time at stake exceeds the longest iteration; and the run never
ends in an internal error (exit 3). The checks read the written JSON files and the export
(tests/invariants.py); on a share of the damaged examples every format is written and checked too:
the CSV files (percentages in [0, 100], the summary's figures equal to the JSON's), the HTML page
(whole, no impossible percentage) and the TensorBoard event files (they parse, finite scalars).
The default run draws a few hundred examples, the same ones every run;
``pytest -m slow`` draws many more, new ones every run (the figures of the last run are in the closing
note).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlagg.cli import main

from .exports import KEY_NODE, Damage, GeneratedExport, apply, damages, exports
from .invariants import check_run, csv_problems, html_problems, load_reports, sql_expected, tensorboard_problems

# Examples per test in the default run (both together take about two minutes on two cores) and in
# the slow run.
VALID_EXAMPLES = 120
DAMAGED_EXAMPLES = 125
EVERY_FORMAT_EXAMPLES = 25  # writing every format costs more per example: fewer, so the run takes as long
SLOW_EXAMPLES = 2_000
COMMON = dict(deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# The default run draws the same examples every time (a gate that passes or fails the same way on every
# machine); the slow run draws new ones every time, to find what those miss.
DEFAULT_RUN = dict(COMMON, derandomize=True)
REPORTS = "summary,kernel,iteration,expert_systems"


def run_and_check(export: GeneratedExport, damage: list | None = None, capsys=None,  # noqa: ANN001
                  every_format: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = export.write(Path(tmp) / "generated.sqlite")
        if damage:
            apply(db, export, damage)
        out = Path(tmp) / "out"
        formats = ["--formats=csv,json,html"] if every_format else ["--formats=json", "-b"]
        code = main([f"--nsys_database={db}", f"--reports={REPORTS}", *formats, "-v", "quiet",
                     f"--output_path={out}", f"--key_node={KEY_NODE}"])
        assert code in (0, 1), f"exit {code}: an internal error"
        if code == 1:  # a clear refusal is allowed only for damage that leaves nothing to report
            assert damage, "a valid export was refused"
            return
        expected = sql_expected(db, KEY_NODE)
        problems = check_run(out, expected)
        if every_format:
            problems += csv_problems(out, load_reports(out)) + html_problems(out) + tensorboard_problems(out)
        assert not problems, problems
        if expected.kernels:
            assert (out / "dlagg_kernel.json").exists(), "kernels in the window but no kernel report"


@pytest.mark.property
@settings(max_examples=VALID_EXAMPLES, **DEFAULT_RUN)
@given(export=exports())
def test_valid_exports_satisfy_every_invariant(export: GeneratedExport) -> None:
    run_and_check(export)


@pytest.mark.property
@settings(max_examples=DAMAGED_EXAMPLES, **DEFAULT_RUN)
@given(data=st.data())
def test_damaged_exports_satisfy_every_invariant(data: st.DataObject) -> None:
    export = data.draw(exports())
    run_and_check(export, data.draw(damages(export)))


@pytest.mark.property
@settings(max_examples=EVERY_FORMAT_EXAMPLES, **DEFAULT_RUN)
@given(data=st.data())
def test_damaged_exports_satisfy_every_invariant_in_every_format(data: st.DataObject) -> None:
    export = data.draw(exports())
    run_and_check(export, data.draw(damages(export)), every_format=True)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(export=exports())
def test_valid_exports_satisfy_every_invariant_slow(export: GeneratedExport) -> None:
    run_and_check(export)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(data=st.data())
def test_damaged_exports_satisfy_every_invariant_slow(data: st.DataObject) -> None:
    export = data.draw(exports())
    run_and_check(export, data.draw(damages(export)))


# Found by the slow run: one process's only GPU work ends after the stated session. It is damage for
# the whole file (the statement is trusted: few events end after it), so that process is no rank and
# the file is read as one (each rank of a file decides the session bound on the whole file).
LATE_RANK = GeneratedExport(
    kernels=[(1148, 1148, 0, 1, 10000, 100, 'volta_h884gemm_64x64_ldg8_nn'),
     (517, 545, 0, 2, 1, 100, 'volta_h884gemm_64x64_ldg8_nn'),
     (652, 750, 0, 2, 1, 101, 'volta_h884gemm_64x64_ldg8_nn'),
     (1543, 1578, 0, 2, 2, 100, 'volta_h884gemm_64x64_ldg8_nn'),
     (2049, 2089, 0, 2, 3, 100, 'elementwise_kernel'), (1619, 1739, 0, 3, 4, 100, 'vectorized_copy'),
     (3974, 3979, 0, 1, 10002, 100, 'cutlass_tensorop_s1688gemm'),
     (3295, 3322, 0, 3, 5, 100, 'reduce_kernel'), (3979, 4099, 0, 1, 6, 100, 'ffma_sgemm_kernel'),
     (4148, 4218, 1, 3, 7, 100, 'sm80_xmma_fprop_tensorop')],
    runtime=[(505, 537, 100, 102, 1, 'cudaLaunchKernel_v7000'), (652, 677, 101, 7, 1, 'cudaLaunchKernel_v7000'),
     (1543, 1569, 100, 100, 2, 'cudaLaunchKernel_v7000'),
     (1577, 1590, 100, 100, 3, 'cudaLaunchKernel_v7000'),
     (1598, 1605, 100, 100, 4, 'cudaLaunchKernel_v7000'),
     (2895, 2916, 100, 100, 5, 'cudaLaunchKernel_v7000'),
     (3128, 3152, 100, 100, 6, 'cudaLaunchKernel_v7000'),
     (3195, 3197, 100, 100, 7, 'cudaLaunchKernel_v7000')],
    memcpy=[],
    memset=[],
    nvtx=[(-749891, None, 75, 100, 100, None, 'Dom', 1), (498, 520, 60, 100, 102, None, 'aten::conv2d', 0),
     (685, 1027, 59, 100, 100, None, 'aten::conv2d', 0),
     (1119, 1122, 59, 100, 100, None, 'aten::conv2d', 0),
     (1145, 1145, 59, 100, 100, None, 'aten::conv2d', 0),
     (1117, 1146, 59, 100, 100, None, 'aten::conv2d', 0),
     (1283, 1283, 59, 100, 100, None, 'aten::conv2d', 0),
     (364, 1284, 59, 100, 100, None, 'train_step', 0),
     (1382, 1438, 59, 100, 100, None, 'aten::conv2d', 0),
     (1377, 1453, 59, 100, 100, None, 'aten::conv2d', 0),
     (1542, 1563, 59, 100, 100, None, 'optimizer', 0), (1575, 1579, 59, 100, 100, None, 'aten::add', 0),
     (1598, 1600, 59, 100, 100, None, 'aten::conv2d', 0),
     (1497, 1602, 59, 100, 100, None, 'aten::relu', 0),
     (1313, 1873, 59, 100, 100, None, 'train_step', 0), (1313, 2000, 60, 100, 101, 100, 'loss', 0),
     (1863, 2073, 60, 100, 101, 101, 'backward', 0),
     (2096, 2150, 59, 100, 100, None, 'aten::batch_norm, seq = 12', 0),
     (2155, 2780, 60, 100, 102, None, 'backward', 0), (2546, 2843, 59, 100, 100, None, 'data', 0),
     (2894, 2895, 59, 100, 100, None, 'aten::linear', 0),
     (1990, 2896, 59, 100, 100, None, 'train_step', 0)],
    osrt=[],
    devices=(0, 1, 2),
    meta_table='EXPORT_META_DATA',
    text_mode='text',
    dropped={'CUPTI_ACTIVITY_KIND_KERNEL': ('shortName', 'gridY'),
     'CUPTI_ACTIVITY_KIND_MEMCPY': ('dstKind', 'srcKind'),
     'CUPTI_ACTIVITY_KIND_RUNTIME': (),
     'NVTX_EVENTS': ('endGlobalTid', 'rangeId', 'domainId')},
    tables=frozenset({'nvtx', 'runtime'}),
    session=5049,
)
LATE_RANK_DAMAGE = [
    Damage(kind='late', table='CUPTI_ACTIVITY_KIND_KERNEL', column='end', rows=2),
    Damage(kind='late', table='CUPTI_ACTIVITY_KIND_KERNEL', column='end', rows=3),
    Damage(kind='reversed', table='CUPTI_ACTIVITY_KIND_KERNEL', column='end', rows=2),
]


def test_a_process_whose_gpu_work_all_ends_after_the_session_is_no_rank() -> None:
    run_and_check(LATE_RANK, LATE_RANK_DAMAGE)


# Found by the default run: a start column holding reals and text. The driver types it as text and
# gives the reals as their decimal text ('934.5'); a time with a fraction is damage there as in a column
# of reals (the row is dropped and counted).
REALS_AMONG_TEXT = GeneratedExport(
    kernels=[(934, 934, 0, 1, 10000, 100, 'volta_h884gemm_64x64_ldg8_nn'),
     (1503, 1503, 0, 1, 10000, 101, 'volta_h884gemm_64x64_ldg8_nn'),
     (1553, 1553, 0, 1, 10000, 100, 'volta_h884gemm_64x64_ldg8_nn')],
    runtime=[],
    memcpy=[(1503, 1503, 0, 1, 10000, 101, 0, 1)],
    memset=[],
    nvtx=[(-1, None, 75, 100, 100, None, 'Dom', 1), (814, 934, 60, 100, 101, None, 'aten::conv2d', 0),
     (814, 1503, 59, 100, 100, None, 'train_step', 0),
     (1503, 1553, 59, 100, 100, None, 'train_step', 0),
     (1553, 1553, 60, 100, 101, None, 'aten::conv2d', 0),
     (1553, 1603, 59, 100, 100, None, 'train_step', 0)],
    osrt=[(814, 814, 100, 100, 'read')],
    devices=(0, 1),
    meta_table='EXPORT_META_DATA',
    text_mode='text',
    dropped={'CUPTI_ACTIVITY_KIND_KERNEL': (),
     'CUPTI_ACTIVITY_KIND_MEMCPY': (),
     'CUPTI_ACTIVITY_KIND_RUNTIME': (),
     'NVTX_EVENTS': ()},
    tables=frozenset({'osrt', 'memset', 'memcpy', 'nvtx'}),
    session=0,
)
REALS_AMONG_TEXT_DAMAGE = [
    Damage(kind='real', table='CUPTI_ACTIVITY_KIND_KERNEL', column='start', rows=1),
    Damage(kind='text', table='CUPTI_ACTIVITY_KIND_KERNEL', column='start', rows=2),
]


def test_reals_with_a_fraction_among_text_are_dropped() -> None:
    run_and_check(REALS_AMONG_TEXT, REALS_AMONG_TEXT_DAMAGE)


# Found by the slow run: the damage leaves one rank of a file an empty window (its GPU rows dropped);
# the job's duration shares average only the ranks with a window, so they still add up to 100 %.
EMPTY_RANK = GeneratedExport(
    kernels=[(0, 0, 0, 1, 10000, 100, 'volta_h884gemm_64x64_ldg8_nn'),
     (0, 0, 0, 1, 10000, 100, 'volta_h884gemm_64x64_ldg8_nn'),
     (0, 0, 0, 1, 10000, 101, 'volta_h884gemm_64x64_ldg8_nn')],
    runtime=[],
    memcpy=[],
    memset=[],
    nvtx=[(0, 50, 59, 100, 100, None, 'train_step', 0)],
    osrt=[],
    devices=(0,),
    meta_table='EXPORT_META_DATA',
    text_mode='text',
    dropped={'CUPTI_ACTIVITY_KIND_KERNEL': (),
     'CUPTI_ACTIVITY_KIND_MEMCPY': (),
     'CUPTI_ACTIVITY_KIND_RUNTIME': (),
     'NVTX_EVENTS': ()},
    tables=frozenset({'nvtx'}),
    session=0,
)
EMPTY_RANK_DAMAGE = [
    Damage(kind='text', table='CUPTI_ACTIVITY_KIND_KERNEL', column='start', rows=2),
]


def test_a_rank_with_an_empty_window_has_no_shares_to_average() -> None:
    run_and_check(EMPTY_RANK, EMPTY_RANK_DAMAGE)


# Zero-length host-blocking calls: synchronising calls with end == start on threads that launch work,
# every blocking call of a process among them. They blocked the host for no time: no figure changes shape, and the
# run never ends in an internal error (expert/facts.py indexed the empty union of a process's blocking calls).
SYNC_CALLS = ("cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_v3020", "cudaEventSynchronize_v3020")
ZERO_LENGTH_EXAMPLES = 40


@pytest.mark.property
@settings(max_examples=ZERO_LENGTH_EXAMPLES, **DEFAULT_RUN)
@given(data=st.data())
def test_zero_length_blocking_calls_satisfy_every_invariant(data: st.DataObject) -> None:
    from hypothesis import assume

    export = data.draw(exports())
    assume("runtime" in export.tables and export.runtime)
    calls = data.draw(st.lists(st.sampled_from(list(export.runtime)), min_size=1, max_size=6))
    for k, (start, end, pid, tid, _, _) in enumerate(calls):
        at = data.draw(st.integers(start, end + 500))
        export.runtime.append((at, at, pid, tid, 900_000 + k, data.draw(st.sampled_from(SYNC_CALLS))))
    run_and_check(export)
