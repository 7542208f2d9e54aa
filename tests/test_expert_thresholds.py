"""Each detector's threshold, just below and just above, on tiny hand-built exports.

Every case builds iterations of a fixed length T (NVTX ``train_step`` ranges back to back) and
places GPU work and host calls inside them so that the detector's measured figure lands 1-3%
either side of its named constant.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dlagg.context import RankContext
from dlagg.expert import iterations as it_rules
from dlagg.expert import launch, memory, precision, run_detectors, utilisation
from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.timeline.iterations import detect_iterations

from .builders import ExportBuilder

T = 1_000_000  # iteration length (ns)
N = 6  # iterations

Step = Callable[[ExportBuilder, int, int], None]  # (builder, iteration, iteration start)


def export(tmp_path: Path, step: Step, *, n: int = N, length: int = T, lengths: list[int] | None = None) -> Path:
    b = ExportBuilder()
    base = 0
    for i, size in enumerate(lengths or [length] * n):
        b.range(base, base + size, "train_step")
        step(b, i, base)
        base += size
    return b.write(tmp_path / f"run{len(list(tmp_path.glob('*.sqlite')))}.sqlite")


def detect(path: Path, key_node: str | None = None) -> dict[str, object]:
    profile = load_profile(path)
    iterations = detect_iterations(profile, key_node)
    found, _ = run_detectors(RankContext(profile, iterations, Options(nsys_database=path)))
    return {f.detector: f for f in found}


def one_kernel(duration: int) -> Step:
    def step(b: ExportBuilder, i: int, base: int) -> None:
        b.launch(base + 10, base + 50, base + 100, base + 100 + duration, "elementwise_kernel")
    return step


# ---- underutilized GPU: median share of the iteration with GPU work < 50% ----

@pytest.mark.parametrize(("busy", "fires"), [(0.49, True), (0.51, False)])
def test_underutilized_edge(tmp_path: Path, busy: float, fires: bool) -> None:
    assert utilisation.UNDERUTILIZED_MAX_BUSY == 0.5
    got = detect(export(tmp_path, one_kernel(int(busy * T))))
    assert ("underutilized_gpu" in got) == fires
    if fires:
        assert got["underutilized_gpu"].time_at_stake_ns == pytest.approx((1 - busy) * T, abs=1)
        assert got["underutilized_gpu"].problem.endswith("other")  # nothing annotated fills the idle time


# ---- input pipeline: data-loading ranges with no GPU work >= 5% of the iteration ----

@pytest.mark.parametrize(("share", "fires"), [(0.049, False), (0.051, True)])
def test_input_pipeline_edge(tmp_path: Path, share: float, fires: bool) -> None:
    assert utilisation.INPUT_MIN_SHARE == 0.05

    def step(b: ExportBuilder, i: int, base: int) -> None:
        b.range(base + 1000, base + 1000 + int(share * T), "data")
        b.launch(base + 900_000, base + 900_100, base + 900_200, base + 990_000, "elementwise_kernel")

    got = detect(export(tmp_path, step))
    assert ("input_pipeline" in got) == fires
    if fires:
        assert got["input_pipeline"].time_at_stake_ns == pytest.approx(share * T, abs=1)
        assert "'data' x6" in got["input_pipeline"].evidence


# ---- launch bound: short host-wait gaps >= 20% of the iteration, >= 20 ops, short kernels ----

def launches(count: int, gap: int, kernel: int = 1000) -> Step:
    """`count` kernels per iteration, each launched only after the previous one ended + `gap`."""
    def step(b: ExportBuilder, i: int, base: int) -> None:
        for j in range(count):  # a few dozen hand-built launches
            start = base + 1000 + j * (gap + kernel)
            b.launch(start - 500, start - 100, start, start + kernel, "vectorized_elementwise_kernel")
    return step


@pytest.mark.parametrize(("gap", "fires"), [(10_400, False), (10_600, True)])
def test_launch_bound_share_edge(tmp_path: Path, gap: int, fires: bool) -> None:
    # 19 gaps per iteration: 19 * 10,400 = 19.8% of T, 19 * 10,600 = 20.1%.
    assert launch.LAUNCH_BOUND_MIN_SHARE == 0.2 and launch.LAUNCH_MIN_GPU_ROWS == 20
    got = detect(export(tmp_path, launches(20, gap)))
    assert ("launch_bound" in got) == fires
    if fires:
        assert got["launch_bound"].time_at_stake_ns == pytest.approx(19 * gap)


def test_launch_bound_needs_enough_ops(tmp_path: Path) -> None:
    # 19 GPU rows with 18 gaps of 20 us = 36% of T, but fewer than LAUNCH_MIN_GPU_ROWS launches.
    assert "launch_bound" not in detect(export(tmp_path, launches(19, 20_000)))
    assert "launch_bound" in detect(export(tmp_path, launches(20, 20_000)))


def test_launch_bound_ignores_long_gaps_and_long_kernels(tmp_path: Path) -> None:
    # Gaps of 101 us are not launch overhead (HTA's launch-delay cutoff)...
    assert "launch_bound" not in detect(export(tmp_path, launches(20, 101_000), length=3_000_000))
    # ... and kernels of 50 us are not "short" even with 20 us gaps between them.
    assert "launch_bound" not in detect(export(tmp_path, launches(20, 20_000, kernel=50_000), length=2_000_000))


def test_launch_bound_silent_when_everything_is_queued_at_once(tmp_path: Path) -> None:
    """CUDA-graph-like: one call issues the step, kernels then run with gaps the host did not cause."""
    def step(b: ExportBuilder, i: int, base: int) -> None:
        corr = b.api(base + 10, base + 500, "cudaGraphLaunch_v10000")
        for j in range(30):
            start = base + 1000 + j * 20_000
            b.kernel(start, start + 1000, "vectorized_elementwise_kernel", corr=corr)

    assert "launch_bound" not in detect(export(tmp_path, step))


# ---- host sync: min(host wait, GPU starved afterwards) >= 2% of the iteration ----

def sync_step(blocked: int) -> Step:
    def step(b: ExportBuilder, i: int, base: int) -> None:
        sync_start = base + 2000
        sync_end = sync_start + blocked
        b.launch(base + 1000, base + 1500, base + 1600, sync_end - 200, "gemm_kernel")
        b.api(sync_start, sync_end, "cudaStreamSynchronize_v3020")
        # The next launch comes 50 us after the wait, which is longer than any `blocked` here.
        b.launch(sync_end + 49_000, sync_end + 49_800, sync_end + 50_000, sync_end + 60_000, "elementwise_kernel")
    return step


@pytest.mark.parametrize(("blocked", "fires"), [(19_000, False), (21_000, True)])
def test_host_sync_edge(tmp_path: Path, blocked: int, fires: bool) -> None:
    assert launch.SYNC_MIN_SHARE == 0.02
    got = detect(export(tmp_path, sync_step(blocked)))
    assert ("host_sync" in got) == fires
    if fires:
        assert got["host_sync"].time_at_stake_ns == pytest.approx(blocked)
        assert "cudaStreamSynchronize x1/iteration" in got["host_sync"].evidence


def test_host_sync_costs_little_when_the_host_refills_at_once(tmp_path: Path) -> None:
    def step(b: ExportBuilder, i: int, base: int) -> None:
        b.launch(base + 1000, base + 1500, base + 1600, base + 600_000, "gemm_kernel")
        b.api(base + 2500, base + 600_100, "cudaDeviceSynchronize_v3020")  # waits ~600 us ...
        # ... but the host issues the next kernel right away and it fills the rest of the step.
        b.launch(base + 600_200, base + 600_500, base + 600_600, base + 995_000, "gemm_kernel")

    got = detect(export(tmp_path, step))
    assert "host_sync" not in got


# ---- pageable copies (>= 1%) and pinned copies not overlapped with compute (>= 5%) ----

def copy_step(duration: int, src_kind: int, overlapped: bool = False) -> Step:
    def step(b: ExportBuilder, i: int, base: int) -> None:
        b.copy(base + 1000, base + 1000 + duration + 500, base + 1200, base + 1200 + duration, src_kind=src_kind,
               nbytes=1 << 20)
        k_start = base + 1200 if overlapped else base + 500_000
        b.launch(base + 900, base + 1100, k_start, k_start + max(duration, 10_000), "elementwise_kernel")
    return step


@pytest.mark.parametrize(("duration", "fires"), [(9_800, False), (10_200, True)])
def test_pageable_copies_edge(tmp_path: Path, duration: int, fires: bool) -> None:
    assert memory.PAGEABLE_MIN_SHARE == 0.01
    got = detect(export(tmp_path, copy_step(duration, src_kind=0)))
    assert ("pageable_copies" in got) == fires
    assert "exposed_copies" not in got  # pageable copies are the other detector's business
    if fires:
        assert got["pageable_copies"].time_at_stake_ns == pytest.approx(duration)
        assert "HtoD x1/iteration, 1.0 MiB/iteration" in got["pageable_copies"].evidence


def test_pageable_copies_overlapped_by_kernels_cost_nothing(tmp_path: Path) -> None:
    assert "pageable_copies" not in detect(export(tmp_path, copy_step(50_000, src_kind=0, overlapped=True)))


@pytest.mark.parametrize(("duration", "fires"), [(49_000, False), (51_000, True)])
def test_exposed_pinned_copies_edge(tmp_path: Path, duration: int, fires: bool) -> None:
    assert memory.EXPOSED_COPY_MIN_SHARE == 0.05
    got = detect(export(tmp_path, copy_step(duration, src_kind=1)))
    assert ("exposed_copies" in got) == fires
    assert "pageable_copies" not in got


# ---- AMP: eligible GPU time mostly not at reduced precision, saving measurable (>= 1 us) ----

FP32_GEMM = "ampere_sgemm_128x64_tn"  # eligible (GEMM), FP32 SIMT: no Tensor Cores
HALF_GEMM = "ampere_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn"  # Tensor Cores, FP16


def gemms(fp32: int, half: int) -> Step:
    """Kernels queued back to back at the start of the iteration (GPU-bound), then a tail kernel."""
    def step(b: ExportBuilder, i: int, base: int) -> None:
        t = base + 10_000
        for j, (name, duration) in enumerate(((FP32_GEMM, fp32), (HALF_GEMM, half), ("elementwise_kernel", 1000))):
            if duration:
                b.launch(base + 100 + 100 * j, base + 150 + 100 * j, t, t + duration, name)
                t += duration
    return step


@pytest.mark.parametrize(("half", "fires"), [(105_000, False), (95_000, True)])
def test_amp_share_edge(tmp_path: Path, half: int, fires: bool) -> None:
    # 100 us FP32 against 105 us FP16: 48.8% of eligible time in FP32; against 95 us: 51.3%.
    assert precision.AMP_MIN_SHARE == 0.5
    got = detect(export(tmp_path, gemms(100_000, half)))
    assert ("amp" in got) == fires
    if fires:
        assert got["amp"].time_at_stake_ns == pytest.approx(100_000 * (1 - 1 / precision.FP32_TO_TC_SPEEDUP))
        # the FP16 GEMM shows mixed precision is on: the advice is about the leftovers, not enabling AMP
        assert "already on" in got["amp"].recommendation and "Enable" not in got["amp"].recommendation
        assert "at 16 bits on Tensor Cores (mixed precision is on" in got["amp"].evidence


@pytest.mark.parametrize(("fp32", "fires"), [(740, False), (760, True)])
def test_amp_stake_edge(tmp_path: Path, fp32: int, fires: bool) -> None:
    # Saving = 2/3 of the FP32 time: 493 ns vs 507 ns against 500 ns, the least the report shows as
    # 0.001 ms (no share of the iteration: DLProf advised AMP to small FP32 models too; the severity
    # says how much it matters).
    assert precision.AMP_MIN_STAKE_NS == 500 and precision.FP32_TO_TC_SPEEDUP == 3.0
    got = detect(export(tmp_path, gemms(fp32, 0)))
    assert ("amp" in got) == fires
    if fires:
        assert got["amp"].severity == "low"  # 1 us of a 1 ms iteration
        assert "bfloat16" in got["amp"].recommendation  # the builder's GPU is compute capability 9.0


def test_amp_needs_tensor_cores_and_recommends_fp16_on_volta(tmp_path: Path) -> None:
    path = export(tmp_path, gemms(200_000, 0))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE TARGET_INFO_GPU SET computeMajor = 6")
    assert "amp" not in detect(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE TARGET_INFO_GPU SET computeMajor = 7")
    rec = detect(path)["amp"].recommendation
    assert "float16" in rec and "GradScaler" in rec and "bfloat16" not in rec


# ---- iteration variation: outliers > 1.5x the median; steady range proposed ----

@pytest.mark.parametrize(("factor", "fires"), [(1.49, False), (1.51, True)])
def test_iteration_variation_edge(tmp_path: Path, factor: float, fires: bool) -> None:
    assert it_rules.VARIATION_OUTLIER_FACTOR == 1.5
    lengths = [int(factor * T)] + [T] * 5
    got = detect(export(tmp_path, one_kernel(600_000), lengths=lengths))
    assert ("iteration_variation" in got) == fires
    if fires:
        finding = got["iteration_variation"]
        assert "--iter_start=1 --iter_stop=5" in finding.recommendation
        assert finding.iterations == "0"
        assert finding.time_at_stake_ns == pytest.approx((sum(lengths) / 6) - T, abs=1)


def test_iteration_variation_trailing_and_inner_outliers(tmp_path: Path) -> None:
    lengths = [T, T, 2 * T, T, T, T, 3 * T]
    finding = detect(export(tmp_path, one_kernel(600_000), lengths=lengths))["iteration_variation"]
    assert "--iter_start=0 --iter_stop=5" in finding.recommendation
    assert "Iterations 2 stay inside that range" in finding.recommendation
    assert finding.iterations == "2, 6"


def test_iteration_variation_needs_enough_iterations(tmp_path: Path) -> None:
    assert it_rules.VARIATION_MIN_ITERATIONS == 4
    assert "iteration_variation" not in detect(export(tmp_path, one_kernel(600_000), lengths=[5 * T, T, T]))


# ---- key node not found ----

def test_key_node_not_found_names_candidates(tmp_path: Path) -> None:
    got = detect(export(tmp_path, one_kernel(600_000)), key_node="global_step")
    finding = got["key_node"]
    assert finding.severity == "high" and finding.time_at_stake_ns is None
    assert "--key_node=train_step" in finding.recommendation
    assert "global_step" in finding.problem
    assert "iteration_variation" not in got


def test_key_node_found_is_silent(tmp_path: Path) -> None:
    assert "key_node" not in detect(export(tmp_path, one_kernel(600_000)))


def test_no_nvtx_at_all(tmp_path: Path) -> None:
    b = ExportBuilder()
    for i in range(5):
        b.launch(i * T + 10, i * T + 50, i * T + 100, i * T + 600_000, "elementwise_kernel")
    finding = detect(b.write(tmp_path / "run.sqlite"))["key_node"]
    assert "range_push" in finding.recommendation


# ---- dominant kernels: top 3 >= 50% of GPU time, their GPU-bound time >= 5% ----

def kernel_mix(small: int) -> Step:
    def step(b: ExportBuilder, i: int, base: int) -> None:
        t = base + 50_000
        names = ["big_a", "big_b", "big_c"] + [f"small_{k}" for k in range(small)]
        for j, name in enumerate(names):
            duration = 10_000 if name.startswith("big") else 1_000
            b.launch(base + 100 + 10 * j, base + 105 + 10 * j, t, t + duration, name)
            t += duration
    return step


@pytest.mark.parametrize(("small", "fires"), [(32, False), (28, True)])
def test_dominant_kernels_edge(tmp_path: Path, small: int, fires: bool) -> None:
    # 30 us of 3 big kernels against 32 us / 28 us of 1-us kernels: 48.4% / 51.7% of GPU time.
    assert utilisation.DOMINANT_SHARE == 0.5 and utilisation.DOMINANT_TOP == 3
    got = detect(export(tmp_path, kernel_mix(small), length=400_000))
    assert ("dominant_kernels" in got) == fires
    if fires:
        assert got["dominant_kernels"].kernels.startswith("big_")
        assert got["dominant_kernels"].time_at_stake_ns == pytest.approx(30_000)


# ---- dominant kernels: the advice fits the kernels it is about ----

GEMMS = ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", "nvjet_sm90_tst_64x128_64x8_2x1_v_bz_NTN",
         "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8")
CONVOLUTIONS = ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_execute_kernel",
                "sm90_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x64x32_execute_kernel",
                "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>")
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
               "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
               "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>")
CUDNN = ("cudnn.benchmark", "convolution")
GEMM = ("multiples of 8", "TF32", "bf16")
FUSION = ("fuse", "torch.compile")


def three_kernels(names: tuple[str, ...]) -> Step:
    def step(b: ExportBuilder, i: int, base: int) -> None:
        t = base + 50_000
        for j, name in enumerate(names):
            b.launch(base + 100 + 10 * j, base + 105 + 10 * j, t, t + 10_000 * (3 - j), name)
            t += 10_000 * (3 - j)
    return step


@pytest.mark.parametrize(("names", "fits", "misfits"), [
    (GEMMS, GEMM, (*CUDNN, *FUSION)),  # cuBLAS nvjet and CUTLASS GEMMs were told to set cudnn.benchmark
    (CONVOLUTIONS, CUDNN, ("TF32", *FUSION)),
    (ELEMENTWISE, FUSION, (*CUDNN, "TF32")),
    ((GEMMS[0], ELEMENTWISE[0], CONVOLUTIONS[0]), (*GEMM, *FUSION, *CUDNN, "kernel 1 above", "kernel 3 above"), ()),
])
def test_dominant_kernels_advice_fits_the_kernels(tmp_path: Path, names: tuple[str, ...], fits: tuple[str, ...],
                                                  misfits: tuple[str, ...]) -> None:
    finding = detect(export(tmp_path, three_kernels(names), length=400_000))["dominant_kernels"]
    advice = finding.recommendation
    assert all(text in advice for text in fits), advice
    assert not any(text in advice for text in misfits), advice
    assert "ncu -k" in advice
