"""Detectors about the iteration split itself: key node not found, unsteady aggregated range."""

from __future__ import annotations

import numpy as np

from ..model import Iterations
from ..timeline.iterations import near_names
from .base import HIGH, Finding, detector, iteration_list, ms, plural, quoted, require
from .facts import Facts

# Fewer aggregated iterations than this give no median that could call the others outliers.
VARIATION_MIN_ITERATIONS = 4
# An iteration slower than this multiple of the median is an outlier. Steady steps in our
# recordings stay within 1.3x of their median (resnet: 1.16-1.26x, dataloader_bound: 1.26x),
# whereas start-up steps (library initialisation, allocator growth, cuDNN autotuning) take 2x
# to 1000x (no_emit_nvtx: 6x and 900x, cuda_graph: 5x).
VARIATION_OUTLIER_FACTOR = 1.5
# A proposed steady range keeps at least this many iterations, or it is not worth proposing.
VARIATION_MIN_STEADY = 3
# An iteration whose host-side time is this much shorter than its iteration time (which follows the
# GPU when the GPU lags) is one where the host ran ahead and filled the launch queue (the summary's
# note uses the same 10 %).
QUEUE_FILLING_SHARE = 0.10


@detector("key_node")
def key_node_not_found(facts: Facts) -> list[Finding]:
    """DLProf's no_iterations_detector: without a key node every figure covers the whole profile. A
    --key_node that matches no range is named with the range names closest to it (a typo is the usual
    cause). The report lists this finding first (``base.LEADING``): every other figure depends on it."""
    its = facts.iterations
    if its.found:
        return []
    n_ranges = len(facts.profile.nvtx)
    asked = facts.ctx.options.key_node
    near = near_names(facts.profile, asked) if asked else ()
    recommendation = ""
    if near:
        recommendation = (f"Check the spelling of --key_node={asked}: the closest range names in this profile are "
                          f"{quoted(near)} (--key_node={near[0]}). ")
    if its.candidates:
        recommendation += (f"Set --key_node to the NVTX range that encloses one training step. The most frequent "
                           f"top-level ranges in this profile are {quoted(its.candidates)}, e.g. "
                           f"--key_node={its.candidates[0]}; '*' matches numbered steps (--key_node='ProfilerStep#*').")
    else:
        recommendation += ("Wrap each training step in one NVTX range (torch.cuda.nvtx.range_push('train_step') / "
                           "range_pop(), or nvtx.annotate), record with 'nsys profile -t cuda,nvtx', then pass "
                           "--key_node=train_step.")
    wall = facts.profile.meta.end - facts.profile.meta.start
    return [Finding(
        detector="key_node",
        problem=f"Unable to split profile into training iterations: {its.reason}",
        recommendation=recommendation,
        evidence=(f"{n_ranges:,} NVTX ranges in the profile; the whole profile ({ms(wall)}) is aggregated as one "
                  "iteration 0, so per-iteration figures in every report cover start-up and tear-down too"),
        time_at_stake_ns=None,
        estimate="not estimated: without iterations there is no per-iteration time",
        iterations="0",
        severity=HIGH,
    )]


