"""Roofline report (``--ncu_report``): how close each kernel and op type comes to the GPU's limits,
from Nsight Compute's counters of one training step joined to the nsys kernels (``dlagg.roofline``,
docs/roofline.md).

Built on the rank the ncu report belongs to (``RankContext.roofline``; ``--ncu_rank``, default the
job's first rank), or from the ncu report alone (``build_alone``: no nsys export, so rates use ncu's
replay times and kernels have no op). Tables:

    kernels           one row per kernel name and launch shape, most GPU time first
    op_types          one row per op type of the kernels' ops (empty without an nsys export)
    ceilings          every ceiling used: median, min and max over kernels, unit and source
                      (ncu's own, or the --peaks file)
    step              key/value: the ncu report, its rank, how its kernels matched, the step's totals
    tc_disagreements  kernels whose measured Tensor Core use differs from dlagg's name rules

and two images, the hierarchical roofline per kernel (``<profile>_roofline.png``) and per op type
(``<profile>_roofline_op_type.png``), drawn here so that writers only save them.

With ``--ncu_report`` other reports gain roofline figures from this module, after DLProf's columns:
kernel and op_type (``rate_columns``: achieved TFLOP/s, % of ceiling, bound of the ncu kernels
matched to each row), summary (``mfu_lines``: the iteration's measured FLOPs against the peak) and
tensor (``tc_mismatch_names``). They are present on every rank, so that the ranks' tables merge,
and filled on the ncu rank only; a merged job report takes that rank's values (``carry_rates``,
``carry_lines``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..context import RankContext
from ..limits import js_engine_refused
from ..options import Options
from ..roofline import (
    KernelMatch,
    Roofline,
    analyse,
    chart_spec,
    iteration_flops,
    kernel_table,
    main_compute,
    op_type_table,
    render_png,
    step_totals,
    summarise,
    tc_disagreements,
)
from ..timeline.correlate import KERNEL
from .base import NCU, JobFigures, Report, merges, report
from .figures import BYTES, COUNT, FIRST, KEY, NS, PERCENT, Field, Image, Table, key_values

FLOP, FLOP_PER_S, BYTES_PER_S, FLOP_PER_BYTE, TFLOP_PER_S = "flop", "flop/s", "bytes/s", "flop/byte", "tflop/s"
PER_S = "per s"  # bytes or FLOPs per second, by row


def _f(key: str, title: str, unit: str = "", digits: int | None = None, merge: str = FIRST) -> Field:
    return Field(key, title, unit, digits, merge)


# The roofline tables' columns (``roofline.model`` names them by title), in display order.
COLUMNS = {f.title: f for f in (
    _f("kernel_name", "Kernel Name", merge=KEY),
    _f("op_type", "Op Type", merge=KEY),
    _f("grid", "Grid", merge=KEY),
    _f("block", "Block", merge=KEY),
    _f("invocations", "Invocations", COUNT),
    _f("kernels", "Kernels", COUNT),
    _f("matched", "Matched", COUNT),
    _f("fp64_flops", "FP64 FLOPs", FLOP, 0),
    _f("fp32_flops", "FP32 FLOPs", FLOP, 0),
    _f("fp16_flops", "FP16 FLOPs", FLOP, 0),
    _f("tensor_flops", "Tensor FLOPs", FLOP, 0),
    _f("tensor_precision", "Tensor Precision"),
    _f("dram_bytes", "DRAM Bytes", BYTES, 0),
    _f("l2_bytes", "L2 Bytes", BYTES, 0),
    _f("l1_bytes", "L1 Bytes", BYTES, 0),
    _f("ai_dram_flop_per_byte", "AI DRAM (FLOP/B)", FLOP_PER_BYTE, 3),
    _f("ai_l2_flop_per_byte", "AI L2 (FLOP/B)", FLOP_PER_BYTE, 3),
    _f("ai_l1_flop_per_byte", "AI L1 (FLOP/B)", FLOP_PER_BYTE, 3),
    _f("ncu_time_ns", "ncu Time (ns)", NS, 0),
    _f("nsys_time_avg_ns", "nsys Avg Time (ns)", NS, 1),
    _f("time_source", "Time Source"),
    _f("gpu_time_pct", "% of GPU Time", PERCENT, 1),
    _f("achieved_flop_per_s", "Achieved FLOP/s", FLOP_PER_S, 0),
    _f("dram_bytes_per_s", "DRAM Bytes/s", BYTES_PER_S, 0),
    _f("l2_bytes_per_s", "L2 Bytes/s", BYTES_PER_S, 0),
    _f("l1_bytes_per_s", "L1 Bytes/s", BYTES_PER_S, 0),
    _f("bound", "Bound"),
    _f("ceiling_per_s", "Binding Ceiling (/s)", PER_S, 0),
    _f("pct_of_ceiling", "% of Ceiling", PERCENT, 1),
    _f("uses_tc_measured", "Uses TC (measured)"),
    _f("uses_tc_name", "Uses TC (name)"),
    _f("long_kernel_name", "Long Kernel Name", merge=KEY),
    # the ceilings table
    _f("ceiling", "Ceiling", merge=KEY),
    _f("unit", "Unit"),
    _f("median_per_s", "Median (/s)", PER_S, 0),
    _f("min_per_s", "Min (/s)", PER_S, 0),
    _f("max_per_s", "Max (/s)", PER_S, 0),
    _f("source", "Source"),
)}
IMAGES = ("roofline", "roofline_op_type")  # the PNGs' file suffixes


def _table(key: str, title: str, frame: pd.DataFrame) -> Table:
    """A roofline frame (columns named by title) as a figure table."""
    fields = tuple(COLUMNS[c] for c in frame.columns)
    return Table(key, title, fields, frame.set_axis([f.key for f in fields], axis=1).reset_index(drop=True))


def _ceilings_used(roof: Roofline) -> str:
    """Which ceilings the figures use, in one line."""
    sources = roof.ceilings.sources
    given: dict[str, list[str]] = {}
    for resource, source in sources.items():
        if not source.startswith("ncu:") and resource in roof.ceilings.typical():
            given.setdefault(source.split(":")[0], []).append(resource)
    own = "ncu's own (peak_sustained x the unit's clock, per kernel)"
    if not given:
        return own
    files = "; ".join(f"{name} for {', '.join(resources)}" for name, resources in given.items())
    return f"{files}; {own} for the others"


def _step(roof: Roofline, match: KernelMatch | None, source: str, rank: int | None) -> Table:
    totals = step_totals(roof)
    lines: list[tuple[Field, object]] = [(Field("ncu_report", "ncu Report"), source)]
    if rank is not None:
        lines.append((Field("rank", "Rank"), rank))
    lines.append((Field("kernels", "Kernels Profiled", COUNT), len(roof.kernels)))
    if match is not None:
        lines += [(Field("matched", "Kernels Matched to nsys Kernels", COUNT), match.matched),
                  (Field("steps", "nsys Steps Matched In", COUNT), match.steps)]
    lines += [
        (Field("ceilings", "Ceilings"), _ceilings_used(roof)),
        (Field("ncu_time_ns", "ncu Time (ns)", NS, 0), totals["ncu_time_ns"]),
        (Field("rate_time_ns", "Kernel Time Used for Rates (ns)", NS, 1), totals["rate_time_ns"]),
        (Field("flops", "FLOPs", FLOP, 0), totals["flops_total"]),
        (Field("fp64_flops", "FP64 FLOPs", FLOP, 0), totals["flops_fp64"]),
        (Field("fp32_flops", "FP32 FLOPs", FLOP, 0), totals["flops_fp32"]),
        (Field("fp16_flops", "FP16 FLOPs", FLOP, 0), totals["flops_fp16"]),
        (Field("tensor_flops", "Tensor FLOPs", FLOP, 0), totals["flops_tensor"]),
        (Field("dram_bytes", "DRAM Bytes", BYTES, 0), totals["bytes_dram"]),
        (Field("l2_bytes", "L2 Bytes", BYTES, 0), totals["bytes_l2"]),
        (Field("l1_bytes", "L1 Bytes", BYTES, 0), totals["bytes_l1"]),
        (Field("ai_dram_flop_per_byte", "AI DRAM (FLOP/B)", FLOP_PER_BYTE, 3), totals["ai_dram"]),
        (Field("achieved_flop_per_s", "Achieved FLOP/s (over the kernel time)", FLOP_PER_S, 0), totals["flop_per_s"]),
    ]
    return key_values("step", "Roofline Step", [(f, None if _missing(v) else v) for f, v in lines])


def _missing(value: object) -> bool:
    return isinstance(value, float) and np.isnan(value)


def _image(key: str, title: str, suffix: str, table: pd.DataFrame, roof: Roofline, label: str) -> Image:
    spec = chart_spec(table, roof.ceilings, label=label, title=title)
    return Image(key, title, suffix, render_png(spec), spec)


def roofline_report(roof: Roofline, match: KernelMatch | None, op_types: pd.Series | None, *, source: str,
                    rank: int | None = None) -> Report:
    """The report from a roofline (`op_types`: per ncu kernel, '' for none; None without an nsys export)."""
    kernels = kernel_table(roof)
    check = tc_disagreements(roof, kernels)
    times = "nsys times" if match is not None and match.matched else "ncu times"
    tables = [_table("kernels", "Roofline Report", kernels)]
    undrawn = js_engine_refused("roofline: its pictures (PNG, TensorBoard, the HTML page's charts) are not drawn")
    images = [] if undrawn else [_image("kernels", f"{source}: roofline per kernel (ncu metrics, {times})",
                                        IMAGES[0], kernels, roof, "Kernel Name")]
    warnings = [*roof.warnings, *([undrawn] if undrawn else [])]
    if op_types is not None:
        per_type = op_type_table(roof, op_types)
        tables.append(_table("op_types", "Roofline per Op Type", per_type))
        if not undrawn:
            images.append(_image("op_types", f"{source}: roofline per op type (ncu metrics, {times})", IMAGES[1],
                                 per_type, roof, "Op Type"))
    else:
        empty = op_type_table(roof, pd.Series([""] * len(roof.kernels))).iloc[:0]
        tables.append(_table("op_types", "Roofline per Op Type", empty))
        warnings.append("roofline: without an nsys export, rates use ncu's replay times (kernels serialized, caches "
                        "flushed) and kernels have no op types; pass --nsys_database with the same run's export for "
                        "both")
    tables += [_table("ceilings", "Ceilings", roof.ceilings.summary()), _step(roof, match, source, rank),
               _table("tc_disagreements", "Tensor Core Use: Measured vs Name", check.table)]
    if check.warning:
        warnings.append(check.warning)
    return Report("roofline", "roofline", tuple(tables), tuple(dict.fromkeys(warnings)), tuple(images))


def ncu_kernel_ops(ctx: RankContext) -> pd.DataFrame:
    """Per ncu kernel (``ctx.roofline.kernels`` order): the demangled and short name, op key and op type
    of its nsys match as the kernel and op_type reports show them ('' unmatched or launched by no op)."""
    roof, match = ctx.roofline, ctx.roofline_match
    assert roof is not None and match is not None
    rows = match.nsys_row
    known = rows >= 0
    work = ctx.work
    kernels = work[work["kind"].to_numpy() == KERNEL]
    at = pd.Series(kernels.index.to_numpy(), index=kernels["row"].to_numpy()).reindex(rows[known]).to_numpy()
    ops = ctx.op_columns(pd.Index(at), ("op_key", "op_type"))
    out = pd.DataFrame({"long_kernel_name": "", "kernel_name": "", "op_key": "", "op_type": ""},
                       index=roof.kernels.index)
    out.loc[known, "long_kernel_name"] = roof.kernels["long_name"].to_numpy()[known]
    short = ctx.short_name_ids(ctx.profile.kernels["name_id"].to_numpy()[rows[known]])
    out.loc[known, "kernel_name"] = ctx.profile.strings.decode(short).to_numpy(dtype=object)  # the kernel report's
    for column in ("op_key", "op_type"):
        out.loc[known, column] = np.asarray(ops[column], dtype=object)
    return out


# --- figures other reports gain with --ncu_report ------------------------------------------------

RATE_FIELDS = (
    Field("achieved_tflop_per_s", "Achieved TFLOP/s", TFLOP_PER_S, digits=3),
    Field("pct_of_ceiling", "% of Ceiling", PERCENT, digits=1),
    Field("roofline_bound", "Bound"),
)


def _index(frame: pd.DataFrame, keys: Sequence[str]) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([frame[k].astype(str).to_numpy(dtype=object) for k in keys], names=list(keys))


def rates(ctx: RankContext, keys: Sequence[str]) -> pd.DataFrame | None:
    """Roofline figures (RATE_FIELDS keys) of the matched ncu kernels grouped by `keys` (columns of
    ``ncu_kernel_ops``), indexed by them; None when this rank has no ncu report."""
    roof = ctx.roofline
    if roof is None:
        return None
    ops = ncu_kernel_ops(ctx)
    keep = (ops[list(keys)] != "").all(axis=1).to_numpy() & (ops["long_kernel_name"] != "").to_numpy()
    if not keep.any():
        return pd.DataFrame({f.key: pd.Series(dtype=object) for f in RATE_FIELDS}, index=_index(ops.iloc[:0], keys))
    subset = Roofline(roof.kernels[keep].assign(**{f"_{k}": ops.loc[keep, k] for k in keys}), roof.ceilings)
    groups = summarise(subset, [f"_{k}" for k in keys]).reset_index()
    groups = groups.rename(columns={f"_{k}": k for k in keys})
    out = pd.DataFrame({
        "achieved_tflop_per_s": groups["flop_per_s"].to_numpy(dtype=np.float64) / 1e12,
        "pct_of_ceiling": groups["pct_of_ceiling"].to_numpy(dtype=np.float64),
        "roofline_bound": groups["bound"].replace("", None).to_numpy(dtype=object),
    }, index=_index(groups, keys))
    return out


def rate_columns(ctx: RankContext, fields: tuple[Field, ...], frame: pd.DataFrame,
                 keys: Sequence[str]) -> tuple[tuple[Field, ...], pd.DataFrame]:
    """`fields` and `frame` (a report table keyed by the `keys` columns, which ``ncu_kernel_ops``
    has too) with RATE_FIELDS appended: the roofline of each row's matched ncu kernels, missing where
    no ncu kernel matched the row's kernels and on ranks without the ncu report."""
    found = rates(ctx, keys)
    out = frame.copy()
    if found is None:
        for f in RATE_FIELDS:
            out[f.key] = np.nan if f.unit else None
    else:
        joined = found.reindex(_index(frame, keys))
        for f in RATE_FIELDS:
            out[f.key] = joined[f.key].to_numpy(dtype=np.float64 if f.unit else object)
    return (*fields, *RATE_FIELDS), out


