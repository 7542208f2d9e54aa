"""A saved baseline: the figures a comparison needs, written by a ``--formats=json`` run and read back by
``--baseline``, so that a later run compares with them without the baseline's export.

Contract:

- ``figures_report(figures, reports) -> Report`` is report ``figures`` (`FIGURES`), written by the JSON
  writer as ``<profile_name>_figures.json``, a ``dlagg-report`` document like every other report's: its
  tables are the side's ranks (`RANKS`, `RANK_GPUS`, `RANK_WARNINGS`: what `compare.RankFacts` holds) and
  the tables of its reports that the comparison reads (`SAVED`), keyed ``<report>.<table>``, each with
  the columns the comparison reads, every row (the summary's per-iteration samples included). JSON keeps
  the figures exact and says each column's type, so the loaded side compares exactly as the reduced one.
- ``saved_file(spec)`` is the figures file that a ``--baseline`` spec names (the file, or the folder a
  JSON run wrote it in), None when the spec names exports; ``load(path)`` reads it back to a `Side`, or
  raises `InputError` (one line: what, which file, what to do) for a damaged file or one of another
  dlagg version.
- ``baseline_input(options)`` is ``compare.baseline_job`` for either kind of baseline: an export's
  options and job, or a saved baseline's options and `Side`.

docs/compare.md describes the use (a CI job keeping the JSON folder of a run as its baseline).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pandas as pd

from . import __version__
from .compare import NEEDS, RankFacts, Side, baseline_job
from .errors import InputError, OptionsError
from .options import Options
from .reader.discover import Job
from .reports import Report
from .reports.base import JobFigures
from .reports.figures import COUNT, Field, Table

FIGURES = "figures"  # the report's name and file suffix
FORMAT = "dlagg-report"  # the JSON writer's documents (writers/json_writer.py)
FORMAT_VERSION = 2  # of those documents: what `load` reads
RANKS, RANK_GPUS, RANK_WARNINGS = "ranks", "rank_gpus", "rank_warnings"
# What the comparison reads of each report: table key -> its columns (None: every column). The summary's
# key/value and row tables are compared field by field, so they are kept whole.
SAVED: dict[str, dict[str, tuple[str, ...] | None]] = {
    "summary": {"*": None, "iterations": ("iteration", "aggregated", "duration_ns")},  # "*": every CSV table
    "op_type": {"op_types": ("op_type", "gpu_time_total_ns")},
    "kernel": {"kernels": ("kernel_name", "gpu_time_total_ns")},
    "expert_systems": {"findings": ("detector", "time_at_stake_ns", "problem"), "detectors": ("detector", "status")},
    "detail": {"ops": ("op_key", "gpu_time_total_ns")},
}
# The overrides of how a baseline export is read: a saved baseline was read with its own run's options.
OVERRIDES = ("key_node", "iter_start", "iter_stop", "domains")
HEAD_BYTES = 256  # read of a .json file to tell saved figures from a profiler trace


# --- saving -----------------------------------------------------------------------------------------

def figures_report(figures: JobFigures, reports: Mapping[str, Report]) -> Report:
    """Report `FIGURES`: what `load` needs to compare with this job later (see the module docstring)."""
    facts = [(r.source.rank, RankFacts.of(r)) for r in figures.ranks]
    tables = [
        Table(RANKS, "Ranks", (Field("rank", "Rank"), Field("source", "Source"),
                               Field("aggregated_iterations", "Aggregated Iterations", COUNT),
                               Field("key_node", "Key Node")),
              pd.DataFrame({"rank": pd.Series([k for k, _ in facts], dtype="int64"),
                            "source": pd.Series([f.source for _, f in facts], dtype=object),
                            "aggregated_iterations": pd.Series([f.iterations for _, f in facts], dtype="int64"),
                            "key_node": pd.Series([f.key_node for _, f in facts], dtype=object)}), csv=False),
        _listed(RANK_GPUS, "GPUs", "gpu", [(k, f.gpus) for k, f in facts]),
        _listed(RANK_WARNINGS, "Warnings", "warning", [(k, f.warnings) for k, f in facts]),
    ]
    for name, wanted in SAVED.items():
        report = reports.get(name)
        for table in report.tables if report is not None else ():  # a few tables
            if table.key not in wanted and not (table.csv and "*" in wanted):
                continue
            columns = wanted.get(table.key)
            fields = tuple(f for f in table.fields if columns is None or f.key in columns)
            tables.append(Table(f"{name}.{table.key}", table.title, fields, table.frame[[f.key for f in fields]],
                                table.key_value, table.csv))
    return Report(FIGURES, FIGURES, tuple(tables))


def _listed(key: str, title: str, column: str, items: list[tuple[int, tuple[str, ...]]]) -> Table:
    """A table of each rank's list (its GPUs, its warnings): one row per item, in order."""
    rows = [(rank, item) for rank, listed in items for item in listed]
    return Table(key, title, (Field("rank", "Rank"), Field(column, title)),
                 pd.DataFrame({"rank": pd.Series([r for r, _ in rows], dtype="int64"),
                               column: pd.Series([i for _, i in rows], dtype=object)}), csv=False)


# --- loading ----------------------------------------------------------------------------------------

