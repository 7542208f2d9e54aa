"""Where the step's time goes at the coarsest level: GPU idle, data loading, dominant kernels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..classify import DATALOADER_RANGE, KernelFamily, kernel_family
from ..comm.collectives import comm_kernel_mask
from ..timeline.breakdown import CLASS_LABELS
from .base import MEDIUM_SHARE, Finding, detector, iteration_list, ms, pct, require
from .facts import Facts

# torch-tb-profiler recommends a larger batch when GPU utilization is below 50%; below that the
# GPU idles more than it works, which no kernel-level tuning can fix.
UNDERUTILIZED_MAX_BUSY = 0.5
# torch-tb-profiler's DataLoader rule: data loading above 5% of the step is worth moving off
# the critical path (it is usually cheap to hide with worker processes).
INPUT_MIN_SHARE = 0.05
# "A few kernels": as many as a user can study one by one in Nsight Compute.
DOMINANT_TOP = 3
# ... taking at least half the GPU time: then tuning those alone moves the GPU total.
DOMINANT_SHARE = 0.5
# Below this share of the iteration, faster kernels would not change the step measurably.
DOMINANT_MIN_STAKE = MEDIUM_SHARE

IDLE_CLASSES = {
    "dataloader": "dataloader",
    "io": "I/O",
    "cpu": "CPU",
    "other": "other",
}
IDLE_ADVICE = {
    "dataloader": ("Most idle time is spent loading data: investigate the input pipeline (see the input-pipeline "
                   "finding): worker processes, pinned memory, prefetching, or NVIDIA DALI."),
    "io": ("Most idle time is spent in file or socket I/O: take checkpoints, logging and data reads off the "
           "training step (background threads, asynchronous checkpointing, local copies of the data set)."),
    "cpu": ("Most idle time is host work (CUDA API calls and annotated CPU ranges): replace CPU ops with GPU "
            "ops, give each launch more work (larger batch, fused ops), and see the launch-bound and "
            "host-synchronisation findings."),
    "other": ("Most idle time is outside any CUDA call or annotated range (un-annotated Python work, data "
              "loading without an NVTX range, waiting on other processes): add NVTX ranges around data loading "
              "and other step phases, or profile with 'nsys profile -t cuda,nvtx,osrt' to see which."),
}


@detector("underutilized_gpu")
def underutilized_gpu(facts: Facts) -> list[Finding]:
    """DLProf's underutilized_gpu_detector: the summary's GPU Utilization %, and what fills the idle time."""
    require(len(facts.profile.kernels) > 0, "GPU kernels (the export has no CUDA kernel table)")
    bd = facts.breakdown
    duration = bd["duration"].to_numpy(dtype=np.float64)
    wall = float(duration.sum())
    busy = bd["gpu_busy"].to_numpy(dtype=np.float64)
    # The summary's GPU Utilization % (time with a kernel running, averaged over the GPUs: one figure,
    # one definition), of each iteration; the median decides, so warm-up steps do not.
    per_iteration = busy / np.maximum(duration, 1.0)
    utilization = float(np.median(per_iteration))
    overall = float(busy.sum()) / wall if wall else 0.0
    if utilization >= UNDERUTILIZED_MAX_BUSY:
        return []
    gpu = (bd["tc_kernel"] + bd["kernel"] + bd["memory"]).to_numpy(dtype=np.float64)
    typical = {name: float(np.median(bd[name].to_numpy())) for name in IDLE_CLASSES}
    largest = max(typical, key=lambda name: typical[name])
    idle = float(np.median(duration - gpu))
    low = facts.aggregated[per_iteration < UNDERUTILIZED_MAX_BUSY]
    by_size = sorted(typical, key=lambda name: typical[name], reverse=True)
    parts = ", ".join(f"{IDLE_CLASSES[n]} {ms(typical[n])}" for n in by_size)
    summary = ", ".join(f"{CLASS_LABELS[n].removesuffix(' %')} {pct(bd[n].sum(), wall)}" for n in IDLE_CLASSES)
    return [Finding(
        detector="underutilized_gpu",
        problem=(f"The GPU is underutilized: GPU Utilization is {overall:.1%} (the summary's figure: share of the "
                 f"time a kernel runs{_over_gpus(facts)}), {utilization:.1%} in a typical iteration; the largest part "
                 f"of the time without GPU work is {IDLE_CLASSES[largest]}"),
        recommendation=IDLE_ADVICE[largest],
        evidence=(f"GPU Utilization of the median iteration {utilization:.1%}; summary over {facts.iterations_label}: "
                  f"GPU Utilization {overall:.1%}, {summary}; "
                  f"median iteration {ms(float(np.median(duration)))}: kernels or copies running "
                  f"{ms(float(np.median(gpu)))}, neither running {ms(idle)} ({parts})"),
        time_at_stake_ns=idle,
        estimate=("upper bound: median time per iteration with no kernel or copy running; a step cannot get "
                  "shorter than its GPU work"),
        iterations=iteration_list(low),
    )]


def _over_gpus(facts: Facts) -> str:
    """How the figure combines a rank's GPUs: said only where it has several."""
    gpus = len(np.unique(facts.ctx.work["device_id"].to_numpy()))
    return f", averaged over its {gpus} GPUs" if gpus > 1 else ""


