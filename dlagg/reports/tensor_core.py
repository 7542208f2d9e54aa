"""Tensor Core report: one row per Tensor-Core-eligible op with its TC and non-TC kernel time.

Times here are sums of kernel durations (memcpy/memset are not kernels and are left out), so
``Total GPU Time`` can differ from the detail report's GPU time, which is the union of all the
op's GPU work. TC Utilization = TC kernel time / total kernel time of the op. Kernel counts are
distinct kernels by short name, as DLProf counts them (the names listed next to them), not launches;
a kernel is listed as a TC kernel of the op when any of its launches there ran on Tensor Cores. With
--ncu_report, Tensor Core use is ncu's measurement where a launch of the kernel was profiled
(``RankContext.uses_tc``), and a column lists the op's kernels whose measured use differs from the name
rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..context import RankContext
from ..ops.aggregate import op_usage
from ..timeline.correlate import KERNEL
from .base import JobFigures, Report, merges, report
from .detail import empty, kernel_tc_share, no_eligible_warning, no_ops_warning
from .figures import ANY, COUNT, DERIVED, KEY, MIN, NS, PERCENT, SUM, Field, Table, merge_tables, summed_over
from .roofline import TC_MISMATCH, tc_mismatch_names, tc_warning

FIELDS = (
    Field("op_id", "Op ID"),
    Field("op_name", "Op Name"),
    Field("direction", "Direction"),
    Field("op_type", "Op Type"),
    Field("uses_tc", "Uses TC", merge=ANY),
    Field("kernel_time_ns", "Total GPU Time (ns)", NS, merge=SUM),
    Field("tc_kernel_time_ns", "TC GPU Time (ns)", NS, merge=SUM),
    Field("non_tc_kernel_time_ns", "Non-TC GPU Time (ns)", NS, merge=SUM),
    Field("tc_utilization_pct", "TC Utilization (%)", PERCENT, digits=1, merge=DERIVED),
    Field("kernels", "Total Kernel Count", COUNT, merge=DERIVED),
    Field("tc_kernels", "TC Kernel Count", COUNT, merge=DERIVED),
    Field("tc_kernel_names", "TC Kernel Names"),
    Field("non_tc_kernels", "Non-TC Kernel Count", COUNT, merge=DERIVED),
    Field("non_tc_kernel_names", "Non-TC Kernel Names"),
    Field("op_key", "Op Key", merge=KEY, csv=False),
    Field("order", "Order Of First Appearance", merge=MIN, csv=False),
)


def _kernel_names(ctx: RankContext, keys: pd.Index) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Per op key: distinct short names of its TC kernels and of its other kernels, sorted, ', '-joined,
    and the number of distinct short names of all its kernels."""
    work = ctx.work
    instance = ctx.ops.work_instance
    selected = ctx.op_instances
    mine = (work["kind"].to_numpy() == KERNEL) & np.isin(instance, selected.index.to_numpy())
    key = ctx.ops.instances["key"].to_numpy()[instance[mine]]
    names = work["name_id"].to_numpy()[mine]
    tc = ctx.uses_tc(names)
    short = ctx.short_name_ids(names)
    wanted = np.isin(key, keys.to_numpy())
    key, short, tc = key[wanted], short[wanted], tc[wanted]
    # a kernel (short name) is a TC kernel of the op when any of its launches there ran on Tensor Cores
    span = int(short.max()) + 2 if len(short) else 1  # short ids from -1 (unknown)
    pairs, inverse = np.unique(key * span + short + 1, return_inverse=True)
    pair_tc = np.bincount(np.ravel(inverse), weights=tc, minlength=len(pairs)) > 0
    pair_names = ctx.profile.strings.decode(pairs % span - 1).to_numpy(dtype=object)
    # in Python over the distinct (op, kernel) pairs: a pandas group-by with a join per op costs more than the work
    tc_names: dict[int, set[str]] = {}
    other_names: dict[int, set[str]] = {}
    for k, name, uses in zip((pairs // span).tolist(), pair_names.tolist(), pair_tc.tolist(), strict=True):
        (tc_names if uses else other_names).setdefault(k, set()).add(name)
    every = {k: tc_names.get(k, set()) | other_names.get(k, set()) for k in {*tc_names, *other_names}}

    def joined(per_key: dict[int, set[str]]) -> pd.Series:
        return pd.Series({k: ", ".join(sorted(names)) for k, names in per_key.items()}, dtype=object)

    return joined(tc_names), joined(other_names), pd.Series({k: len(n) for k, n in every.items()}, dtype=np.int64)


NO_ELIGIBLE = "tensor: no Tensor-Core-eligible op"  # the start of `no_eligible_warning`'s line in this report
OPS_USING_TC = re.compile(r"; (\d+) op\(s\) of other types ran Tensor Core kernels")


@report("tensor", file_suffix="tensor_core", requires={"kernels"})
def build(ctx: RankContext, deps: Mapping[str, Report]) -> Report:
    """Per Tensor-Core-eligible op: TC and non-TC kernel time, TC utilization, kernel counts and names."""
    inst = ctx.op_instances
    eligible = inst[inst["tc_eligible"].to_numpy(dtype=bool)]
    fields = FIELDS if ctx.options.ncu_report is None else (*FIELDS, TC_MISMATCH)
    warnings: tuple[str, ...] = ()
    if len(inst) and not eligible["kernel_time"].sum():  # the summary's warning, word for word: one cause
        warnings = ("tensor: " + no_eligible_warning(int(op_usage(inst).sum()), kernel_tc_share(ctx)),)
    if eligible.empty:
        return Report("tensor", "tensor_core", (Table("ops", "Tensor Core Report", fields, empty(fields)),),
                      warnings=(warnings if len(inst) else no_ops_warning(ctx, "tensor")) + tc_warning(ctx))
    grouped = eligible.groupby("key", sort=False)
    sums = grouped[["kernel_time", "tc_kernel_time"]].sum()
    ops = ctx.ops.ops.reindex(sums.index)
    tc_names, other_names, distinct = _kernel_names(ctx, sums.index)
    tc_names, other_names = tc_names.reindex(sums.index).fillna(""), other_names.reindex(sums.index).fillna("")
    total = sums["kernel_time"].to_numpy()
    tc_time = sums["tc_kernel_time"].to_numpy()
    table = pd.DataFrame({
        "op_id": ops["op_id"].to_numpy(),
        "op_name": ops["op_name"].to_numpy(),
        "direction": ops["direction"].to_numpy(),
        "op_type": ops["op_type"].to_numpy(),
        "uses_tc": tc_time > 0,
        "kernel_time_ns": total,
        "tc_kernel_time_ns": tc_time,
        "non_tc_kernel_time_ns": total - tc_time,
        "tc_utilization_pct": 100.0 * tc_time / np.where(total > 0, total, 1),
        "kernels": distinct.reindex(sums.index).fillna(0).to_numpy(dtype=np.int64),
        "tc_kernels": _count(tc_names).to_numpy(),
        "tc_kernel_names": tc_names.to_numpy(),
        "non_tc_kernels": _count(other_names).to_numpy(),
        "non_tc_kernel_names": other_names.to_numpy(),
        "op_key": ops["op_key"].to_numpy(),
        "order": ops["order"].to_numpy(),
    })
    if ctx.options.ncu_report is not None:
        table[TC_MISMATCH.key] = tc_mismatch_names(ctx, sums.index)
    table = table.sort_values(["kernel_time_ns", "order"], ascending=[False, True], kind="stable")
    return Report("tensor", "tensor_core", (Table("ops", "Tensor Core Report", fields,
                                                  table[[f.key for f in fields]].reset_index(drop=True)),),
                  warnings=warnings + tc_warning(ctx))


def _count(names: pd.Series) -> pd.Series:
    """Number of names in each ', '-joined list."""
    return names.map(lambda text: len([n for n in str(text).split(", ") if n])).astype(np.int64)


def _union_names(values: pd.Series) -> str:
    """', '-joined kernel-name lists of several ranks as one sorted list of distinct names."""
    return ", ".join(sorted({n for v in values for n in str(v).split(", ") if n}))


@merges("tensor")
def merge(reports: Sequence[Report], job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """The same op combines over ranks: kernel times and counts add up, kernel names are united."""
    frames = [r.main.frame for r in reports]
    stacked = pd.concat(frames, ignore_index=True)
    names = stacked.groupby("op_key", sort=False)[["tc_kernel_names", "non_tc_kernel_names"]].agg(_union_names)
    every = (stacked["tc_kernel_names"].astype(str) + ", " + stacked["non_tc_kernel_names"].astype(str)).groupby(
        stacked["op_key"], sort=False).agg(_union_names)

    def derive(frame: pd.DataFrame) -> pd.DataFrame:
        total = frame["kernel_time_ns"].to_numpy()
        tc = frame["tc_kernel_time_ns"].to_numpy()
        out = frame.assign(tc_utilization_pct=100.0 * tc / np.where(total > 0, total, 1))
        tc_names = names["tc_kernel_names"].reindex(out["op_key"]).reset_index(drop=True)
        other_names = names["non_tc_kernel_names"].reindex(out["op_key"]).reset_index(drop=True)
        return out.assign(tc_kernel_names=tc_names.to_numpy(), non_tc_kernel_names=other_names.to_numpy(),
                          kernels=_count(every.reindex(out["op_key"]).reset_index(drop=True)).to_numpy(),
                          tc_kernels=_count(tc_names).to_numpy(), non_tc_kernels=_count(other_names).to_numpy())

    table = merge_tables([r.main for r in reports], derive)
    frame = job.renumber_ops(table.frame).sort_values(["kernel_time_ns", "order"], ascending=[False, True],
                                                      kind="stable")
    return Report("tensor", "tensor_core", (summed_over(table.with_frame(frame), len(reports)),),
                  warnings=_job_warnings(reports))


def _job_warnings(reports: Sequence[Report]) -> tuple[str, ...]:
    """The ranks' warnings, each once. A rank's no-eligible-op line quotes its own Tensor Core share of its kernel
    time; where the ranks' lines differ they become one line without the share (the job summary's line quotes the
    job's), keeping the largest count of ops of other types that ran Tensor Core kernels."""
    warnings = list(dict.fromkeys(w for r in reports for w in r.warnings))
    lines = [w for w in warnings if w.startswith(NO_ELIGIBLE)]
    if len(lines) < 2:
        return tuple(warnings)
    counts = [int(m.group(1)) for w in lines if (m := OPS_USING_TC.search(w))]
    at = warnings.index(lines[0])
    kept = [w for w in warnings if not w.startswith(NO_ELIGIBLE)]
    kept.insert(at, "tensor: " + no_eligible_warning(max(counts, default=0)))
    return tuple(kept)