def saved_file(spec: object) -> Path | None:
    """The saved figures a --baseline spec names: a ``dlagg-report`` JSON file of report `FIGURES` (any other
    dlagg report is a mistake, said), or a folder holding one ``*_figures.json`` (several: a mistake, said).
    None: the spec names exports or traces (a list, a glob, a folder without saved figures)."""
    if not isinstance(spec, (str, Path)):
        return None
    path = Path(spec)
    if path.is_dir():
        found = sorted(path.glob(f"*_{FIGURES}.json"))
        if len(found) > 1:
            raise InputError(f"--baseline: {path}: holds {len(found)} saved baselines ("
                             f"{', '.join(p.name for p in found)}); pass one of them: --baseline={found[0]}")
        return found[0] if found else None
    if not path.is_file() or not path.name.endswith(".json"):
        return None
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError:
        return None  # said by the reader, as for any export
    if not head.lstrip().startswith(b'{"format": "' + FORMAT.encode()):
        return path if path.name.endswith(f"_{FIGURES}.json") else None  # a damaged one is said by `load`
    if f'"report": "{FIGURES}"'.encode() not in head and b'"report": ' in head:
        raise InputError(f"--baseline: {path}: is a dlagg report, not saved figures; pass the folder of a "
                         f"--formats=json run or its <profile_name>_{FIGURES}.json")
    return path


def load(path: Path) -> Side:
    """The saved baseline `path` as a comparison's side (see the module docstring)."""
    def damaged(why: str) -> InputError:
        return InputError(f"--baseline: {path}: not a readable saved baseline ({why}); save it again with "
                          "dlagg --formats=json, or pass the baseline's export")

    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise InputError(f"--baseline: {path}: cannot be read ({exc.strerror or type(exc).__name__}); check "
                         "the path and its permissions") from None
    except ValueError as exc:
        raise damaged(f"not JSON: {str(exc).split(':')[0]}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("report") != FIGURES:
        raise damaged(f"not a {FIGURES} document")
    version = doc.get("dlagg_version")
    if version != __version__ or doc.get("format_version") != FORMAT_VERSION:
        raise InputError(f"--baseline: {path}: saved by dlagg {version}, this is dlagg {__version__}, whose figures "
                         "may differ; save the baseline again with this version (dlagg --nsys_database=BEFORE "
                         "--formats=json), or pass the baseline's export")
    try:
        tables = {t["key"]: _table(t) for t in doc["tables"]}
        side = _side(tables)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise damaged(f"{type(exc).__name__}: {exc}") from None
    return side


def _table(doc: dict) -> Table:
    """A table of the JSON writer's document, each column of the type written (writers/json_writer.py)."""
    fields = tuple(Field(f["key"], f["title"], f["unit"] or "", f["digits"], csv=f["csv"]) for f in doc["fields"])
    rows = doc["rows"]
    columns = {}
    for k, (field, spec) in enumerate(zip(fields, doc["fields"], strict=True)):  # a few columns
        values = [row[k] for row in rows]
        columns[field.key] = pd.Series(values, dtype=_dtype(spec["type"], None in values))
    frame = pd.DataFrame(columns, columns=[f.key for f in fields])
    return Table(doc["key"], doc["title"], fields, frame, bool(doc["key_value"]), bool(doc["csv"]))


def _dtype(written: str, missing: bool) -> str:
    """The pandas type of a column the JSON writer called `written` (integers and booleans with missing values
    nullable, as nothing else holds them)."""
    if written == "integer":
        return "Int64" if missing else "int64"
    if written == "boolean":
        return "boolean" if missing else "bool"
    return "float64" if written == "number" else "object"


def _side(tables: Mapping[str, Table]) -> Side:
    ranks = tables[RANKS].frame
    listed = {key: tables[key].frame.groupby("rank", sort=False)[column].agg(tuple).to_dict()
              for key, column in ((RANK_GPUS, "gpu"), (RANK_WARNINGS, "warning"))}
    facts = tuple(RankFacts(str(r.source), int(r.aggregated_iterations), str(r.key_node),
                            tuple(map(str, listed[RANK_GPUS].get(r.rank, ()))),
                            tuple(map(str, listed[RANK_WARNINGS].get(r.rank, ()))))
                  for r in ranks.itertuples(index=False))
    if not facts:
        raise ValueError("no rank")
    reports: dict[str, list[Table]] = {}
    for key, table in tables.items():
        name, dot, own = key.partition(".")
        if dot and name in SAVED:
            reports.setdefault(name, []).append(replace(table, key=own))
    return Side(None, {name: Report(name, name, tuple(found)) for name, found in reports.items()}, saved=facts)


# --- the baseline given -------------------------------------------------------------------------------

def baseline_input(options: Options) -> tuple[Options, Job | Side] | None:
    """``compare.baseline_job`` for a baseline export; for saved figures (`saved_file`), the baseline's
    options and its side, loaded and checked before anything else is read. None without --baseline."""
    path = saved_file(options.baseline.nsys_database) if options.baseline is not None else None
    if path is None or options.baseline is None:
        return baseline_job(options)
    given = [f"--baseline_{o}" for o in OVERRIDES if getattr(options.baseline, o) is not None]
    if given:
        raise OptionsError(f"{', '.join(given)}: the saved baseline {path} was reduced with the options of the run "
                           "that saved it; save it again with these, or pass the baseline's export")
    if options.nsys_database is None:
        raise OptionsError("--baseline compares two profiles: pass --nsys_database (the profile after the change)")
    reads = options.baseline.options(options, NEEDS)
    if reads.profile_name == options.profile_name:
        raise OptionsError(f"--baseline_profile_name={reads.profile_name} is the current profile's name too: "
                           "choose another, so that their TensorBoard runs do not overwrite each other")
    return reads, load(path)
