"""dlagg as a library: ``dlagg.analyze(path, **options) -> Analysis``, each report a pandas DataFrame.

`analyze` runs the command line's pipeline (``pipeline.run``) on the same options, asking for no file: no
``--formats``, no TensorBoard event files, and an output folder of its own that nothing is kept in (see
`_quiet`). What a report computes is its typed figures (``reports.figures``): exact numbers (integer
nanoseconds, unrounded floats, booleans), the same the writers round and title. `Analysis.write` writes
what the command line would, by running it again on the same options (the pipeline writes reports while it
builds them and offers no way to write reports already built, so the input is read again).

Columns are the fields' keys (``gpu_time_total_ns``: stable, carrying their unit, valid Python names);
`Analysis.titles` maps them to the titles the CSV shows ("Total GPU Time (ns)"). docs/api.md shows a session.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from .log import Log
from .model import Iterations
from .options import Baseline, Options
from .pipeline import Result, run
from .reports import REPORTS, Report
from .reports.base import BASELINE, NCU, NSYS, RankFigures, choices

OPTION_NAMES = tuple(f.name for f in fields(Options))
# Defaults that differ from the command line's: every report that applies, and warnings alone on stderr.
LIBRARY_DEFAULTS: Mapping[str, Any] = {"reports": ("all",), "verbosity": "minimal"}
# Options given as comma lists on the command line: a str here is one such list ("kernel,summary").
LIST_OPTIONS = ("reports", "formats", "domains")
# What `Analysis.write` may change: where and how the outputs go, never what is analysed.
OUTPUT_OPTIONS = ("output_path", "formats", "force", "suppress_tb_files", "tb_dir", "per_rank", "profile_name",
                  "raw_csv", "verbosity", "workers", "scheduler")


def analyze(path: str | os.PathLike[str] | None, **options: Any) -> Analysis:
    """Every report of the profile at `path`, as DataFrames; nothing written.

    `path`: anything the command line's --nsys_database takes (an nsys SQLite export, an nvprof database, a
    PyTorch profiler trace, a folder of ranks, a glob or a comma list); None with ``ncu_report=`` alone.
    `options`: the command line's, by their names in `Options` (``key_node="train_step"``, ``iter_start=2``,
    ``reports=("kernel", "summary")`` or ``reports="kernel,summary"``, ``baseline="before.sqlite"``, ...). Unlike
    the command line, ``reports`` defaults to every report that applies and ``verbosity`` to "minimal" (warnings
    only). The output options (output_path, formats, force, suppress_tb_files, tb_dir, per_rank, profile_name)
    are kept for `Analysis.write`."""
    given = _options(options, "analyze")
    if "nsys_database" in given:
        raise TypeError("analyze() takes the input as its first argument `path`, not as nsys_database=")
    chosen = Options(**{**LIBRARY_DEFAULTS, **given, "nsys_database": None if path is None else _spec(path)})
    log = Log(chosen.level)
    with tempfile.TemporaryDirectory(prefix="dlagg-analyze.") as scratch:
        result = run(_quiet(chosen, Path(scratch)), log)
    return Analysis(result, chosen, tuple(dict.fromkeys(log.warnings)))


class Analysis:
    """One profile analysed: an attribute per report built, named as ``--reports`` names it (``.summary``,
    ``.kernel``, ``.iteration``, ``.tensor``, ...) or as its file (``.tensor_core``, ``.detailed``, ``.group_op``):
    the report's main table as a new DataFrame, one column per figure, named by the figure's key.

    ``tables(name)``: every table of a report by its key (main first); ``titles(name)``: key -> CSV title;
    ``report(name)``: the typed `Report` itself (fields, units, notes). ``names``: the reports built;
    ``iterations``, ``warnings``, ``rank_figures``, ``result``: the rest of the run. A report that was not
    built raises AttributeError saying why."""

    def __init__(self, result: Result, options: Options, warnings: tuple[str, ...] | None = None) -> None:
        self.result = result
        self.options = options
        self._warnings = result.warnings if warnings is None else warnings
        self._reports = {r.name: r for r in result.reports}

    # --- the reports ---------------------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """The reports built, in the command line's order (the compare report last)."""
        return tuple(self._reports)

    def report(self, name: str) -> Report:
        """The report `name` (or its file's name) as dlagg holds it: its `Table`s of typed fields."""
        canonical = _canonical(name)
        if canonical not in self._reports:
            raise AttributeError(self._missing(name, canonical))
        return self._reports[canonical]

    def tables(self, name: str) -> dict[str, pd.DataFrame]:
        """Every table of report `name` by its key, the main table first; new frames, columns by field key."""
        return {t.key: t.frame.copy() for t in self.report(name).tables}

    def titles(self, name: str, table: str | None = None) -> dict[str, str]:
        """Field key -> title (as the CSV writes it) of report `name`'s main table, or of its table `table`."""
        report = self.report(name)
        chosen = report.main if table is None else report.table(table)
        return {f.key: f.title for f in chosen.fields}

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.report(name).main.frame.copy()

    def __dir__(self) -> Iterable[str]:
        return [*super().__dir__(), *self._reports]

    def _missing(self, name: str, canonical: str) -> str:
        """Why the report `name` is not there (a sentence), or that no such report exists."""
        if canonical not in choices():
            known = ", ".join(choices())
            return f"{type(self).__name__} has no attribute or report {name!r}; the reports are {known}"
        spec = REPORTS[canonical]
        source = Path(str(self.options.nsys_database or self.options.ncu_report)).name
        if BASELINE in spec.inputs and self.options.baseline is None:
            why = "it compares with a baseline: pass baseline='before.sqlite' to analyze"
        elif NCU in spec.inputs and self.options.ncu_report is None:
            why = "it needs Nsight Compute metrics: pass ncu_report='step.csv' to analyze (docs/roofline.md)"
        elif NSYS in spec.inputs and self.options.nsys_database is None:
            why = "it needs an nsys export or a PyTorch trace, and analyze was given an ncu report alone"
        elif spec.only_with_ranks and len(self.result.ranks) < 2:
            why = (f"it relates several ranks and {source} holds one; pass reports=({canonical!r},) to build it for "
                   "one rank anyway")
        else:
            why = f"analyze was asked for reports={self.options.reports!r}; add {canonical!r}"
        return f"no {canonical} report for {source}: {why}"

    # --- the rest of the run -----------------------------------------------------------------------

    @property
    def iterations(self) -> Iterations | None:
        """The first rank's iterations: key node, count, aggregated range (start, stop), windows in ns (None for an
        ncu report alone, which has no rank)."""
        return self.result.iterations if self.result.ranks else None

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every warning the run gave (what the command line says on stderr), once each."""
        return self._warnings

    @property
    def rank_figures(self) -> tuple[RankFigures, ...]:
        """Each rank's figures (source file, GPUs, iterations, per-rank reports), by rank."""
        return self.result.ranks

    def write(self, output_path: str | os.PathLike[str] | None = None, *, formats: str | Iterable[str] | None = None,
              force: bool | None = None, **options: Any) -> tuple[Path, ...]:
        """Write what the command line would for these options into `output_path` (default: analyze's, else the
        current folder): the reports analysed in `formats` (default csv), TensorBoard event files unless
        ``suppress_tb_files=True``. Other output options (profile_name, tb_dir, per_rank, ...) by keyword. The
        input is read again. The paths written."""
        given = _options(options, "write")
        fixed = sorted(set(given) - set(OUTPUT_OPTIONS))
        if fixed:
            raise TypeError(f"write() writes what was analysed: {', '.join(fixed)} cannot change here (pass them to "
                            f"analyze); write takes {', '.join(OUTPUT_OPTIONS)}")
        if output_path is not None:
            given["output_path"] = output_path
        if formats is not None:
            given["formats"] = _as_tuple(formats)
        if force is not None:
            given["force"] = force
        return run(replace(self.options, **given)).written

    def __repr__(self) -> str:
        source = Path(str(self.options.nsys_database or self.options.ncu_report)).name
        return f"<dlagg.Analysis of {source}: {', '.join(self.names) or 'no report'}>"


