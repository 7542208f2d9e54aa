"""Report ``compare``: two profiles' figures compared, figure by figure, and a verdict (``--baseline``).

Contract:

- The report is a job report that reads an input besides the ranks' exports (``BASELINE``): the baseline's
  `Side` (side.py), in ``job.given``, read by the run (``dlagg/baseline.py``: an export reduced exactly as the
  current one, or saved figures); the current side is the job's figures and its reports ``NEEDS`` (and detail,
  for the op-set warning). It is written whenever a baseline is given, asked for or not.
- ``compare(baseline, current) -> Comparison`` is a pure function of the two sides' figures.
  Figures are joined by their stable keys (field keys, op types, long kernel names, detector
  names), never by display titles, so summary lines added or removed later simply appear or drop out.
- ``Comparison.report`` is the report: its main table has one row per compared figure (Section, Name,
  Baseline, Current, Delta, Delta %, Note in the CSV; the row's stable Key and Unit in JSON), then three tables
  for JSON/HTML only: the verdict's figures, the two profiles, and the iteration-time samples of both sides
  that the verdict's interval is drawn from.
- ``Comparison.verdict`` holds the per-iteration time before and after, their ratio with a 95 %
  bootstrap confidence interval from the per-iteration samples (the summary's ``iterations``
  table), the three op types whose GPU time changed most, the problems gone and new, and the
  verdict's one-paragraph text. ``comparison_of(report)`` reads it back from the report's tables (what
  ``pipeline.Result.comparison`` gives).

docs/compare.md defines every row and the statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .base import BASELINE, JOB, NSYS, JobFigures, Report, report
from .figures import BYTES, COUNT, NS, PERCENT, Field, Table, key_values
from .side import NEEDS, Side

COMPARE = "compare"  # the report's name and file suffix
SUMMARY, OP_TYPES, KERNELS, FINDINGS = "Summary", "Op Types", "Kernels", "Findings"
UNITS = (NS, PERCENT, COUNT, BYTES)  # a field with one of these units is a figure to compare
APPEARED, DISAPPEARED = "appeared", "disappeared"
# Kernels that ran on both sides shown (by largest absolute change); every kernel that appeared
# or disappeared is shown too.
TOP_KERNELS = 20
CONTRIBUTORS = 3  # op types named in the verdict

# Statistics (docs/compare.md). The seed is fixed so the same two profiles always give the same
# interval. With 10,000 resamples the interval's ends move by a standard deviation of about 0.001
# (in ratio units) from one seed to another (tests/test_compare.py checks it).
RESAMPLES = 10_000
SEED = 12
CONFIDENCE = 0.95
MIN_ITERATIONS = 3  # per side: fewer give no interval
RESAMPLE_CELLS = 1 << 22  # indices drawn at once (32 MB): bounds memory for long profiles
# A side whose ops share less than this of their GPU time with the other side's ops is likely
# another model: warned. An AMP change of the same model keeps 96 % (resnet_fp32 -> resnet_amp).
OP_OVERLAP_WARN = 0.8
# The verdict says the iteration time did not follow the GPU time when the op GPU time changed
# by at least this share of the baseline iteration, yet the iteration time did not significantly
# move the same way.
GPU_SHIFT_SHARE = 0.05

# Short names of the expert-systems detectors for the verdict and the Findings rows (the key is
# the detector's registered name; a detector not listed here is named by its key).
FINDING_LABELS = {
    "key_node": "no key node",
    "iteration_variation": "iteration time varies",
    "launch_bound": "launch bound",
    "host_sync": "host waits for the GPU",
    "pageable_copies": "pageable host copies",
    "exposed_copies": "copies not overlapped",
    "amp": "mixed precision not used",
    "underutilized_gpu": "GPU underutilized",
    "input_pipeline": "input pipeline bound",
    "dominant_kernels": "few kernels dominate",
    "straggler": "straggler rank",
    "communication": "exposed communication",
}

FIELDS = (
    Field("section", "Section"),
    Field("name", "Name"),
    Field("baseline", "Baseline", digits=1),
    Field("current", "Current", digits=1),
    Field("delta", "Delta", digits=1),
    Field("delta_pct", "Delta %", PERCENT, digits=1),
    Field("note", "Note"),
    Field("key", "Key", csv=False),
    Field("unit", "Unit", csv=False),
)
PROFILE_FIELDS = (
    Field("side", "Side"),
    Field("source", "Source"),
    Field("ranks", "Ranks", COUNT),
    Field("gpus", "GPUs"),
    Field("key_node", "Key Node"),
    Field("aggregated_iterations", "Aggregated Iterations", COUNT),
    Field("iteration_time_avg_ns", "Average Iteration Time (ns)", NS, digits=1),
)
SAMPLE_FIELDS = (
    Field("side", "Side"),
    Field("iteration", "Iteration"),
    Field("ranks", "Ranks", COUNT),
    Field("iteration_time_ns", "Iteration Time (ns)", NS, digits=1),
)


@dataclass(frozen=True)
class Samples:
    """Per-iteration time samples of one side: one cluster per aggregated iteration (its ranks' rows)."""

    sums: np.ndarray  # float64: the iteration's duration summed over the ranks that have it
    counts: np.ndarray  # float64: how many ranks have it
    mean: float  # mean over every (rank, iteration) row: the summary's Average Iteration Time
    iterations: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # each cluster's number

    @classmethod
    def of(cls, side: Side) -> Samples:
        table = side.table("summary", "iterations")
        if table is None or table.frame.empty:
            return cls(np.empty(0), np.empty(0), math.nan)
        frame = table.frame
        aggregated = frame[frame["aggregated"].to_numpy(dtype=bool)]
        durations = aggregated["duration_ns"].to_numpy(dtype=np.float64)
        numbers, inverse = np.unique(aggregated["iteration"].to_numpy(), return_inverse=True)
        sums = np.bincount(inverse, weights=durations, minlength=len(numbers))
        counts = np.bincount(inverse, minlength=len(numbers)).astype(np.float64)
        return cls(sums, counts, float(durations.mean()) if len(durations) else math.nan, numbers)

    def rows(self, side: str) -> pd.DataFrame:
        """The samples as rows of the compare report's ``iterations`` table (SAMPLE_FIELDS); an
        iteration's time is the mean over its ranks, the value the bootstrap resamples."""
        return pd.DataFrame({"side": side, "iteration": self.iterations, "ranks": self.counts.astype(np.int64),
                             "iteration_time_ns": self.sums / self.counts if len(self.sums) else self.sums},
                            columns=[f.key for f in SAMPLE_FIELDS])


def bootstrap_ratio(baseline: Samples, current: Samples, *, resamples: int = RESAMPLES, seed: int = SEED,
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(current) / mean(baseline).

    Each resample draws each side's iterations with replacement (a side's ranks stay together in
    their iteration: they are not independent samples), independently for the two sides; the
    resamples are drawn in chunks as index matrices (no loop over resamples or iterations).
    """
    nb, nc = len(baseline.sums), len(current.sums)
    rng = np.random.default_rng(seed)
    per = max(1, RESAMPLE_CELLS // max(nb, nc, 1))
    ratios = np.empty(resamples)
    for first in range(0, resamples, per):  # chunks of resamples, to bound memory
        m = min(per, resamples - first)
        i = rng.integers(0, nb, size=(m, nb))
        j = rng.integers(0, nc, size=(m, nc))
        before = baseline.sums[i].sum(axis=1) / baseline.counts[i].sum(axis=1)
        after = current.sums[j].sum(axis=1) / current.counts[j].sum(axis=1)
        ratios[first:first + m] = after / before
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Verdict:
    baseline_ns: float  # mean iteration time (the summaries' Average Iteration Time)
    current_ns: float
    ratio: float  # current / baseline
    low: float  # the ratio's confidence interval (NaN when a side has too few iterations)
    high: float
    iterations: tuple[int, int]  # samples (aggregated iterations) of the baseline and the current side
    gpu_ns: tuple[float, float]  # op GPU time per iteration, baseline and current (NaN without ops)
    contributors: tuple[tuple[str, float], ...]  # (op type, change of its GPU time per iteration), largest first
    gone: tuple[str, ...]  # detectors that fired on the baseline and not on the current profile
    new: tuple[str, ...]  # and the other way round
    text: str

    @property
    def significant(self) -> bool:
        """The interval excludes 1."""
        return not (math.isnan(self.low) or self.low <= 1.0 <= self.high)

    @property
    def change(self) -> str:
        if not self.significant:
            return "no significant change"
        return "slower" if self.ratio > 1.0 else "faster"

    def slower_than(self, pct: float) -> bool:
        """Significantly slower, by more than `pct` percent (--fail_if_slower)."""
        return self.significant and self.ratio > 1.0 and 100.0 * (self.ratio - 1.0) > pct


@dataclass(frozen=True)
class Comparison:
    report: Report
    verdict: Verdict


# --- rows ---------------------------------------------------------------------------------------

def _number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)) \
        and not (isinstance(value, (float, np.floating)) and math.isnan(value))


def _row(section: str, name: str, key: str, unit: str, baseline: object, current: object,
         note: str = "") -> dict[str, object]:
    delta = pct = None
    if _number(baseline) and _number(current):
        delta = current - baseline  # type: ignore[operator]
        pct = 100.0 * delta / baseline if baseline else None
    return {"section": section, "name": name, "baseline": baseline if _number(baseline) else None,
            "current": current if _number(current) else None, "delta": delta, "delta_pct": pct, "note": note,
            "key": key, "unit": unit}


def _per_iteration_title(title: str) -> str:
    """"GPU Time (ns)" or "GPU Time (ns, sum over 2 ranks)" -> "GPU Time per Iteration (ns)"."""
    stem = title.split(" (ns")[0]
    return f"{stem} per Iteration (ns)"


def summary_rows(baseline: Side, current: Side, base_samples: Samples, cur_samples: Samples) -> list[dict]:
    """Every figure (a field with a unit) of the summary's CSV tables, by table and field key; the
    iteration time's median and interquartile range; the totals of its row tables per iteration."""
    rows: list[dict] = []
    tables = {side: {t.key: t for t in (s.reports["summary"].tables if "summary" in s.reports else ()) if t.csv}
              for side, s in (("baseline", baseline), ("current", current))}
    keys = list(dict.fromkeys([*tables["current"], *tables["baseline"]]))
    for key in keys:  # a handful of tables
        b, c = tables["baseline"].get(key), tables["current"].get(key)
        first = c if c is not None else b
        assert first is not None
        if first.key_value:
            bv, cv = (b.values if b is not None else {}), (c.values if c is not None else {})
            fields = {f.key: f for t in (b, c) if t is not None for f in t.fields if f.csv and f.unit in UNITS}
            for fkey, f in fields.items():  # a figure per line
                rows.append(_row(SUMMARY, f.title, f"summary:{key}.{fkey}", f.unit, bv.get(fkey), cv.get(fkey),
                                 _missing_note(fkey in bv, fkey in cv)))
            if key == "iterations_summary":
                rows += _spread_rows(base_samples, cur_samples)
            continue
        rows += _row_table_rows(b, c, baseline.iterations, current.iterations)
    if "iterations_summary" not in keys:
        rows += _spread_rows(base_samples, cur_samples)
    return rows


def _missing_note(in_baseline: bool, in_current: bool) -> str:
    if in_baseline and in_current:
        return ""
    return "not in the baseline's summary" if in_current else "not in the current summary"


def _spread_rows(baseline: Samples, current: Samples) -> list[dict]:
    """Median and interquartile range of the iteration times (every aggregated (rank, iteration) row)."""
    def stats(samples: Samples) -> tuple[float | None, float | None]:
        if not len(samples.sums):
            return None, None
        # the clusters' rows are not kept: with one rank each cluster is one iteration; with several, the
        # per-iteration mean over ranks stands for the iteration
        values = samples.sums / samples.counts
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        return float(median), float(q3 - q1)

    (bm, bi), (cm, ci) = stats(baseline), stats(current)
    return [_row(SUMMARY, "Median Iteration Time (ns)", "summary:iterations.median_ns", NS, bm, cm),
            _row(SUMMARY, "Iteration Time Interquartile Range (ns)", "summary:iterations.iqr_ns", NS, bi, ci)]


def _row_table_rows(baseline: Table | None, current: Table | None, base_its: int, cur_its: int) -> list[dict]:
    """A summary table of labelled rows (All Kernels, All Ops): each row's figures; times per iteration."""
    first = current if current is not None else baseline
    assert first is not None
    labels = [f.key for f in first.fields if not f.unit]
    figures = [f for f in first.fields if f.csv and f.unit in UNITS]
    if not labels or not figures:
        return []

    def indexed(table: Table | None, count: int) -> pd.DataFrame | None:
        if table is None:
            return None
        frame = table.frame.set_index(labels)
        for f in figures:
            if f.unit == NS and f.key in frame:
                frame[f.key] = frame[f.key].to_numpy(dtype=np.float64) / count if count else np.nan
        return frame

    b, c = indexed(baseline, base_its), indexed(current, cur_its)
    index = list(dict.fromkeys([*(c.index if c is not None else ()), *(b.index if b is not None else ())]))
    rows = []
    for label in index:  # four rows a table
        for f in figures:
            bv = b.at[label, f.key] if b is not None and label in b.index and f.key in b else None
            cv = c.at[label, f.key] if c is not None and label in c.index and f.key in c else None
            text = label if isinstance(label, str) else " ".join(map(str, label))
            title = _per_iteration_title(f.title) if f.unit == NS else f.title
            rows.append(_row(SUMMARY, f"{text}: {title}", f"summary:{first.key}.{text}.{f.key}",
                             f.unit, _plain(bv), _plain(cv)))
    return rows


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def _keyed(section: str, prefix: str, baseline: pd.Series | None, current: pd.Series | None,
           names: Mapping[str, str], total: str) -> pd.DataFrame:
    """Rows of one figure per item (op type, kernel) joined by the item's key, after a total row.

    A side without the figure at all (`None`: no op or kernel data) has missing values; an item only
    one side ran has 0 on the other (it ran for no time there), noted as appeared or disappeared.
    """
    index = pd.Index(list(dict.fromkeys([*(current.index if current is not None else ()),
                                         *(baseline.index if baseline is not None else ())])), dtype=object)
    b = baseline.reindex(index) if baseline is not None else pd.Series(np.nan, index=index)
    c = current.reindex(index) if current is not None else pd.Series(np.nan, index=index)
    note = np.full(len(index), "", dtype=object)
    if baseline is not None and current is not None:
        note[(b.isna() & c.notna()).to_numpy()] = APPEARED
        note[(c.isna() & b.notna()).to_numpy()] = DISAPPEARED
        b, c = b.fillna(0.0), c.fillna(0.0)
    delta = c - b
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(b.to_numpy() != 0, 100.0 * delta.to_numpy() / b.to_numpy(), np.nan)
    frame = pd.DataFrame({
        "section": section,
        "name": [names.get(k, str(k)) for k in index],  # one per item
        "baseline": b.to_numpy(), "current": c.to_numpy(), "delta": delta.to_numpy(), "delta_pct": pct,
        "note": note, "key": [f"{prefix}:{k}" for k in index], "unit": NS,
    })
    order = np.lexsort((frame["key"].to_numpy(dtype=str), -np.abs(frame["delta"].fillna(0.0).to_numpy())))
    frame = frame.iloc[order]
    sums = [s.sum() if s is not None else np.nan for s in (baseline, current)]
    head = pd.DataFrame([_row(section, total, f"{prefix}_total", NS, float(sums[0]), float(sums[1]))], dtype=object)
    return pd.concat([head, frame], ignore_index=True)


def per_iteration(side: Side, report: str, table: str, key: str, value: str) -> pd.Series | None:
    """A report table's `value` summed per `key` and divided by the side's aggregated iterations (None
    when the side has no rows: the report lacks data)."""
    found = side.table(report, table)
    if found is None or found.frame.empty or not side.iterations:
        return None
    frame = found.frame
    sums = frame.groupby(frame[key].astype(object), sort=False)[value].sum()
    return sums.astype(np.float64) / side.iterations


def op_type_rows(baseline: Side, current: Side) -> pd.DataFrame:
    b = per_iteration(baseline, "op_type", "op_types", "op_type", "gpu_time_total_ns")
    c = per_iteration(current, "op_type", "op_types", "op_type", "gpu_time_total_ns")
    return _keyed(OP_TYPES, "op_type", b, c, {}, "All op types: GPU Time per Iteration (ns)")


def kernel_rows(baseline: Side, current: Side) -> pd.DataFrame:
    """Every kernel that appeared or disappeared, and the TOP_KERNELS others with the largest change.
    A kernel is its short name, as in the kernel report (one row per short name and op)."""
    b = per_iteration(baseline, "kernel", "kernels", "kernel_name", "gpu_time_total_ns")
    c = per_iteration(current, "kernel", "kernels", "kernel_name", "gpu_time_total_ns")
    rows = _keyed(KERNELS, "kernel", b, c, {}, "All kernels except memory operations: GPU Time per Iteration (ns)")
    head, items = rows.iloc[:1], rows.iloc[1:]
    changed = items["note"].to_numpy() != ""
    kept = changed | ((np.cumsum(~changed) <= TOP_KERNELS) & ~changed)  # items are sorted by |delta|
    return pd.concat([head, items[kept]], ignore_index=True)


@dataclass(frozen=True)
class _Findings:
    fired: dict[str, tuple[object, str]]  # detector -> (time at stake per iteration or None, problem)
    not_run: frozenset[str]  # detectors that could not run for lack of data


def _findings_of(side: Side) -> _Findings | None:
    table = side.table("expert_systems", "findings")
    if table is None:
        return None
    frame = table.frame
    fired = {str(d): (None if pd.isna(s) else _plain(s), str(p))  # integer ns (the report rounds them)
             for d, s, p in zip(frame["detector"], frame["time_at_stake_ns"], frame["problem"], strict=True)}
    statuses = side.table("expert_systems", "detectors")
    not_run = frozenset() if statuses is None else frozenset(
        statuses.frame.loc[statuses.frame["status"].astype(str) == "not run", "detector"].astype(str))
    return _Findings(fired, not_run)


def _state(findings: _Findings | None, detector: str) -> tuple[bool | None, object]:
    """(fired?, time at stake: 0 when silent) of a detector on one side; (None, None) where it could not run."""
    if findings is None or detector in findings.not_run:
        return None, None
    if detector in findings.fired:
        return True, findings.fired[detector][0]
    return False, 0


def finding_rows(baseline: Side, current: Side) -> tuple[pd.DataFrame, tuple[str, ...], tuple[str, ...]]:
    """One row per detector that fired on either side; Baseline/Current: fired (yes/no, blank when it could
    not run there); Delta: the change of its time at stake per iteration. Also the detectors gone and new."""
    b, c = _findings_of(baseline), _findings_of(current)
    detectors = list(dict.fromkeys([*(c.fired if c else ()), *(b.fired if b else ())]))
    rows, gone, new = [], [], []
    for detector in detectors:  # a dozen detectors
        (bf, bs), (cf, cs) = _state(b, detector), _state(c, detector)
        delta = cs - bs if _number(bs) and _number(cs) else None  # type: ignore[operator]
        pct = 100.0 * delta / bs if delta is not None and bf and cf and bs else None
        problem = (c.fired if c and detector in c.fired else b.fired if b else {}).get(detector, (None, ""))[1]
        rows.append({"section": FINDINGS, "name": label(detector), "baseline": bf, "current": cf, "delta": delta,
                     "delta_pct": pct, "note": problem, "key": f"finding:{detector}", "unit": NS})
        if bf and cf is False:
            gone.append(detector)
        elif cf and bf is False:
            new.append(detector)
    frame = pd.DataFrame(rows, columns=[f.key for f in FIELDS], dtype=object)
    if len(frame):
        magnitude = -frame["delta"].astype("Float64").abs().fillna(-1.0).to_numpy(dtype=np.float64)
        frame = frame.iloc[np.argsort(magnitude, kind="stable")]
    return frame, tuple(gone), tuple(new)


def label(detector: str) -> str:
    return FINDING_LABELS.get(detector, detector.replace("_", " "))


# --- warnings -----------------------------------------------------------------------------------

def _counted(names: tuple[str, ...]) -> str:
    counts = pd.Series(names, dtype=object).value_counts(sort=False)
    return ", ".join(f"{n} x{k}" if k > 1 else str(n) for n, k in counts.items()) or "none recorded"


def differences(baseline: Side, current: Side) -> list[str]:
    """What differs between the two profiles beyond the code under test: one warning each."""
    warnings = []
    if sorted(baseline.gpus) != sorted(current.gpus):
        warnings.append(f"compare: the profiles ran on different GPUs (baseline: {_counted(baseline.gpus)}; current: "
                        f"{_counted(current.gpus)}): the comparison measures the hardware as well as the change")
    if len(baseline.ranks) != len(current.ranks):
        warnings.append(f"compare: the baseline has {len(baseline.ranks)} rank(s), the current profile "
                        f"{len(current.ranks)}: GPU times per iteration are per rank (mean over ranks)")
    if baseline.key_nodes != current.key_nodes:
        warnings.append(f"compare: the key nodes differ (baseline: {', '.join(baseline.key_nodes)}; current: "
                        f"{', '.join(current.key_nodes)}): an iteration may not be the same unit of work")
    counts = (baseline.iterations, current.iterations)
    if counts[0] != counts[1]:
        warnings.append(f"compare: the baseline aggregates {counts[0]} iterations, the current profile {counts[1]}: "
                        "totals (Wall Clock Time) differ for that reason alone; compare the per-iteration figures")
    overlap = op_overlap(baseline, current)
    if overlap is not None and min(overlap[:2]) < OP_OVERLAP_WARN:
        shared_b, shared_c, n_b, n_c, common = overlap
        warnings.append(f"compare: the op sets differ: {shared_b:.0%} of the baseline's op GPU time and {shared_c:.0%} "
                        f"of the current's is in ops both profiles have ({n_b} and {n_c} ops, {common} in common); "
                        "are these profiles of the same model?")
    for side, name in ((baseline, "baseline"), (current, "current profile")):
        op_types = side.table("op_type", "op_types")
        if op_types is None or op_types.frame.empty:
            warnings.append(f"compare: the {name} has no op figures (no NVTX op ranges): its op type rows are missing")
    return warnings


def op_overlap(baseline: Side, current: Side) -> tuple[float, float, int, int, int] | None:
    """(share of the baseline's op GPU time in ops the current has, the same for the current, ops on each
    side, ops in common), by op key; None when a side has no ops."""
    tables = [s.table("detail", "ops") for s in (baseline, current)]
    if any(t is None or t.frame.empty for t in tables):
        return None
    b, c = (t.frame.groupby(t.frame["op_key"].astype(object))["gpu_time_total_ns"].sum()  # type: ignore[union-attr]
            for t in tables)
    common = b.index.intersection(c.index)

    def shared(times: pd.Series) -> float:
        total = float(times.sum())
        return float(times[common].sum()) / total if total else float(len(common) == len(times))

    return shared(b), shared(c), len(b), len(c), len(common)


# --- the verdict ----------------------------------------------------------------------------------

def _ms(ns: float, sign: bool = False) -> str:
    return f"{ns / 1e6:{'+' if sign else ''},.3f} ms"


def _value(side: Side, table: str, key: str) -> float | None:
    found = side.table("summary", table)
    value = found.values.get(key) if found is not None and found.key_value else None
    return float(value) if _number(value) else None  # type: ignore[arg-type]


def verdict(baseline: Side, current: Side, b: Samples, c: Samples, op_types: pd.DataFrame,
            gone: tuple[str, ...], new: tuple[str, ...]) -> Verdict:
    ratio = c.mean / b.mean if b.mean and not math.isnan(b.mean) else math.nan
    if min(len(b.sums), len(c.sums)) >= MIN_ITERATIONS and not math.isnan(ratio):
        low, high = bootstrap_ratio(b, c)
    else:
        low = high = math.nan
    draft = Verdict(b.mean, c.mean, ratio, low, high, (len(b.sums), len(c.sums)), _gpu(op_types),
                    _contributors(op_types), gone, new, "")
    return replace(draft, text=verdict_text(draft, baseline, current))


def _contributors(op_types: pd.DataFrame) -> tuple[tuple[str, float], ...]:
    """The CONTRIBUTORS op types whose GPU time per iteration changed most, largest change first, with their change;
    `op_types`: the Op Types rows (`op_type_rows`), the total first."""
    items = op_types.iloc[1:]
    moved = items[items["delta"].notna() & (items["delta"] != 0)]
    order = np.argsort(-np.abs(moved["delta"].to_numpy(dtype=np.float64)), kind="stable")
    return tuple((str(n), float(d)) for n, d in zip(moved["name"].to_numpy()[order][:CONTRIBUTORS],
                                                    moved["delta"].to_numpy()[order][:CONTRIBUTORS], strict=True))


def _gpu(op_types: pd.DataFrame) -> tuple[float, float]:
    """Op GPU time per iteration, baseline and current (NaN without ops): the Op Types rows' total."""
    total = op_types.iloc[0]
    baseline, current = (float(total[k]) if _number(total[k]) else math.nan for k in ("baseline", "current"))
    return baseline, current


def verdict_text(v: Verdict, baseline: Side, current: Side) -> str:
    if math.isnan(v.ratio):
        return ("No iteration time to compare: a profile has no aggregated iteration (see the warnings). "
                + _problems_text(v))
    parts = [f"Iteration time {_ms(v.baseline_ns)} before, {_ms(v.current_ns)} after "
             f"({v.iterations[0]} and {v.iterations[1]} iterations): ratio {v.ratio:.3f}"]
    if math.isnan(v.low):
        parts[0] += ("; too few iterations to tell a change from run-to-run noise (a confidence interval needs "
                     f"at least {MIN_ITERATIONS} on each side).")
    else:
        ci = f" ({CONFIDENCE:.0%} CI {v.low:.3f} to {v.high:.3f})"
        if v.significant:
            how = f"{100.0 * abs(v.ratio - 1.0):.1f}% {v.change}"
        else:
            how = "no significant change"
        parts[0] += f"{ci}: {how}."
    b_gpu, c_gpu = v.gpu_ns
    if math.isnan(b_gpu) or math.isnan(c_gpu):
        parts.append("No op GPU times to compare (a profile has no op ranges).")
    else:
        text = f"Op GPU time per iteration {_ms(b_gpu)} -> {_ms(c_gpu)} ({_ms(c_gpu - b_gpu, sign=True)})"
        if v.contributors:
            text += "; biggest changes by op type: " + ", ".join(f"{n} {_ms(d, sign=True)}" for n, d in v.contributors)
        else:
            text += "; no op type changed its GPU time"
        parts.append(text + ".")
        shift = c_gpu - b_gpu
        followed = v.significant and (v.ratio < 1.0) == (shift < 0)
        if abs(shift) >= GPU_SHIFT_SHARE * v.baseline_ns and not followed:
            util = [_value(s, "summary", "gpu_utilization_pct") for s in (baseline, current)]
            detail = (f" (GPU utilization {util[0]:.1f}% -> {util[1]:.1f}%)" if None not in util else "")
            parts.append(f"The iteration time did not follow the GPU time: the step is not bound by GPU work{detail}.")
    parts.append(_problems_text(v))
    return " ".join(parts)


def _problems_text(v: Verdict) -> str:
    if not v.gone and not v.new:
        return "No problem gone, none new."
    text = []
    if v.gone:
        text.append("Problems gone: " + ", ".join(label(d) for d in v.gone) + ".")
    if v.new:
        text.append("New problems: " + ", ".join(label(d) for d in v.new) + ".")
    return " ".join(text)


# --- the comparison -------------------------------------------------------------------------------

def compare(baseline: Side, current: Side) -> Comparison:
    """The compare report and the verdict (see the module docstring)."""
    b, c = Samples.of(baseline), Samples.of(current)
    op_types = op_type_rows(baseline, current)
    findings, gone, new = finding_rows(baseline, current)
    # object columns: a summary figure keeps its type (an integer stays one), a finding is yes/no
    sections = [pd.DataFrame(summary_rows(baseline, current, b, c), columns=[f.key for f in FIELDS], dtype=object),
                op_types,
                kernel_rows(baseline, current), findings]
    frame = pd.concat([s.astype(object) for s in sections if len(s)], ignore_index=True)
    frame = frame.astype(object).where(frame.notna(), None)
    judged = verdict(baseline, current, b, c, op_types, gone, new)
    # the baseline's own warnings (its key node, its data); a report's missing figures show in the rows
    own = dict.fromkeys(w for r in baseline.ranks for w in r.warnings)
    warnings = [f"baseline: {w}" for w in own] + differences(baseline, current)
    if math.isnan(judged.low) and not math.isnan(judged.ratio):
        warnings.append(f"compare: {min(judged.iterations)} aggregated iteration(s) on a side: no confidence "
                        f"interval (needs {MIN_ITERATIONS} a side); record more steps")
    figures: list[tuple[Field, object]] = [
        (Field("baseline_iteration_time_ns", "Baseline Iteration Time (ns)", NS, digits=1), judged.baseline_ns),
        (Field("current_iteration_time_ns", "Current Iteration Time (ns)", NS, digits=1), judged.current_ns),
        (Field("ratio", "Ratio (current / baseline)", digits=4), judged.ratio),
        (Field("ratio_ci_low", f"Ratio {CONFIDENCE:.0%} CI Low", digits=4), judged.low),
        (Field("ratio_ci_high", f"Ratio {CONFIDENCE:.0%} CI High", digits=4), judged.high),
        (Field("confidence_pct", "Confidence %", PERCENT), 100.0 * CONFIDENCE),
        (Field("resamples", "Bootstrap Resamples", COUNT), RESAMPLES),
        (Field("seed", "Bootstrap Seed"), SEED),
        (Field("significant", "Significant"), judged.significant),
        (Field("change", "Change"), judged.change),
        (Field("contributors", "Biggest Changes By Op Type"),
         ", ".join(f"{n} {_ms(d, sign=True)}" for n, d in judged.contributors)),
        (Field("problems_gone", "Problems Gone"), ", ".join(judged.gone)),
        (Field("problems_new", "New Problems"), ", ".join(judged.new)),
        (Field("text", "Verdict"), judged.text),
    ]
    profiles = pd.DataFrame([_profile("baseline", baseline, b), _profile("current", current, c)],
                            columns=[f.key for f in PROFILE_FIELDS])
    report = Report(COMPARE, COMPARE, (
        Table("compare", "Comparison", FIELDS, frame[[f.key for f in FIELDS]]),
        key_values("verdict", "Verdict", figures, csv=False),
        Table("profiles", "Profiles", PROFILE_FIELDS, profiles, csv=False),
        Table("iterations", "Iteration Times", SAMPLE_FIELDS,
              pd.concat([b.rows("baseline"), c.rows("current")], ignore_index=True), csv=False),
    ), warnings=tuple(warnings))
    return Comparison(report, judged)


def comparison_of(report: Report) -> Comparison:
    """The compare report and its verdict, read back from the report's tables: the verdict `compare` made, figure
    for figure (its op types from the compare table's Op Types rows, its sample counts from the iterations
    table)."""
    values = report.table("verdict").values
    rows = report.main.frame
    op_types = rows[rows["section"].to_numpy() == OP_TYPES]
    sides = report.table("iterations").frame["side"].to_numpy()

    def listed(key: str) -> tuple[str, ...]:
        return tuple(str(values[key]).split(", ")) if values[key] else ()

    judged = Verdict(float(values["baseline_iteration_time_ns"]), float(values["current_iteration_time_ns"]),
                     float(values["ratio"]), float(values["ratio_ci_low"]), float(values["ratio_ci_high"]),
                     (int((sides == "baseline").sum()), int((sides == "current").sum())), _gpu(op_types),
                     _contributors(op_types), listed("problems_gone"), listed("problems_new"), str(values["text"]))
    return Comparison(report, judged)


@report(COMPARE, scope=JOB, depends=(*NEEDS, "detail"), inputs=(NSYS, BASELINE), always=True)
def build(job: JobFigures, deps: Mapping[str, Report]) -> Report:
    """With --baseline: every figure before and after, its change, and whether it is more than noise"""
    return compare(job.given[BASELINE], Side(job, deps)).report


def _profile(name: str, side: Side, samples: Samples) -> dict[str, object]:
    return {"side": name, "source": side.source, "ranks": len(side.ranks), "gpus": _counted(side.gpus),
            "key_node": ", ".join(side.key_nodes), "aggregated_iterations": side.iterations,
            "iteration_time_avg_ns": samples.mean}