@detector("input_pipeline")
def input_pipeline(facts: Facts) -> list[Finding]:
    """DLProf's dataloader_detector: data-loading ranges while the GPU is idle."""
    require(len(facts.profile.kernels) > 0, "GPU kernels (the export has no CUDA kernel table)")
    rng = facts.profile.nvtx
    loader_ids = facts.profile.strings.ids_matching(DATALOADER_RANGE)
    loader = rng[np.isin(rng["text_id"].to_numpy(), loader_ids)]
    require(len(loader) > 0, "data-loading NVTX ranges (none named like data, dataloader, DataLoader, DALI)")
    bd = facts.breakdown
    duration = bd["duration"].to_numpy(dtype=np.float64)
    exposed = bd["dataloader"].to_numpy(dtype=np.float64)
    share = exposed / np.maximum(duration, 1.0)
    typical_share = float(np.median(share))
    if typical_share < INPUT_MIN_SHARE:
        return []
    typical_exposed = float(np.median(exposed))
    rest = max(float(np.median(duration)) - typical_exposed, 1.0)
    # Workers load batches in parallel; each needs `exposed` per batch while the step needs `rest`.
    workers = int(np.ceil(typical_exposed / rest))
    its = facts.iterations
    in_range = loader[its.in_selection(its.assign(loader["start"].to_numpy()))]
    ids = in_range["text_id"].value_counts()
    texts = facts.profile.strings.decode(pd.Series(ids.index)).to_numpy()
    counts = ids.groupby(texts).sum().sort_values(ascending=False)
    named = ", ".join(f"'{n}' x{c}" for n, c in counts.items())
    dali = any("dali" in str(n).lower() for n in counts.index)
    # DLProf said "No DALI ops detected" for every run without DALI. For PyTorch that is advice
    # only where loading is exposed (this finding): DataLoader workers fix most input pipelines, and
    # DALI pays off for decoding and augmentation heavy ones, so it is named as the next step here.
    recommendation = (f"Load and preprocess batches in background workers so the GPU never waits: "
                      f"DataLoader(num_workers>={workers}, pin_memory=True, persistent_workers=True, "
                      "prefetch_factor=2 or more); move per-sample augmentation to the GPU")
    recommendation += ("; the DALI pipeline's own stages are in the dataloader ranges named above." if dali else
                       "; if decoding and augmentation stay too slow, NVIDIA DALI runs them on the GPU (no DALI "
                       "ranges were found).")
    wall = float(duration.sum())
    return [Finding(
        detector="input_pipeline",
        problem=(f"{typical_share:.1%} of a typical iteration is spent in the dataloader while not simultaneously "
                 "running on the GPU"),
        recommendation=recommendation,
        evidence=(f"median iteration {ms(float(np.median(duration)))}: {ms(typical_exposed)} in data-loading ranges "
                  f"with no GPU work; ranges {named} in {facts.iterations_label}; summary: Dataloader "
                  f"Duration {pct(bd['dataloader'].sum(), wall)}; {workers} worker(s) = loading time / rest of the "
                  "step"),
        time_at_stake_ns=typical_exposed,
        estimate=("upper bound: median data-loading time per iteration during which no GPU work ran; enough "
                  "background workers hide all of it"),
        iterations=iteration_list(facts.aggregated[share >= INPUT_MIN_SHARE]),
    )]


