"""Per ncu kernel: FLOPs by precision, bytes per memory level, duration, Tensor Core use, and the
ceilings ncu's own roofline sections draw for that kernel.

Contract: ``measure(report) -> KernelWork``. Columns of ``KernelWork.kernels`` (one row per ncu
kernel, same index as ``NcuReport.kernels``), all float64 with NaN where the CSV lacks the metrics:

    time_ns                     gpu__time_duration.sum (serialized, cache-flushed replay)
    flops_fp64/fp32/fp16        SASS FLOPs: add + mul + 2 fma (half: packed, twice that)
    tensor_fp16/bf16/tf32/fp64/fp8/int8/int1   tensor-pipe FLOPs (ops for integer types)
    flops_tensor                sum of the tensor columns that are known
    flops_total                 SIMT + tensor FLOPs (the known parts)
    bytes_dram/l2/l1            dram__bytes.sum, lts__t_bytes.sum, l1tex__t_bytes.sum
    tensor_precision (object)   source types with tensor work, '+'-joined ('' none)
    uses_tc (boolean, NA)       tensor math measured (NA when the CSV cannot tell)

plus the identity columns of ``NcuReport.kernels``. Ceilings (`Ceilings`) are per kernel because
they are per-cycle peaks times the clock that kernel ran at (boost clocks vary by kernel).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .metrics import (
    CEILINGS,
    PIPE_TENSOR,
    PIPE_TENSOR_HFMA2,
    QUANTITIES,
    SIMT,
    TENSOR_SOURCES,
    CeilingSpec,
    Quantity,
    Recipe,
    work_column,
)
from .ncu import NcuReport

TENSOR_COLUMNS = {p: f"tensor_{p.lower()}" for p in TENSOR_SOURCES}
SIMT_COLUMNS = {p: f"flops_{p.lower()}" for p in SIMT}


@dataclass(frozen=True)
class Missing:
    """A quantity the CSV cannot give, with the metrics and the ncu option that would."""

    quantity: str
    metrics: tuple[str, ...]
    section: str  # the ncu section (or set) that collects them, "" when only --metrics does

    def describe(self) -> str:
        options = ([self.section] if self.section else []) + [f"--metrics {','.join(self.metrics)}"]
        return f"{self.quantity} (collect with {' or '.join(options)})"


@dataclass(frozen=True)
class Ceilings:
    """Ceilings per kernel: ``values`` has one row per ncu kernel and one column per resource
    (``metrics.CEILINGS`` order: DRAM, L2, L1, FP64, FP32, FP16, Tensor FP16, ...), in bytes or
    FLOPs per second, NaN when unknown. ``sources`` says where each resource's value comes from."""

    values: pd.DataFrame
    sources: Mapping[str, str]

    def summary(self) -> pd.DataFrame:
        """One row per known ceiling: median, min and max over kernels, unit and source."""
        values = self.values
        known = [r for r in values.columns if values[r].notna().any()]
        return pd.DataFrame({
            "Ceiling": known,
            "Unit": [CEILINGS[r].unit for r in known],
            "Median (/s)": [float(values[r].median()) for r in known],
            "Min (/s)": [float(values[r].min()) for r in known],
            "Max (/s)": [float(values[r].max()) for r in known],
            "Source": [self.sources.get(r, "") for r in known],
        })

    def typical(self) -> dict[str, float]:
        """Median of each known ceiling over kernels (what one chart line can show)."""
        return {r: float(self.values[r].median()) for r in self.values.columns if self.values[r].notna().any()}


@dataclass(frozen=True)
class KernelWork:
    source: str  # the ncu CSV's file name
    kernels: pd.DataFrame
    ceilings: Ceilings  # ncu's own (peak_sustained x clock of each kernel)
    missing: tuple[Missing, ...] = ()
    warnings: tuple[str, ...] = field(default=())


def _pick(recipes: tuple[Recipe, ...], columns: Mapping[str, np.ndarray]) -> Recipe | None:
    return next((r for r in recipes if r.available(columns)), None)


def _quantity(quantity: Quantity, columns: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, Recipe | None]:
    recipe = _pick(quantity.recipes, columns)
    return (recipe.evaluate(columns) if recipe is not None else np.full(n, np.nan)), recipe


def _ceiling(spec: CeilingSpec, columns: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, str]:
    if not spec.best_of_all:
        recipe = _pick(spec.recipes, columns)
        if recipe is None:
            return np.full(n, np.nan), ""
        return recipe.evaluate(columns), f"ncu: {recipe.describe()}"
    usable = [r for r in spec.recipes if r.available(columns)]
    if not usable:
        return np.full(n, np.nan), ""
    best = np.fmax.reduce(np.vstack([r.evaluate(columns) for r in usable]), axis=0)  # fmax skips NaN
    paths = ", ".join(dict.fromkeys(r.metrics[0].split(".sum")[0] for r in usable))
    return best, f"ncu: fastest dense path's .sum.peak_sustained x SM clock, of {paths}"


def ncu_ceilings(report: NcuReport) -> Ceilings:
    """The ceilings ncu's roofline sections draw, per kernel: ``<metric>.peak_sustained`` x the
    unit's ``cycles_elapsed.avg.per_second`` (x FLOPs per instruction for SIMT pipes)."""
    n = len(report.kernels)
    values, sources = {}, {}
    for resource, spec in CEILINGS.items():
        values[resource], sources[resource] = _ceiling(spec, report.metrics, n)
    # a peak of 0 means the GPU lacks that path (e.g. no FP8 before Hopper): no ceiling
    frame = pd.DataFrame(values, index=report.kernels.index).where(lambda v: v > 0)
    return Ceilings(frame, {r: s for r, s in sources.items() if s})