@detector("iteration_variation")
def iteration_variation(facts: Facts) -> list[Finding]:
    """Warm-up or outlier iterations in the aggregated range; proposes a steady range.

    Judged on the iteration times, which follow the GPU whenever it lags (each iteration ends with
    the GPU work launched in it: ``model.Iterations``): when the host runs ahead of the GPU, its
    first iterations only fill the launch queue (their host-side times are short, the GPU's are
    not), so host-side times would call the steady phase an outlier and propose the queue-filling
    phase as the steady range. A range that lies within the queue-filling phase is never proposed.
    """
    its = facts.iterations
    require(its.found, "iterations (the key node was not found)")
    durations = facts.breakdown["duration"].to_numpy(dtype=np.float64)
    numbers = facts.aggregated
    if len(durations) < VARIATION_MIN_ITERATIONS:
        return []
    median = float(np.median(durations))
    outlier = durations > VARIATION_OUTLIER_FACTOR * median
    if not outlier.any():
        return []
    # Leading and trailing outliers can be cut off with --iter_start/--iter_stop; others cannot.
    first = int(np.argmin(outlier))
    last = len(outlier) - 1 - int(np.argmin(outlier[::-1]))
    steady = slice(first, last + 1)
    inner = numbers[steady][outlier[steady]]
    if last - first + 1 < VARIATION_MIN_STEADY:
        return []
    filling = facts.cpu_side < (1.0 - QUEUE_FILLING_SHARE) * durations  # the host ran ahead: the queue filled
    if filling[steady].all() and not filling.all():  # not the steady state
        return []
    stake = float(durations.mean() - durations[steady].mean())
    slow = numbers[outlier]
    evidence = _variation_evidence(its, durations, numbers, outlier, steady, filling)
    recommendation = _steady_advice(numbers, steady, inner)
    return [Finding(
        detector="iteration_variation",
        problem=(f"The aggregated iteration range of {its.start} to {its.stop} contains a lot of variation: "
                 f"{plural(int(outlier.sum()), 'iteration')} take{'s' if outlier.sum() == 1 else ''} more than "
                 f"{VARIATION_OUTLIER_FACTOR}x the median"),
        recommendation=recommendation,
        evidence=evidence,
        time_at_stake_ns=stake,
        estimate=("mean aggregated iteration time minus the mean over the proposed range: how much the outliers "
                  "inflate every per-iteration average in the reports (a measurement error, not a speed-up)"),
        iterations=iteration_list(slow),
    )]


def _variation_evidence(its: Iterations, durations: np.ndarray, numbers: np.ndarray, outlier: np.ndarray,
                        steady: slice, filling: np.ndarray) -> str:
    """The iteration-variation finding's evidence: the median, the outliers, the means with and without them, and
    where the host ran ahead of the GPU."""
    median = float(np.median(durations))
    slow = numbers[outlier]
    took = (ms(durations[outlier].max()) if len(slow) == 1
            else f"{ms(durations[outlier].min())} to {ms(durations[outlier].max())}")
    evidence = (f"iteration times (each to the later of its key-node range's end and its GPU work's end: the GPU's "
                f"pace wherever the host ran ahead): median {ms(median)}; "
                f"iteration{'s' if len(slow) > 1 else ''} {iteration_list(slow)} take{'s' if len(slow) == 1 else ''} "
                f"{took} (more than {VARIATION_OUTLIER_FACTOR}x the median); mean over {its.start}-{its.stop}: "
                f"{ms(durations.mean())}, over {numbers[steady.start]}-{numbers[steady.stop - 1]}: "
                f"{ms(durations[steady].mean())} (summary: Average Iteration Time, Iteration Time Standard Deviation)")
    if filling.any():
        evidence += (f"; the host ran ahead of the GPU in iterations {iteration_list(numbers[filling])} (host-side "
                     "time more than 10% shorter than the iteration time: the launch queue filled)")
    return evidence


def _steady_advice(numbers: np.ndarray, steady: slice, inner: np.ndarray) -> str:
    """The recommendation: aggregate the `steady` iterations only, or, when outliers (`inner`) are surrounded
    by steady iterations, look for periodic work there."""
    first, last = steady.start, steady.stop - 1
    if first > 0 or last < len(numbers) - 1:
        cut = [f"{iteration_list(numbers[:first])} before it" if first > 0 else "",
               f"{iteration_list(numbers[last + 1:])} after it" if last < len(numbers) - 1 else ""]
        recommendation = (f"Aggregate the steady iterations only: --iter_start={numbers[first]} "
                          f"--iter_stop={numbers[last]}. This range was chosen on the iteration times, which follow "
                          "the GPU wherever the host ran ahead (the pace the step really runs at): it leaves out "
                          "iterations "
                          f"{' and '.join(c for c in cut if c)}, which take more than {VARIATION_OUTLIER_FACTOR}x "
                          f"the median. Early iterations include start-up work (CUDA context and library "
                          "initialisation, memory allocation, cuDNN autotuning) that later steps do not repeat.")
        if len(inner):
            recommendation += (f" Iterations {iteration_list(inner)} stay inside that range: look for periodic work "
                               "there (logging, checkpoints, evaluation, garbage collection).")
        return recommendation
    return (f"Iterations {iteration_list(inner)} are slow but surrounded by steady ones, so no "
            "iteration range excludes them: look for periodic work there (logging, checkpoints, "
            "evaluation, garbage collection) and compare them with a steady iteration in the "
            "iteration report.")