def kernel_advice(facts: Facts, top: pd.DataFrame, top_ids: pd.Index) -> list[str]:
    """Advice that fits the top kernels, one step per kernel family (classify.KERNEL_FAMILIES) naming which of the
    kernels it is for: cudnn.benchmark for cuDNN convolutions, shapes and precision for GEMMs, fusion for elementwise
    kernels (so that nvjet GEMMs are not told to set cudnn.benchmark)."""
    first = pd.Series(top["name_id"].to_numpy(), index=facts.short_ids(top)).groupby(level=0, sort=False).first()
    families: dict[KernelFamily, list[int]] = {}
    for place, short_id in enumerate(top_ids, start=1):  # three kernels at most
        family = kernel_family(f"{facts.kernel_names.get(first[short_id], '')} {facts.label_of(top, short_id)}")
        if family is not None:
            families.setdefault(family, []).append(place)
    steps = []
    for family, places in families.items():
        which = ("" if len(places) == len(top_ids) else  # (of three kernels, two at most: "1 and 3")
                 f" (kernel{'s' if len(places) > 1 else ''} {' and '.join(map(str, places))} above)")
        steps.append(f"{family.name}{which}: {family.advice}")
    return steps


@detector("dominant_kernels")
def dominant_kernels(facts: Facts) -> list[Finding]:
    """A few kernels take most of the GPU time: say which, with their share of the GPU time and of the
    wall clock (a synchronous run whose time is one kernel is all that kernel)."""
    kernels = facts.selected_kernels
    require(len(kernels) > 0, "GPU kernels in the aggregated iterations")
    # Communication kernels spend their time moving data and waiting for other ranks: the
    # communication finding speaks for them (Tensor Cores or cuDNN settings do nothing for NCCL).
    kernels = kernels[~comm_kernel_mask(facts.ctx, kernels)]
    if kernels.empty:
        return []
    text, time = facts.top_kernels(kernels, limit=DOMINANT_TOP)
    total = float(time.sum())
    top_ids = time.index[:DOMINANT_TOP]
    share = float(time.iloc[:DOMINANT_TOP].sum()) / total if total else 0.0
    if share < DOMINANT_SHARE:
        return []
    top = kernels[np.isin(facts.short_ids(kernels), top_ids)]
    stake = facts.gpu_bound_ns(top)
    if stake < DOMINANT_MIN_STAKE * facts.typical_iteration_ns:
        return []
    wall = float(facts.breakdown["duration"].to_numpy(dtype=np.float64).sum())
    top_time = float(time.iloc[:DOMINANT_TOP].sum())
    on_wall = [f"{facts.label_of(top, i)} {pct(t, wall)}" for i, t in time.iloc[:DOMINANT_TOP].items()]
    ops = facts.ops_of(top)
    short = text.split("; and ")[0]
    tc_rows = pd.Series(facts.ctx.uses_tc(top["name_id"].to_numpy()), index=facts.short_ids(top))
    uses_tc = tc_rows.groupby(level=0).any().to_numpy(dtype=bool)
    steps = [*kernel_advice(facts, top, top_ids), "profile them with Nsight Compute (ncu -k <name>)"]
    return [Finding(
        detector="dominant_kernels",
        problem=(f"{len(top_ids)} kernel(s) take {share:.1%} of the GPU time and {pct(top_time, wall)} of the wall "
                 f"clock: {short}"),
        recommendation="Optimise these first: " + "; ".join(steps) + ".",
        evidence=(f"kernel report over {facts.iterations_label}: {short} of the GPU time; of the wall clock "
                  f"({ms(wall)}, summary): {'; '.join(on_wall)}; {ms(total / len(facts.aggregated))} of kernel time "
                  f"per iteration on average, {ms(stake)} of the top kernels' time per typical iteration on the "
                  f"critical path (more GPU work queued behind them, or the host waiting for them); "
                  f"{int(uses_tc.sum())} of them use Tensor Cores"),
        time_at_stake_ns=stake,
        estimate=("upper bound: median per-iteration GPU time of these kernels while more GPU work was queued or the "
                  "host waited for them (only that part lies on the step's critical path); a 2x faster kernel "
                  "saves half of it"),
        iterations=facts.iteration_text,
        ops=ops,
        kernels=text,
    )]
