"""Report values, the report registry, and the figures of ranks and jobs that reports are built from.

Adding a report = adding one module in ``dlagg/reports/`` with one ``@report``-decorated builder, listed in
``MODULES`` of ``reports/__init__.py`` (the registries' rule: ``dlagg/registry.py``).
A rank report is built per rank, ``build(ctx, deps) -> Report``: `ctx` is the rank's `RankContext`,
`deps` the reports it declared in ``depends`` (built first, by the runner). When a job has several
ranks, the report's ``@merges`` function combines the ranks' reports into the job's (with its
dependencies already combined). A job report (``scope=JOB``) is built once from every rank's
figures: ``build(job, deps) -> Report``; one that reads an input besides the ranks' exports (`GIVEN`: the
baseline of a comparison) finds it in ``job.given``, and is built once the run has read it, after the job's other
reports. The CLI's ``--reports`` choices and ``--help`` text come from the registry (first docstring line); the
registry's order (``reports/__init__.py``'s ``MODULES``) is that of ``--help``, of the files listed and of the
TensorBoard dashboards.

A report holds figures (``figures.Table``): exact values under stable keys. Formatting (titles,
rounding, yes/no) belongs to the writers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from ..comm import ITERATION_COLUMNS, Matched, RankComm
from ..model import Iterations, ProfileMeta, categorical, stack_ranks
from ..ops.assign import op_ids
from ..reader.discover import Job, RankSource
from .figures import Image, Table

if TYPE_CHECKING:
    from ..context import RankContext

RANK, JOB = "rank", "job"  # report scopes
# Inputs a report needs: an nsys (or nvprof) export, an Nsight Compute raw CSV, a baseline to compare with
# (--baseline: an export or saved figures).
NSYS, NCU, BASELINE = "nsys", "ncu", "baseline"
# Inputs a job report reads from `JobFigures.given` rather than from the ranks: read by the run once the job's other
# reports are built (the baseline after the current profile, whose reports are written meanwhile).
GIVEN = frozenset({BASELINE})


@dataclass(frozen=True)
class Report:
    name: str  # registry key, e.g. "kernel"
    file_suffix: str  # DLProf's file name part: <profile_name>_<file_suffix>.csv
    tables: tuple[Table, ...]
    warnings: tuple[str, ...] = ()
    images: tuple[Image, ...] = ()  # pictures drawn from the tables (the roofline's)

    @property
    def main(self) -> Table:
        """The report's main table (its first)."""
        return self.tables[0]

    def table(self, key: str) -> Table:
        for table in self.tables:
            if table.key == key:
                return table
        raise KeyError(f"report {self.name} has no table {key!r}; it has {', '.join(t.key for t in self.tables)}")


@dataclass(frozen=True)
class RankFigures:
    """One rank reduced: where it came from, its iterations, its reports and its communication.
    Small enough to travel from a worker process: no event table is in it."""

    source: RankSource
    meta: ProfileMeta
    gpus: pd.DataFrame  # device_id, name, ... of the rank's export
    iterations: Iterations
    reports: dict[str, Report]  # a job's merge may drop each once merged (ranks.reduce.combine's `release`)
    ops: pd.DataFrame  # the rank's ops by name: op_key, op_type, order, forward_op_key (for Op IDs over ranks)
    comm: RankComm | None
    warnings: tuple[str, ...]
    seconds: float  # time taken to reduce it
    peak_mb: float = 0.0  # peak resident memory of the process that reduced it, so far (MB)


