"""The host feeding the GPU: launch-bound steps and host synchronisation inside the step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..timeline import intervals
from .base import Finding, detector, iteration_list, ms, pct, plural, rate, require
from .facts import Facts

# Fewer GPU operations per iteration than this cannot add up to a launch problem, and CUDA
# graphs or fusion have little to remove.
LAUNCH_MIN_GPU_ROWS = 20
# GPU idle gaps shorter than this, waiting for the host to issue the next GPU row, are launch and
# framework overhead; longer ones are other host work (data, sync, Python logic). 100 us is
# Holistic Trace Analysis' launch_delay_cutoff.
LAUNCH_GAP_MAX_NS = 100_000
# Launch-bound when such gaps fill at least a fifth of the step: then graphs or fusion give a
# clearly measurable speed-up, and the GPU is far from its own limit.
LAUNCH_BOUND_MIN_SHARE = 0.2
# "Short" kernels: a PyTorch eager op costs roughly 10-50 us of host time (dispatch plus
# cudaLaunchKernel); a typical kernel shorter than that cannot hide the next op's host cost.
LAUNCH_SHORT_KERNEL_NS = 50_000

# Below this share of the iteration, a sync is not worth removing (noise level between steps).
SYNC_MIN_SHARE = 0.02


@detector("launch_bound")
def launch_bound(facts: Facts) -> list[Finding]:
    """Many short kernels with the GPU waiting between them for the host to issue the next one."""
    rows = facts.selected_rows
    kernels = facts.selected_kernels
    require(len(kernels) > 0, "GPU kernels in the aggregated iterations")
    require(bool((rows["api_start"].to_numpy() >= 0).any()), "CUDA API calls that launched the GPU work")
    iteration = rows["iteration"].to_numpy()
    per_iteration_rows = facts.typical(np.ones(len(rows)), iteration)
    short_wait = rows["host_wait"].to_numpy() & (rows["gap_before"].to_numpy() < LAUNCH_GAP_MAX_NS)
    waited = np.where(short_wait, rows["gap_before"].to_numpy(), 0)
    stake = facts.typical(waited, iteration)
    typical = facts.typical_iteration_ns
    kernel_median = float(np.median(kernels["dur"].to_numpy()))
    if (per_iteration_rows < LAUNCH_MIN_GPU_ROWS or stake < LAUNCH_BOUND_MIN_SHARE * typical
            or kernel_median >= LAUNCH_SHORT_KERNEL_NS):
        return []
    has_api = kernels["api_start"].to_numpy() >= 0
    api_median = float(np.median((kernels["api_end"] - kernels["api_start"]).to_numpy()[has_api]))
    per = facts.per_iteration(waited, iteration)
    durations = facts.breakdown["duration"].to_numpy(dtype=np.float64)
    frequent = (kernels["dur"].groupby(facts.short_ids(kernels), sort=False).agg(["size", "median"])
                .sort_values("size", ascending=False, kind="stable"))
    names = "; ".join(f"{facts.label_of(kernels, i)} (x{int(r['size'])}, median {ms(r['median'])})"
                      for i, r in frequent.iloc[:3].iterrows())
    advice, done = launch_advice(facts)
    return [Finding(
        detector="launch_bound",
        problem=(f"The step is launch bound: the GPU waits for the host between short operations for "
                 f"{pct(stake, typical)} of a typical iteration"),
        recommendation=advice,
        evidence=(f"per typical iteration: {per_iteration_rows:.0f} GPU operations, {ms(stake)} of GPU idle time in "
                  f"gaps shorter than {ms(LAUNCH_GAP_MAX_NS)} before an op whose launch call had not returned yet; "
                  f"median kernel {ms(kernel_median)}, median launch call {ms(api_median)} (iteration report: "
                  f"GPU Duration, API Call Time); {done}"),
        time_at_stake_ns=stake,
        estimate=("upper bound: median per-iteration GPU idle time in short gaps where the GPU waited for the "
                  "next launch; a CUDA graph issues the whole step at once and removes at most this"),
        iterations=iteration_list(facts.aggregated[per >= LAUNCH_BOUND_MIN_SHARE * durations]),
        kernels=names,
    )]


def launch_advice(facts: Facts) -> tuple[str, str]:
    """(recommendation, evidence) for a launch-bound step: only what the profile shows is not done yet.

    CUDA graphs are not advised to a run whose kernels are already launched by graphs, torch.compile
    not to one whose kernels are Triton kernels (Inductor), removing emit_nvtx only where the profile
    has emit_nvtx ranges; the evidence says what was checked.
    """
    graphed, kernels = facts.graph_launched
    triton, _ = facts.triton_kernels
    emit = facts.emit_nvtx_ranges
    steps = []
    if graphed < kernels / 2:
        steps.append("capture the step in a CUDA graph (torch.cuda.CUDAGraph"
                     + (")" if triton else " / torch.compile(mode='reduce-overhead'))"))
    else:
        steps.append("put more of the step into the CUDA graphs it already replays (work outside them still "
                     "pays a launch each)")
    if triton:
        steps.append("fuse more of the remaining small ops (fused optimizers: foreach=True / fused=True)")
    else:
        steps.append("fuse small ops (torch.compile, fused optimizers: foreach=True / fused=True)")
    steps.append("give each launch more work with a larger batch")
    advice = "Cut the number of launches and their host cost: " + ", ".join(steps[:-1]) + ", and " + steps[-1] + "."
    advice += (" Remove debugging hooks (autograd anomaly detection, emit_nvtx) when not profiling." if emit
               else " Remove debugging hooks (autograd anomaly detection) when not profiling.")
    done = (f"{graphed:,} of {kernels:,} kernels launched by CUDA graphs (cudaGraphLaunch); {triton:,} Triton kernels "
            f"(torch.compile/Inductor); {emit:,} emit_nvtx ranges")
    return advice, done


@detector("host_sync")
def host_sync(facts: Facts) -> list[Finding]:
    """cudaDeviceSynchronize / cudaStreamSynchronize / blocking copies inside the step."""
    require(len(facts.profile.runtime) > 0, "CUDA API calls (the export has no runtime API table)")
    require(len(facts.ctx.work) > 0, "GPU work")
    calls = facts.blocking_calls.sort_values("start", kind="stable")
    its = facts.iterations
    iteration = its.assign(calls["start"].to_numpy())
    chosen = its.in_selection(iteration)
    if not chosen.any():
        return []
    start = calls["start"].to_numpy()
    end = calls["end"].to_numpy()
    # After a wait the host has lost its lead: the GPU then waits for the host until it is ahead
    # again. Count that waiting up to the next blocking call (a sync at the end of a step starves
    # the start of the next one), at most to the end of the aggregated range.
    until = np.minimum(np.r_[start[1:], np.iinfo(np.int64).max], its.window[1])
    gaps_s, gaps_e = facts.host_wait_gaps
    starved = np.maximum(intervals.coverage(gaps_s, gaps_e, np.maximum(until, end))
                         - intervals.coverage(gaps_s, gaps_e, end), 0)
    blocked = end - start
    # Without the wait the host would have been `blocked` further ahead, so the GPU's waiting
    # afterwards shrinks by at most that much.
    saving = np.minimum(blocked, starved)
    calls, iteration, blocked, starved, saving = (calls[chosen], iteration[chosen], blocked[chosen],
                                                   starved[chosen], saving[chosen])
    stake = facts.typical(saving, iteration)
    typical = facts.typical_iteration_ns
    if stake < SYNC_MIN_SHARE * typical:
        return []
    names = facts.runtime_names.reindex(calls["name_id"].to_numpy()).fillna("(unnamed call)").to_numpy()
    n_iter = len(facts.aggregated)
    table = pd.DataFrame({"name": names, "blocked": blocked, "starved": starved}).groupby("name")
    listed = "; ".join(f"{name} {rate(len(g), n_iter)} (median wait {ms(float(np.median(g['blocked'])))}, "
                       f"then the GPU waits {ms(float(np.median(g['starved'])))} for new work)"
                       for name, g in sorted(table, key=lambda item: -float(item[1]["blocked"].sum())))
    per = facts.per_iteration(saving, iteration)
    durations = facts.breakdown["duration"].to_numpy(dtype=np.float64)
    return [Finding(
        detector="host_sync",
        problem=(f"The host waits for the GPU inside the step ({plural(len(calls), 'blocking call')} in "
                 f"{plural(n_iter, 'iteration')}), which empties the launch queue: the GPU then idles until the host "
                 "issues new work"),
        recommendation=("Keep the host ahead of the GPU: avoid .item(), .cpu(), .numpy(), print(tensor) and "
                        "torch.cuda.synchronize() in the step (accumulate losses/metrics on the GPU and read them "
                        "every N steps), copy results with non_blocking=True into pinned memory and wait on a CUDA "
                        "event only when the value is needed; torch.cuda.set_sync_debug_mode('warn') finds the calls."),
        evidence=f"{listed} (CUDA API calls of the launching thread in {facts.iterations_label})",
        time_at_stake_ns=stake,
        estimate=("per call, the smaller of the host's wait and the time the GPU then waits for the host (up to "
                  "the next blocking call or the iteration end): the host could have been that much further "
                  "ahead; median per-iteration sum"),
        iterations=iteration_list(facts.aggregated[per >= SYNC_MIN_SHARE * durations]),
    )]