def carry_rates(table: Table, parts: Sequence[Table], keys: Sequence[str]) -> Table:
    """A merged `table` with the RATE_FIELDS of the ranks' `parts` (by `keys`): the ncu rank's values,
    the only ones there are. Unchanged when the parts have no roofline figures."""
    if RATE_FIELDS[0].key not in parts[0].frame:
        return table
    rate_keys = [f.key for f in RATE_FIELDS]
    stacked = pd.concat([p.frame[[*keys, *rate_keys]] for p in parts], ignore_index=True)
    known = stacked[stacked[rate_keys].notna().any(axis=1).to_numpy()]
    known = known.drop_duplicates(list(keys)).set_axis(_index(known.drop_duplicates(list(keys)), keys))
    joined = known.reindex(_index(table.frame, keys))
    frame = table.frame.assign(**{f.key: joined[f.key].to_numpy(dtype=np.float64 if f.unit else object)
                                  for f in RATE_FIELDS})
    fields = tuple(f for f in table.fields if f.key not in rate_keys) + RATE_FIELDS
    return Table(table.key, table.title, fields, frame[[f.key for f in fields]], table.key_value, table.csv)


MFU_FIELDS = (
    Field("iteration_flops", "FLOPs per Iteration (measured by ncu)", FLOP, digits=0),
    Field("achieved_tflop_per_s", "Achieved TFLOP/s (FLOPs per Iteration / Average Iteration Time)", TFLOP_PER_S,
          digits=2),
    Field("peak", "Peak (the pipe that did the most FLOPs)"),
    Field("peak_tflop_per_s", "Peak TFLOP/s", TFLOP_PER_S, digits=1),
    Field("mfu_pct", "Model FLOPs Utilization % (measured)", PERCENT, digits=1),
)