@dataclass(frozen=True)
class JobFigures:
    """Every rank's figures, and what relates them: aligned clocks and matched collectives."""

    job: Job
    ranks: tuple[RankFigures, ...]  # ordered by rank
    matched: Matched | None  # None when no rank reduced its communication
    # Inputs besides the ranks' exports (`GIVEN`) by name, once read: BASELINE -> the baseline's `reports.side.Side`.
    given: Mapping[str, Any] = field(default_factory=dict)

    @property
    def offsets(self) -> dict[int, int]:
        """Rank -> ns added to its timestamps to put them on the job's clock (0 without collectives)."""
        return dict(self.matched.offsets) if self.matched else {r.source.rank: 0 for r in self.ranks}

    @property
    def rank_numbers(self) -> list[int]:
        return [r.source.rank for r in self.ranks]

    @cached_property
    def comm_iterations(self) -> pd.DataFrame:
        """Every rank's per-iteration figures (``RankComm.iterations``) stacked, each row with its rank first; the
        ranks that reduced their communication."""
        comms = [(r.source.rank, r.comm) for r in self.ranks if r.comm is not None]
        if not comms:
            return pd.DataFrame({"rank": pd.Series(dtype="int64"),
                                 **{c: pd.Series(dtype="float64") for c in ITERATION_COLUMNS}})
        return stack_ranks([c.iterations for _, c in comms], [k for k, _ in comms], first=True)

    @cached_property
    def op_ids(self) -> pd.Series:
        """Op key -> DLProf Op ID over every rank's ops (numbered as one rank's are: ops.op_ids)."""
        ops = pd.concat([r.ops for r in self.ranks], ignore_index=True)
        if ops.empty:
            return pd.Series(dtype=object)
        ops = ops.groupby("op_key", sort=False).agg({"op_type": "first", "order": "min", "forward_op_key": "first"})
        ops = ops.reset_index()
        return pd.Series(op_ids(ops), index=ops["op_key"].to_numpy())

    def renumber_ops(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` with its op_id column renumbered from its op_key column over the whole job."""
        return renumber_ops(frame, self.op_ids)


def renumber_ops(frame: pd.DataFrame, op_ids: pd.Series) -> pd.DataFrame:
    """`frame` with its op_id column renumbered from its op_key column by `op_ids` (op key -> Op ID: a job's)."""
    if "op_id" not in frame or frame.empty:
        return frame
    keys = frame["op_key"]
    if isinstance(keys.dtype, pd.CategoricalDtype):  # per distinct key
        ids = op_ids.reindex(keys.cat.categories.to_numpy()).fillna("").to_numpy(dtype=object)
        return frame.assign(op_id=categorical(keys.cat.codes.to_numpy(), ids))
    return frame.assign(op_id=op_ids.reindex(keys.to_numpy()).fillna("").to_numpy(dtype=object))


class ReportBuilder(Protocol):
    # ctx: the rank's RankContext for a rank report, the job's JobFigures for a job report (ReportSpec.scope)
    def __call__(self, ctx: Any, deps: Mapping[str, Report], /) -> Report: ...


# Combines one report's per-rank results into the job's: (the ranks' reports in rank order, the job's
# figures, the job's already combined dependencies) -> the job's report.
Merger = Callable[[Sequence[Report], JobFigures, Mapping[str, Report]], Report]


@dataclass(frozen=True)
class ReportSpec:
    name: str
    build: ReportBuilder
    description: str
    file_suffix: str  # DLProf's file name part: <profile_name>_<file_suffix>.<format>
    requires: frozenset[str] = frozenset()  # Profile frames that must be non-empty
    depends: tuple[str, ...] = ()  # reports whose figures the builder reads (passed in `deps`)
    # One row per event (100 k+ rows): built first, so that writing it overlaps building the others.
    bulk: bool = False
    scope: str = RANK  # RANK: built per rank (and merged); JOB: built once from every rank's figures
    # A job report is written when the job has several ranks or communication, or when asked for by name.
    only_with_ranks: bool = False
    # Inputs the report needs (--reports=all picks the reports whose inputs were given): NSYS, NCU.
    inputs: frozenset[str] = frozenset({NSYS})
    images: tuple[str, ...] = ()  # file suffixes of the PNGs it may draw (for the --force check)
    # Tables of a rank's report whose rows a local pool's process keeps in files (reports/spilled.py): tables
    # of thousands of rows per rank that the merge only stacks, so that the job's parent never holds them.
    spill: tuple[str, ...] = ()
    # File suffix of a second CSV holding the report's main table with every field (dlagg's columns too), for a
    # report whose DLProf file keeps DLProf's columns alone (the expert systems'): <profile_name>_<detail_csv>.csv.
    detail_csv: str = ""
    # A --reports choice (listed by --help, picked by 'all'); False: built only for a writer that adds it
    # (``Writer.adds``: the figures a JSON run saves for a later comparison).
    choice: bool = True
    # Written whenever its inputs are given, whether --reports names it or not (compare: with --baseline).
    always: bool = False


REPORTS: dict[str, ReportSpec] = {}
MERGERS: dict[str, Merger] = {}


def report(
    name: str,
    *,
    file_suffix: str | None = None,
    requires: Iterable[str] = (),
    depends: Iterable[str] = (),
    bulk: bool = False,
    scope: str = RANK,
    only_with_ranks: bool = False,
    inputs: Iterable[str] = (NSYS,),
    images: Iterable[str] = (),
    spill: Iterable[str] = (),
    detail_csv: str = "",
    choice: bool = True,
    always: bool = False,
) -> Callable[[ReportBuilder], ReportBuilder]:
    """Register a report builder under `name`; its docstring's first line is the help text."""

    def register(fn: ReportBuilder) -> ReportBuilder:
        if name in REPORTS:
            raise RuntimeError(f"duplicate report {name!r}")
        doc = inspect.getdoc(fn) or ""
        REPORTS[name] = ReportSpec(
            name, fn, doc.splitlines()[0] if doc else name, file_suffix or name, frozenset(requires), tuple(depends),
            bulk, scope, only_with_ranks, frozenset(inputs), tuple(images), tuple(spill), detail_csv, choice, always,
        )
        return fn

    return register


def choices() -> list[str]:
    """The reports --reports takes, in registry order."""
    return [name for name, spec in REPORTS.items() if spec.choice]


def merges(name: str) -> Callable[[Merger], Merger]:
    """Register how report `name` combines over ranks."""

    def register(fn: Merger) -> Merger:
        if name in MERGERS:
            raise RuntimeError(f"duplicate merger for {name!r}")
        MERGERS[name] = fn
        return fn

    return register


# Warnings that share a cause: a profile without NVTX ranges has no key node and no ops, so no Tensor-Core-eligible
# op either. The first of these causes present (texts the warnings hold: the reader's missing table, the key node's
# "no ranges", the ops' "no op range") says it once; the later causes are restatements of it and left out, and a
# consequence elsewhere (Tensor Core Kernel Utilization %) is told in the same line, after it ("From the same
# cause, ..."), so an export without an NVTX table gives one warning, not four.
NO_NVTX_CAUSES = ("table (NVTX ranges): ", "the profile has no NVTX ranges", "no NVTX range below the key node "
                  "defines an op")
NO_NVTX_CONSEQUENCES = ("no Tensor-Core-eligible op",)


def one_per_cause(warnings: Iterable[str]) -> list[str]:
    """Warnings in order, each cause once: the same text from several reports (``detail: no NVTX range
    ...``, ``op_type: no NVTX range ...``) becomes one line naming them all (``detail, op_type: no NVTX
    range ...``), and the warnings that follow from a profile without NVTX ranges (`NO_NVTX_CAUSES`) one line."""
    sources: dict[str, list[str]] = {}
    for warning in warnings:  # a few warnings
        head, sep, body = warning.partition(": ")
        if sep and head in (*REPORTS, "ops"):
            sources.setdefault(body, [])
            if head not in sources[body]:
                sources[body].append(head)
        else:
            sources.setdefault(warning, [])
    lines = [f"{', '.join(heads)}: {body}" if heads else body for body, heads in sources.items()]
    return _one_line_per_cause(lines)


def _one_line_per_cause(lines: list[str]) -> list[str]:
    """`lines` with the no-NVTX cause said once (`NO_NVTX_CAUSES`)."""
    for k, marker in enumerate(NO_NVTX_CAUSES):
        cause = next((i for i, line in enumerate(lines) if marker in line), None)
        if cause is None:
            continue
        later = NO_NVTX_CAUSES[k + 1:]
        follows = [line for i, line in enumerate(lines) if i != cause and any(m in line for m in NO_NVTX_CONSEQUENCES)]
        kept = [line for i, line in enumerate(lines) if i == cause or not any(
            m in line for m in (*later, *NO_NVTX_CONSEQUENCES))]
        at = kept.index(lines[cause])
        kept[at] = " ".join([f"{lines[cause].rstrip('.')}.", *(f"From the same cause, {f}" for f in follows)])
        return kept
    return lines


def build_order(names: Iterable[str]) -> list[str]:
    """`names` and the reports they depend on, each after its dependencies; bulk reports (which
    depend on nothing) first, so that writing them overlaps building the others."""
    ordered: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise RuntimeError(f"reports depend on each other in a cycle: {' -> '.join((*path, name))}")
        if name not in ordered:
            for dep in REPORTS[name].depends:
                visit(dep, (*path, name))
            ordered.append(name)

    for name in dict.fromkeys(names):
        visit(name, ())
    return sorted(ordered, key=lambda n: not REPORTS[n].bulk)


def build_reports(ctx: RankContext, names: Iterable[str]) -> dict[str, Report]:
    """Build the rank reports among `names` (and the reports they depend on), in dependency order."""
    built: dict[str, Report] = {}
    for name in build_order(names):
        spec = REPORTS[name]
        if spec.scope == RANK:
            built[name] = spec.build(ctx, {dep: built[dep] for dep in spec.depends})
    return built