def _quiet(options: Options, scratch: Path) -> Options:
    """The options with no output asked for: no formats, no event files. `scratch` (a fresh folder the caller
    removes) is the output folder, so that the pipeline's checks and what it keeps while it runs (a writability
    probe, the rows a local pool keeps out of memory, a PNG a report draws) go there and nowhere else; nothing
    stays."""
    return replace(options, formats=(), suppress_tb_files=True, output_path=scratch / "out", force=False)


def _options(given: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """The keyword options checked against `Options`' fields; comma lists and lists made tuples; a baseline given
    as a path made a `Baseline`."""
    unknown = sorted(set(given) - set(OPTION_NAMES))
    if unknown:
        raise TypeError(f"{caller}() got unknown option(s) {', '.join(map(repr, unknown))}; the options are "
                        f"{', '.join(OPTION_NAMES)}")
    checked = dict(given)
    for name in LIST_OPTIONS:
        if name in checked and checked[name] is not None:
            checked[name] = _as_tuple(checked[name])
    baseline = checked.get("baseline")
    if baseline is not None and not isinstance(baseline, Baseline):
        checked["baseline"] = Baseline(_spec(baseline))
    return checked


def _as_tuple(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    return tuple(value)


def _spec(path: str | os.PathLike[str]) -> str | Path:
    """An input spec as Options takes it: a str (which may be a comma list or a glob) or a Path."""
    return path if isinstance(path, (str, Path)) else Path(path)


def _canonical(name: str) -> str:
    """The registry name of report `name`, given by its --reports name or its file's (tensor_core -> tensor)."""
    if name in choices():
        return name
    return next((n for n in choices() if REPORTS[n].file_suffix == name), name)