# The FLOP counts the utilization needs for every kernel: SIMT FP32 and FP16 and tensor work (FP64 is
# left out: few collections have it and little training work is FP64).
COUNTED = ("flops_fp32", "flops_fp16", "flops_tensor")
# Share of the ncu step's FLOPs that must fall in the run's iterations (kernels matched, weighted by the
# iterations launching them) for the utilization to describe the run: a kernel or two a library renamed
# may stay unmatched, a different program may not.
MATCHED_FLOPS = 0.9


def mfu_lines(ctx: RankContext, iteration_ns: float) -> tuple[list[tuple[Field, object]], tuple[str, ...]]:
    """The summary's model FLOPs utilization lines: FLOPs of one iteration as ncu measured them (each
    ncu kernel's FLOPs weighted by the share of the aggregated iterations launching it), over the
    average iteration time (`iteration_ns`), against the ceiling of the pipe that did the most FLOPs.
    Values are None (blank) where unknown (FLOP metrics missing, under MATCHED_FLOPS of the ncu FLOPs
    in the iterations, past the peak) and on ranks without the ncu report; a warning says why."""
    roof = ctx.roofline
    values: dict[str, object] = {f.key: None for f in MFU_FIELDS}
    warnings: list[str] = []
    name = Path(str(ctx.options.ncu_report)).name
    if roof is not None and roof.kernels[list(COUNTED)].isna().any(axis=None):
        warnings.append(f"summary: no Model FLOPs Utilization: {name} lacks FLOP metrics (see the roofline "
                        "warnings for the ncu options that collect them)")
    elif roof is not None:
        flops = iteration_flops(roof, ctx.roofline_match)
        counted = iteration_flops(roof)  # every ncu kernel's
        share = flops / counted if counted > 0 else 0.0
        if share < MATCHED_FLOPS:  # the ncu step is not (mostly) this run's: its FLOPs say little about it
            warnings.append(f"summary: no Model FLOPs Utilization: {100 * share:.0f} % of the FLOPs {name} counted "
                            "are in this run's iterations (see the roofline warning about matching)")
            flops = 0.0
        achieved = flops / iteration_ns * 1e9 if flops > 0 and iteration_ns > 0 else None  # FLOP/s
        peak = main_compute(roof)
        if flops > 0:
            values["iteration_flops"] = flops
        if achieved is not None:
            values["achieved_tflop_per_s"] = achieved / 1e12
        if peak is not None:
            resource, per_s = peak
            source = roof.ceilings.sources.get(resource, "")
            values["peak"] = f"{resource} ({'ncu' if source.startswith('ncu:') else source.split(':')[0]})"
            values["peak_tflop_per_s"] = per_s / 1e12
            if achieved is not None and achieved <= per_s:
                values["mfu_pct"] = 100.0 * achieved / per_s
            elif achieved is not None:
                warnings.append(f"summary: no Model FLOPs Utilization: the measured FLOPs per iteration over the "
                                f"average iteration time ({achieved / 1e12:.1f} TFLOP/s) pass the {values['peak']} "
                                f"peak; is {name} one step of this run?")
    return [(f, values[f.key]) for f in MFU_FIELDS], tuple(warnings)


