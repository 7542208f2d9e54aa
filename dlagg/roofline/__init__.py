"""Roofline from Nsight Compute: how close each kernel and op type comes to the GPU's limits.

Stages, each a pure function over frozen values (docs/roofline.md explains every figure)::

    report  = read_ncu_csv(path)                      # ncu --csv --page raw, plain or .gz
    work    = measure(report)                         # FLOPs by precision, bytes per level, ncu ceilings
    ceil    = apply_peaks(work.ceilings, load_peaks(p))   # optional: measured ceilings
    match   = match_kernels(work.kernels, profile, iterations)   # optional: nsys times and ops
    roof    = roofline(work, ceil, match)             # per ncu kernel
    kernel_table(roof), op_type_table(roof, op_types_of(match, op_type_of_row)),
    tc_disagreements(roof), step_totals(roof), chart_spec(table, roof.ceilings), render_png(spec)

``analyse`` runs the first five for the common case.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..model import Iterations, Profile
from .chart import chart_spec, render_png
from .match import KernelMatch, match_kernels
from .measure import Ceilings, KernelWork, Missing, measure, ncu_ceilings
from .model import (
    Roofline,
    TcCheck,
    iteration_flops,
    kernel_table,
    main_compute,
    measured_tc,
    op_type_table,
    op_types_of,
    roofline,
    step_totals,
    summarise,
    tc_disagreements,
)
from .ncu import NcuReport, read_ncu_csv
from .peaks import Peaks, apply_peaks, load_peaks


def analyse(ncu_csv: str | Path, *, profile: Profile | None = None, iterations: Iterations | None = None,
            peaks: str | Path | None = None,
            gpu_work: pd.DataFrame | None = None) -> tuple[Roofline, KernelMatch | None]:
    """Read an ncu raw-page CSV and compute its roofline; with `profile`, match its kernels to the
    nsys kernels of the aggregated `iterations` (rates then use the nsys times); with `peaks`,
    that file's ceilings replace ncu's own. `gpu_work`: ``timeline.correlate.gpu_work(profile)``
    when the caller already has it."""
    work = measure(read_ncu_csv(ncu_csv))
    ceilings = apply_peaks(work.ceilings, load_peaks(peaks)) if peaks is not None else work.ceilings
    match = match_kernels(work.kernels, profile, iterations, gpu_work) if profile is not None else None
    return roofline(work, ceilings, match), match


__all__ = [
    "Ceilings", "KernelMatch", "KernelWork", "Missing", "NcuReport", "Peaks", "Roofline", "TcCheck", "analyse",
    "apply_peaks", "chart_spec", "iteration_flops", "kernel_table", "load_peaks", "main_compute", "match_kernels",
    "measure", "measured_tc", "ncu_ceilings", "op_type_table", "op_types_of", "read_ncu_csv", "render_png",
    "roofline", "step_totals", "summarise", "tc_disagreements",
]
