"""The roofline of each kernel, of each kernel name and of each op type: arithmetic intensity,
achieved rates, the binding ceiling and how close the work comes to it.

Contract: ``roofline(work, ceilings=None, match=None) -> Roofline`` (one row per ncu kernel), then
``kernel_table(roof)`` (one row per kernel name and launch shape), ``op_type_table(roof, op_types)``,
``tc_disagreements(roof)`` and ``step_totals(roof)``: frames with report column names; for the
other reports, ``measured_tc(roof, match, name_ids)`` (Tensor Core use per nsys kernel name),
``iteration_flops(roof, match)`` and ``main_compute(roof)`` (the model FLOPs utilization's peak).

Binding ceiling. Each resource r (a memory level, a SIMT pipe, a tensor source type) bounds the
duration from below by work_r / ceiling_r: the time it would take at its ceiling. The largest of
these bounds names the binding ceiling (``Bound``) and ``% of Ceiling`` = that bound / the time the
work took. For one precision and one memory level this is the classic roofline (the kernel sits
under min(peak, AI x bandwidth)); with several it is the hierarchical one, and it stays below
100 % as long as every ceiling is a real peak. A group of kernels sums its bounds and its times.

Time. Achieved rates use the nsys kernel time when the kernel was matched (ncu replays kernels
serialized with caches flushed), else ncu's. Bytes and FLOPs are ncu's counts, so where ncu's
cold-cache bytes over the warm nsys time would pass a ceiling, that kernel's rates use the ncu
time instead, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..classify import kernel_uses_tc
from .match import KernelMatch, base_name
from .measure import SIMT_COLUMNS, TENSOR_COLUMNS, Ceilings, KernelWork, precision_labels
from .metrics import CEILINGS, COMPUTE, MEMORY_LEVELS, work_column

RESOURCES = tuple(CEILINGS)
NCU, NSYS = "ncu", "nsys"


def _bound_column(resource: str) -> str:
    return f"at_ceiling_ns_{resource.lower().replace(' ', '_')}"


BOUND_COLUMNS = {r: _bound_column(r) for r in RESOURCES}


@dataclass(frozen=True)
class Roofline:
    """Per ncu kernel (index as ``KernelWork.kernels``): the KernelWork columns plus

    ncu_time_ns, nsys_avg_ns (NaN unmatched), nsys_count, matched_by ('' unmatched), nsys_row,
    rate_time_ns (the time achieved rates use), time_source ('nsys' or 'ncu'),
    at_ceiling_ns_<resource> (work / ceiling, NaN when the ceiling is unknown), uses_tc_name
    (dlagg's name-based guess), long_name (nsys's demangled name when matched, else ncu's) and
    short_name (its base name).
    """

    kernels: pd.DataFrame
    ceilings: Ceilings
    warnings: tuple[str, ...] = ()


def roofline(work: KernelWork, ceilings: Ceilings | None = None, match: KernelMatch | None = None) -> Roofline:
    """Roofline quantities per ncu kernel, with `ceilings` (default: ncu's own) and, when given,
    nsys times from `match`."""
    ceilings = ceilings if ceilings is not None else work.ceilings
    k = work.kernels.copy()
    warnings = list(work.warnings)
    k["ncu_time_ns"] = k["time_ns"]
    if match is not None:
        k["nsys_avg_ns"] = match.nsys_avg_ns
        k["nsys_count"] = match.nsys_count
        k["matched_by"] = match.how
        k["nsys_row"] = match.nsys_row
        long_name = np.where(match.nsys_row >= 0, match.nsys_name, k["name"].to_numpy(dtype=object))
        if match.unmatched_names:  # all matched is no warning (KernelMatch.summary() says it)
            warnings.append(match.summary())
    else:
        k["nsys_avg_ns"] = np.nan
        k["nsys_count"] = 0
        k["matched_by"] = ""
        k["nsys_row"] = -1
        long_name = k["name"].to_numpy(dtype=object)
    k["long_name"] = long_name
    names = pd.Series(pd.unique(long_name))
    k["short_name"] = names.map(base_name).to_numpy()[pd.Index(names).get_indexer(long_name)]
    k["uses_tc_name"] = names.map(kernel_uses_tc).to_numpy(dtype=bool)[pd.Index(names).get_indexer(long_name)]

    values = ceilings.values.reindex(k.index)
    for resource in RESOURCES:
        amount = k[work_column(resource)].to_numpy(dtype=np.float64)
        ceiling = values[resource].to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            k[BOUND_COLUMNS[resource]] = np.where(amount == 0, 0.0, amount / ceiling * 1e9)
    bound = _max_bound(k)
    nsys = k["nsys_avg_ns"].to_numpy()
    use_nsys = ~np.isnan(nsys) & (nsys > 0)
    with np.errstate(invalid="ignore"):
        past = use_nsys & (bound > nsys)
    if past.any():
        names_past = pd.Series(k["short_name"].to_numpy()[past]).value_counts()
        warnings.append(f"roofline: for {int(past.sum())} kernel(s) ncu's cold-cache counts over the nsys time would "
                        f"pass a ceiling ({', '.join(names_past.index[:5])}); their rates use the ncu time")
        use_nsys &= ~past
    k["rate_time_ns"] = np.where(use_nsys, nsys, k["ncu_time_ns"].to_numpy())
    k["time_source"] = np.where(use_nsys, NSYS, NCU).astype(object)
    with np.errstate(invalid="ignore"):
        over = bound > k["rate_time_ns"].to_numpy() * (1 + 1e-9)
    if over.any():
        exceeded = sorted({_argmax_resource(k, int(i)) for i in np.flatnonzero(over)})
        warnings.append(f"roofline: {int(over.sum())} kernel(s) ran faster than the {', '.join(exceeded)} ceiling "
                        f"({', '.join(ceilings.sources.get(r, '') for r in exceeded)}): that ceiling is below what the "
                        "GPU did; raise it in the peaks file")
    unknown = [r for r in RESOURCES if ((k[work_column(r)].fillna(0) > 0) & values[r].isna()).any()]
    if unknown:
        warnings.append(f"roofline: no ceiling for {', '.join(unknown)}, where kernels did work: Bound and % of "
                        "Ceiling weigh the other ceilings only")
    return Roofline(k, ceilings, tuple(dict.fromkeys(warnings)))


def _max_bound(k: pd.DataFrame) -> np.ndarray:
    stacked = k[list(BOUND_COLUMNS.values())].to_numpy(dtype=np.float64)
    known = ~np.isnan(stacked)
    return np.where(known.any(axis=1), np.where(known, stacked, -np.inf).max(axis=1), np.nan)


def _argmax_resource(k: pd.DataFrame, row: int) -> str:
    values = k[list(BOUND_COLUMNS.values())].iloc[row].to_numpy(dtype=np.float64)
    return RESOURCES[int(np.nanargmax(values))]


# Sums per group: work, times and bounds (NaN only when every member's value is unknown).
_SUMS = [*SIMT_COLUMNS.values(), *TENSOR_COLUMNS.values(), "flops_tensor", "flops_total", "bytes_dram", "bytes_l2",
         "bytes_l1", "ncu_time_ns", "rate_time_ns", *BOUND_COLUMNS.values()]


def summarise(roof: Roofline, by: list[str] | pd.Series) -> pd.DataFrame:
    """Roofline per group of ncu kernels (internal column names; the table functions rename).

    `by`: column names of ``roof.kernels`` or a Series aligned with it.
    """
    k = roof.kernels
    matched = k["nsys_count"].to_numpy() > 0
    k = k.assign(_nsys_total=np.where(matched, k["nsys_avg_ns"] * k["nsys_count"], np.nan),
                 _nsys_count=np.where(matched, k["nsys_count"], np.nan), _matched=matched,
                 _nsys_time=k["time_source"].to_numpy() == NSYS, _tc=k["uses_tc"].astype("Float64"))
    groups = k.groupby(by, sort=False, dropna=False)
    out = groups[_SUMS].sum(min_count=1)
    out["invocations"] = groups.size()
    out["matched"] = groups["_matched"].sum()
    out["nsys_avg_ns"] = groups["_nsys_total"].sum(min_count=1) / groups["_nsys_count"].sum(min_count=1)
    every, some = groups["_nsys_time"].all(), groups["_nsys_time"].any()
    out["time_source"] = np.where(every, NSYS, np.where(some, f"{NSYS}+{NCU}", NCU)).astype(object)
    out["tensor_precision"] = precision_labels(out[list(TENSOR_COLUMNS.values())].to_numpy(dtype=np.float64))
    out["uses_tc"] = groups["_tc"].max().astype("boolean")
    out["uses_tc_name"] = groups["uses_tc_name"].any()
    return _finish(out)


def _finish(out: pd.DataFrame) -> pd.DataFrame:
    """Intensities, rates, binding ceiling and % of ceiling from a group's sums."""
    total = out["flops_total"]
    seconds = out["rate_time_ns"] * 1e-9
    with np.errstate(divide="ignore", invalid="ignore"):
        for level in MEMORY_LEVELS:
            amount = out[f"bytes_{level.lower()}"]
            out[f"ai_{level.lower()}"] = (total / amount).where(amount > 0)
            out[f"bytes_per_s_{level.lower()}"] = amount / seconds
        out["flop_per_s"] = total / seconds
    bounds = out[list(BOUND_COLUMNS.values())].to_numpy(dtype=np.float64)
    known = ~np.isnan(bounds) & (bounds > 0)
    best = np.where(known, bounds, -np.inf).argmax(axis=1)
    has = known.any(axis=1)
    at_ceiling = np.where(has, bounds[np.arange(len(out)), best], np.nan)
    resources = np.array(RESOURCES, dtype=object)
    out["bound"] = np.where(has, resources[best], "")
    amounts = np.column_stack([out[work_column(r)].to_numpy(dtype=np.float64) for r in RESOURCES])
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ceiling_per_s"] = np.where(has, amounts[np.arange(len(out)), best] / at_ceiling * 1e9, np.nan)
        out["pct_of_ceiling"] = np.where(has, 100.0 * at_ceiling / out["rate_time_ns"].to_numpy(), np.nan)
    grand = out["rate_time_ns"].sum()
    out["pct_gpu_time"] = 100.0 * out["rate_time_ns"] / grand if grand > 0 else np.nan
    return out


def _flag(values: pd.Series) -> pd.Series:
    """A nullable boolean column (NA: unknown); the writers show yes / no / blank."""
    return values.astype("boolean")


def _dims(k: pd.DataFrame, prefix: str) -> pd.Series:
    return ("(" + k[f"{prefix}_x"].astype(str) + ", " + k[f"{prefix}_y"].astype(str) + ", "
            + k[f"{prefix}_z"].astype(str) + ")")


def _metric_columns(s: pd.DataFrame) -> dict[str, pd.Series]:
    return {
        "FP64 FLOPs": s["flops_fp64"],
        "FP32 FLOPs": s["flops_fp32"],
        "FP16 FLOPs": s["flops_fp16"],
        "Tensor FLOPs": s["flops_tensor"],
        "Tensor Precision": s["tensor_precision"],
        "DRAM Bytes": s["bytes_dram"],
        "L2 Bytes": s["bytes_l2"],
        "L1 Bytes": s["bytes_l1"],
        "AI DRAM (FLOP/B)": s["ai_dram"],
        "AI L2 (FLOP/B)": s["ai_l2"],
        "AI L1 (FLOP/B)": s["ai_l1"],
        "ncu Time (ns)": s["ncu_time_ns"],
        "nsys Avg Time (ns)": s["nsys_avg_ns"],
        "Time Source": s["time_source"],
        "% of GPU Time": s["pct_gpu_time"],
        "Achieved FLOP/s": s["flop_per_s"],
        "DRAM Bytes/s": s["bytes_per_s_dram"],
        "L2 Bytes/s": s["bytes_per_s_l2"],
        "L1 Bytes/s": s["bytes_per_s_l1"],
        "Bound": s["bound"],
        "Binding Ceiling (/s)": s["ceiling_per_s"],
        "% of Ceiling": s["pct_of_ceiling"],
        "Uses TC (measured)": _flag(s["uses_tc"]),
        "Uses TC (name)": _flag(s["uses_tc_name"]),
    }


def kernel_table(roof: Roofline) -> pd.DataFrame:
    """One row per kernel (demangled name) and launch shape, most GPU time first.

    ``Invocations`` counts the profiled launches; FLOPs, bytes and ``ncu Time`` are their sums;
    ``nsys Avg Time`` is the mean unprofiled duration of their matches.
    """
    k = roof.kernels.assign(grid=_dims(roof.kernels, "grid"), block=_dims(roof.kernels, "block"))
    s = summarise(Roofline(k, roof.ceilings), ["long_name", "grid", "block"]).reset_index()
    short = pd.Series(k["short_name"].to_numpy(), index=k["long_name"].to_numpy())
    table = pd.DataFrame({
        "Kernel Name": short[~short.index.duplicated()].reindex(s["long_name"]).to_numpy(),
        "Grid": s["grid"].to_numpy(),
        "Block": s["block"].to_numpy(),
        "Invocations": s["invocations"].to_numpy(),
        "Matched": s["matched"].to_numpy(),
        **{name: col.to_numpy() for name, col in _metric_columns(s).items()},
        "Long Kernel Name": s["long_name"].to_numpy(),
    })
    return _ordered(table)


def op_types_of(match: KernelMatch, op_type_of_row: pd.Series) -> pd.Series:
    """Op type of each ncu kernel: that of its nsys match (`op_type_of_row`: profile kernel row ->
    op type), '' when unmatched or the row has no op."""
    rows = match.nsys_row
    known = rows >= 0
    types = np.full(len(rows), "", dtype=object)
    types[known] = op_type_of_row.reindex(rows[known]).fillna("").astype(str).to_numpy()
    return pd.Series(types)


def op_type_table(roof: Roofline, op_types: pd.Series) -> pd.DataFrame:
    """One row per op type (`op_types`: per ncu kernel, aligned with ``roof.kernels``; '' = none,
    shown as '(no op)'), most GPU time first."""
    labels = pd.Series(np.asarray(op_types, dtype=object), index=roof.kernels.index).replace("", "(no op)")
    s = summarise(roof, labels.rename("op_type")).reset_index()
    columns = _metric_columns(s)
    for dropped in ("Uses TC (name)",):
        columns.pop(dropped)
    table = pd.DataFrame({"Op Type": s["op_type"].to_numpy(), "Kernels": s["invocations"].to_numpy(),
                          "Matched": s["matched"].to_numpy(), **{n: c.to_numpy() for n, c in columns.items()}})
    return _ordered(table)


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    by_time = table["% of GPU Time"].fillna(-1.0)
    return table.iloc[np.argsort(-by_time.to_numpy(), kind="stable")].reset_index(drop=True)


@dataclass(frozen=True)
class TcCheck:
    table: pd.DataFrame  # kernel_table rows where measured and name-based Tensor Core use differ
    warning: str | None


def tc_disagreements(roof: Roofline, kernels: pd.DataFrame | None = None) -> TcCheck:
    """Kernels whose measured Tensor Core use differs from dlagg's name-based guess."""
    kernels = kernels if kernels is not None else kernel_table(roof)
    measured, named = kernels["Uses TC (measured)"].astype("boolean"), kernels["Uses TC (name)"].astype("boolean")
    differ = (measured != named).fillna(False).to_numpy(dtype=bool)  # NA: not measured
    table = kernels.loc[differ, ["Kernel Name", "Grid", "Block", "Invocations", "Uses TC (measured)", "Uses TC (name)",
                                 "Tensor FLOPs", "Tensor Precision", "% of GPU Time", "Long Kernel Name"]]
    table = table.reset_index(drop=True)
    if table.empty:
        return TcCheck(table, None)
    ran = table["Uses TC (measured)"].astype(bool)
    parts = []
    if (~ran).any():
        parts.append(f"{int((~ran).sum())} named like Tensor Core kernels ran no tensor math "
                     f"({', '.join(table.loc[~ran, 'Kernel Name'].unique()[:3])})")
    if ran.any():
        parts.append(f"{int(ran.sum())} ran tensor math under names the rules miss "
                     f"({', '.join(table.loc[ran, 'Kernel Name'].unique()[:3])})")
    warning = (f"roofline: Tensor Core use measured by ncu disagrees with the kernel-name rules for {len(table)} "
               f"kernel(s), {int(table['Invocations'].sum())} launches: {'; '.join(parts)}; the measured use is "
               "the one to trust")
    return TcCheck(table, warning)


def step_totals(roof: Roofline) -> dict[str, float]:
    """Sums over every ncu kernel (the profiled step): times, FLOPs by precision, tensor FLOPs by
    source type, bytes per level, DRAM arithmetic intensity and achieved FLOP/s."""
    k = roof.kernels
    totals = {"kernels": float(len(k)), "ncu_time_ns": float(k["ncu_time_ns"].sum()),
              "rate_time_ns": float(k["rate_time_ns"].sum())}
    for column in (*SIMT_COLUMNS.values(), *TENSOR_COLUMNS.values(), "flops_tensor", "flops_total", "bytes_dram",
                   "bytes_l2", "bytes_l1"):
        totals[column] = float(k[column].sum(min_count=1))
    totals["ai_dram"] = totals["flops_total"] / totals["bytes_dram"] if totals["bytes_dram"] > 0 else float("nan")
    totals["flop_per_s"] = totals["flops_total"] / (totals["rate_time_ns"] * 1e-9) \
        if totals["rate_time_ns"] > 0 else float("nan")
    return totals


def measured_tc(roof: Roofline, match: KernelMatch, nsys_name_id: np.ndarray) -> pd.Series:
    """Tensor Core use measured by ncu per nsys kernel-name id: True where some launch matched to an
    ncu kernel of that name ran tensor math, False where every measured launch ran none. Names
    without a measured launch are absent (their use stays a guess).

    `nsys_name_id`: the name id of every row of ``profile.kernels`` (a kernel name decides the code
    that runs, so the verdict holds for the name's unprofiled launches too).
    """
    pairs = match.pairs
    used = roof.kernels["uses_tc"].astype("boolean").array[pairs["ncu"].to_numpy()]
    frame = pd.DataFrame({"name": np.asarray(nsys_name_id)[pairs["row"].to_numpy()], "tc": used})
    frame = frame[frame["tc"].notna().to_numpy()]
    return frame.groupby("name")["tc"].any().astype(bool)


def iteration_flops(roof: Roofline, match: KernelMatch | None = None) -> float:
    """FLOPs (SIMT + tensor) of one aggregated nsys iteration: each ncu kernel's FLOPs weighted by
    the share of the nsys steps that launch its slot (1 for a kernel every step launches, 0 for an
    unmatched one). Without a match (ncu alone): the FLOPs of every ncu kernel."""
    flops = roof.kernels["flops_total"].to_numpy(dtype=np.float64)
    if match is None:
        return float(np.nansum(flops))
    weight = match.nsys_count / match.steps if match.steps else np.zeros(len(flops))
    return float(np.nansum(flops * weight))


def main_compute(roof: Roofline) -> tuple[str, float] | None:
    """The compute ceiling of the pipe that did the most FLOPs in the step (a tensor type, or a
    SIMT precision): (resource, its typical ceiling), None when no FLOPs or no such ceiling."""
    k = roof.kernels
    work = {r: float(k[work_column(r)].sum(min_count=1)) for r in COMPUTE}
    work = {r: w for r, w in work.items() if w > 0}  # NaN compares False
    if not work:
        return None
    resource = max(work, key=work.__getitem__)
    peak = roof.ceilings.typical().get(resource)
    return (resource, peak) if peak else None