def carry_lines(values: Sequence[Mapping[str, object]]) -> list[tuple[Field, object]]:
    """The MFU lines of merged summaries: the ncu rank's (the first known value of each); none when
    the ranks' summaries have no such lines."""
    if MFU_FIELDS[0].key not in values[0]:
        return []
    return [(f, next((v[f.key] for v in values if v.get(f.key) is not None), None)) for f in MFU_FIELDS]


TC_MISMATCH = Field("tc_name_mismatch_kernel_names", "TC Use Unlike Name Kernel Names")


def tc_mismatch_names(ctx: RankContext, op_keys: pd.Index) -> np.ndarray:
    """Per op (`op_keys`: keys of ``ctx.ops.ops``): the distinct short names of its kernels in the
    aggregated iterations whose measured Tensor Core use differs from the name rules, sorted and
    ', '-joined ('' none); None on a rank without the ncu report."""
    if ctx.roofline is None:
        return np.full(len(op_keys), None, dtype=object)
    work = ctx.work
    instance = ctx.ops.work_instance
    mine = (work["kind"].to_numpy() == KERNEL) & np.isin(instance, ctx.op_instances.index.to_numpy())
    name_ids = work["name_id"].to_numpy()[mine]
    differ = ctx.uses_tc(name_ids) != ctx.uses_tc_by_name(name_ids)
    keys = ctx.ops.instances["key"].to_numpy()[instance[mine][differ]]
    short = ctx.profile.kernels["short_name_id"].to_numpy()[work["row"].to_numpy()[mine][differ]]
    pairs = pd.DataFrame({"key": keys, "short": short}).drop_duplicates()
    pairs["name"] = ctx.profile.strings.decode(pairs["short"]).to_numpy()
    joined = pairs.groupby("key")["name"].agg(lambda names: ", ".join(sorted(set(names))))
    return joined.reindex(op_keys).fillna("").to_numpy(dtype=object)


