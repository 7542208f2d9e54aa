"""Host<->device copies: pageable host memory, and copy time the GPU spends not computing."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..reader.schema import DTOH, HTOD, MEM_KIND_PAGEABLE, MEM_KIND_PINNED
from ..timeline import intervals
from ..timeline.correlate import KERNEL, MEMCPY
from .base import Finding, detector, iteration_list, ms, pct, rate, require, size
from .facts import Facts

# Pageable copies are cheap to fix (pin_memory=True), so they are flagged from 1% of the step.
PAGEABLE_MIN_SHARE = 0.01
# Copies from pinned memory that still stall compute: flagged from 5% of the step, the level
# where overlapping them (side stream, prefetch) is worth the added code.
EXPOSED_COPY_MIN_SHARE = 0.05


def _host_copies(facts: Facts) -> pd.DataFrame:
    """H2D and D2H copies of the aggregated iterations, with host memory kind and exposed time."""
    rows = facts.selected_rows
    copies = rows[rows["kind"].to_numpy() == MEMCPY]
    rows = facts.profile.memcpy.iloc[copies["row"].to_numpy()]
    kind = rows["copy_kind"].to_numpy()
    host_kind = np.where(kind == HTOD, rows["src_kind"].to_numpy(), rows["dst_kind"].to_numpy())
    out = copies.assign(copy_kind=kind, host_kind=host_kind, bytes=rows["bytes"].to_numpy())
    out = out[np.isin(kind, (HTOD, DTOH))]
    # Time not overlapped by any kernel on the same device.
    exposed = out["dur"].to_numpy().copy()
    work = facts.ctx.work
    for device in np.unique(out["device_id"].to_numpy()):  # a handful of GPUs
        on = (work["device_id"].to_numpy() == device) & (work["kind"].to_numpy() == KERNEL)
        ks, ke = intervals.merge(work["start"].to_numpy()[on], work["end"].to_numpy()[on])
        here = out["device_id"].to_numpy() == device
        covered = (intervals.coverage(ks, ke, out["end"].to_numpy()[here])
                   - intervals.coverage(ks, ke, out["start"].to_numpy()[here]))
        exposed[here] -= covered
    return out.assign(exposed=exposed)


def _bandwidth(copies: pd.DataFrame) -> str:
    seconds = copies["dur"].sum() / 1e9
    return f"{copies['bytes'].sum() / seconds / 1e9:.1f} GB/s" if seconds > 0 else "n/a"


def _describe(copies: pd.DataFrame, n_iter: int) -> str:
    parts = []
    for kind, label in ((HTOD, "HtoD"), (DTOH, "DtoH")):
        mine = copies[copies["copy_kind"].to_numpy() == kind]
        if len(mine):
            parts.append(f"{label} {rate(len(mine), n_iter)}, {size(mine['bytes'].sum() / n_iter)}/iteration at "
                         f"{_bandwidth(mine)}")
    return "; ".join(parts)


def _exposed(facts: Facts, host_kind: int, min_share: float) -> tuple[pd.DataFrame, pd.DataFrame, float, str] | None:
    """(every host copy, those from or to `host_kind` memory, their typical per-iteration time not overlapped by
    kernels, the iterations where that time is at least `min_share` of the iteration), or None when the typical
    time is below `min_share` of a typical iteration (or there is no such copy)."""
    require(len(facts.profile.memcpy) > 0, "CUDA memcpy records")
    require(bool((facts.profile.memcpy["src_kind"].to_numpy() >= 0).any()), "memcpy source/destination memory kinds")
    copies = _host_copies(facts)
    mine = copies[copies["host_kind"].to_numpy() == host_kind]
    if mine.empty:
        return None
    iteration = mine["iteration"].to_numpy()
    stake = facts.typical(mine["exposed"].to_numpy(), iteration)
    if stake < min_share * facts.typical_iteration_ns:
        return None
    per = facts.per_iteration(mine["exposed"].to_numpy(), iteration)
    durations = facts.breakdown["duration"].to_numpy(dtype=np.float64)
    return copies, mine, stake, iteration_list(facts.aggregated[per >= min_share * durations])


@detector("pageable_copies")
def pageable_copies(facts: Facts) -> list[Finding]:
    """H2D/D2H copies from or to pageable host memory (staged by the driver, never asynchronous)."""
    found = _exposed(facts, MEM_KIND_PAGEABLE, PAGEABLE_MIN_SHARE)
    if found is None:
        return []
    copies, pageable, stake, slow = found
    typical = facts.typical_iteration_ns
    n_iter = len(facts.aggregated)
    pinned = copies[copies["host_kind"].to_numpy() == MEM_KIND_PINNED]
    evidence = (f"pageable: {_describe(pageable, n_iter)}; {ms(stake)} per typical iteration not overlapped by "
                "kernels (kernel report: [CUDA memcpy HtoD/DtoH])")
    if len(pinned):
        evidence += f"; pinned copies in the same iterations: {_describe(pinned, n_iter)}"
    return [Finding(
        detector="pageable_copies",
        problem=(f"Host-device copies use pageable host memory ({rate(len(pageable), n_iter)}): the "
                 f"driver stages them through a bounce buffer, blocks the host and cannot overlap them with compute "
                 f"({pct(stake, typical)} of a typical iteration)"),
        recommendation=("Allocate host buffers in pinned memory (DataLoader(pin_memory=True), tensor.pin_memory(), "
                        "cudaHostAlloc/cudaMallocHost) and copy with non_blocking=True (cudaMemcpyAsync on a "
                        "non-default stream) so copies run at full bandwidth alongside kernels."),
        evidence=evidence,
        time_at_stake_ns=stake,
        estimate=("upper bound: median per-iteration time of the pageable copies not overlapped by any kernel; "
                  "asynchronous pinned copies can hide all of it behind compute"),
        iterations=slow,
        kernels=", ".join(sorted({"[CUDA memcpy HtoD]" if k == HTOD else "[CUDA memcpy DtoH]"
                                  for k in pageable["copy_kind"].to_numpy()})),
    )]


@detector("exposed_copies")
def exposed_copies(facts: Facts) -> list[Finding]:
    """Copies from pinned memory that still run while no kernel does (not overlapped with compute)."""
    found = _exposed(facts, MEM_KIND_PINNED, EXPOSED_COPY_MIN_SHARE)
    if found is None:
        return []
    _, pinned, stake, slow = found
    typical = facts.typical_iteration_ns
    n_iter = len(facts.aggregated)
    return [Finding(
        detector="exposed_copies",
        problem=(f"Copies from pinned memory are not overlapped with compute: {pct(stake, typical)} of a typical "
                 "iteration the GPU copies while no kernel runs"),
        recommendation=("Issue copies ahead of use so they overlap kernels: prefetch the next batch with "
                        ".to(device, non_blocking=True) on a side CUDA stream (or a DataLoader prefetcher) and copy "
                        "results back asynchronously; keep fewer, larger copies."),
        evidence=(f"pinned: {_describe(pinned, n_iter)}; {ms(stake)} per typical iteration not overlapped by kernels "
                  "(summary: Memory Duration)"),
        time_at_stake_ns=stake,
        estimate=("upper bound: median per-iteration copy time with no kernel running on the device; fully "
                  "overlapped copies cost nothing"),
        iterations=slow,
    )]