def measure(report: NcuReport) -> KernelWork:
    """FLOPs, bytes, duration and Tensor Core use of every kernel of `report`, with ncu's ceilings."""
    n = len(report.kernels)
    columns = report.metrics
    raw: dict[str, np.ndarray] = {}
    missing: list[Missing] = []
    derived: dict[str, list[str]] = {}
    for key, quantity in QUANTITIES.items():
        raw[key], recipe = _quantity(quantity, columns, n)
        if recipe is None:
            missing.append(Missing(quantity.name, quantity.recipes[0].metrics, quantity.section))
        elif not recipe.exact:
            derived.setdefault(quantity.name, []).append(recipe.describe())

    out = report.kernels.copy()
    out["time_ns"] = raw["time_ns"]
    for precision, ops in SIMT.items():
        parts = [raw[f"{precision.lower()}_{op}"] * flops for op, (_, flops) in ops.items()]
        out[SIMT_COLUMNS[precision]] = parts[0] + parts[1] + parts[2]  # NaN when any part is unknown
    for column in TENSOR_COLUMNS.values():
        out[column] = raw[column]
    tensor = out[list(TENSOR_COLUMNS.values())].to_numpy()
    out["flops_tensor"] = _known_sum(tensor)
    out["flops_total"] = _known_sum(np.column_stack([out[list(SIMT_COLUMNS.values())].to_numpy(), tensor]))
    for level in ("dram", "l2", "l1"):
        out[f"bytes_{level}"] = raw[f"bytes_{level}"]
    out["tensor_precision"] = precision_labels(tensor)
    out["uses_tc"] = _uses_tc(tensor, columns)

    warnings = list(report.warnings)
    missing = _merge(missing)
    if missing:
        warnings.append(f"roofline: {report.source} lacks metrics, so these stay empty: "
                        + "; ".join(m.describe() for m in missing))
    for name, how in derived.items():
        warnings.append(f"roofline: {name} derived from rates ({'; '.join(dict.fromkeys(how))}); ncu prints those "
                        "rounded to 2 decimals, so small kernels' counts are approximate: collect the .sum counters "
                        "with --metrics for exact counts")
    if out["uses_tc"].isna().any():
        warnings.append(f"roofline: {report.source} cannot tell Tensor Core use (no sm__ops_path_tensor_src_* "
                        f"and no {PIPE_TENSOR} with {PIPE_TENSOR_HFMA2}); collect them with "
                        "--section SpeedOfLight_HierarchicalTensorRooflineChart")
    ceilings = ncu_ceilings(report)
    # a ceiling matters where work of its kind ran, or may have (unknown work)
    unknown = [r for r in CEILINGS if ceilings.values[r].isna().all() and not (out[work_column(r)] == 0).all()]
    if unknown:
        by_option: dict[str, list[str]] = {}
        for r in unknown:  # one option per section; the metrics themselves when no section has them
            spec = CEILINGS[r]
            by_option.setdefault(spec.section or f"--metrics {','.join(spec.metrics)}", []).append(r)
        warnings.append("roofline: no ncu ceiling for " + "; ".join(
            f"{', '.join(rs)} (collect with {option})" for option, rs in by_option.items())
            + "; a peaks file can give them")
    return KernelWork(report.source, out, ceilings, tuple(missing), tuple(warnings))


def _known_sum(values: np.ndarray) -> np.ndarray:
    """Row sums over the known (non-NaN) entries; NaN when a row has none."""
    known = ~np.isnan(values)
    return np.where(known.any(axis=1), np.where(known, values, 0.0).sum(axis=1), np.nan)


def precision_labels(tensor: np.ndarray) -> np.ndarray:
    names = np.array(list(TENSOR_SOURCES), dtype=object)
    used = np.nan_to_num(tensor) > 0
    labels = np.full(len(tensor), "", dtype=object)
    for pattern in np.unique(used, axis=0):  # distinct combinations: a handful
        if pattern.any():
            labels[(used == pattern).all(axis=1)] = "+".join(names[pattern])
    return labels


def _uses_tc(tensor: np.ndarray, columns: Mapping[str, np.ndarray]) -> pd.arrays.BooleanArray:
    """True where tensor math ran; from the tensor-path counters, else from the tensor pipe minus
    its HFMA2 instructions (Hopper issues packed half FMAs there too), else unknown."""
    known = ~np.isnan(tensor)
    positive = np.asarray((np.where(known, tensor, 0.0) > 0).any(axis=1))  # any(axis=1) is typed as maybe a scalar
    decided = positive | known.all(axis=1)
    value = positive.copy()
    if not decided.all() and PIPE_TENSOR in columns and PIPE_TENSOR_HFMA2 in columns:
        pipe = columns[PIPE_TENSOR] - columns[PIPE_TENSOR_HFMA2]
        fill = ~decided & ~np.isnan(pipe)
        value[fill] = pipe[fill] > 0
        decided = decided | fill
    result = pd.array(value, dtype="boolean")
    result[~decided] = pd.NA
    return result


def _merge(missing: list[Missing]) -> list[Missing]:
    """One entry per quantity (the three FP32 instructions are one 'FP32 FLOPs')."""
    merged: dict[tuple[str, str], list[str]] = {}
    for m in missing:
        merged.setdefault((m.quantity, m.section), []).extend(m.metrics)
    return [Missing(q, tuple(dict.fromkeys(metrics)), section) for (q, section), metrics in merged.items()]