def tc_warning(ctx: RankContext) -> tuple[str, ...]:
    """The Tensor Core disagreement warning of this rank's ncu report (none without one)."""
    if ctx.roofline is None:
        return ()
    warning = tc_disagreements(ctx.roofline).warning
    return (warning,) if warning else ()


# --- the report -------------------------------------------------------------------------------------

@report("roofline", inputs=(NCU,), images=IMAGES)
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per kernel and op type, from Nsight Compute: FLOPs, bytes, intensity, achieved rates, bound, % of ceiling."""
    roof, match = ctx.roofline, ctx.roofline_match
    if roof is None:
        raise RuntimeError("the roofline report is built on the rank with the ncu report only")
    return roofline_report(roof, match, ncu_kernel_ops(ctx)["op_type"], source=Path(str(ctx.options.ncu_report)).name,
                           rank=ctx.rank)


def build_alone(options: Options) -> Report:
    """The report from the ncu report alone (no nsys export): rates from ncu's times, no op types."""
    if options.ncu_report is None:
        raise ValueError("build_alone needs options.ncu_report")
    roof, _ = analyse(options.ncu_report, peaks=options.peaks)
    return roofline_report(roof, None, None, source=Path(str(options.ncu_report)).name)


@merges("roofline")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """The rank with the ncu report built it: the job's report is that rank's."""
    if len(reports) != 1:
        raise RuntimeError(f"the roofline report was built on {len(reports)} ranks, not on the ncu rank only")
    return reports[0]
