"""Report ``figures``: the figures a comparison needs, saved by a ``--formats=json`` run so that a later run
compares with them without the baseline's export (``--baseline=<that output folder>``).

Contract:

- The report is a job report built from the job's figures and the reports it depends on (`SAVED`); no
  ``--reports`` choice: the JSON writer adds it (``Writer.adds``) to every run of an nsys export that writes
  reports, as ``<profile_name>_figures.json``, a ``dlagg-report`` document like every other report's. Its tables
  are the side's ranks (`RANKS`, `RANK_GPUS`, `RANK_WARNINGS`: what `side.RankFacts` holds) and the tables of its
  reports that the comparison reads (`SAVED`), keyed ``<report>.<table>``, each with the columns the comparison
  reads, every row (the summary's per-iteration samples included). JSON keeps the figures exact and says each
  column's type, so the loaded side compares exactly as the reduced one.
- ``side_of(tables)`` is the way back: those tables (read from the file by ``dlagg/baseline.py``) as a
  comparison's `Side`.

docs/compare.md describes the use (a CI job keeping the JSON folder of a run as its baseline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pandas as pd

from .base import JOB, JobFigures, Report, report
from .figures import COUNT, Field, Table
from .side import RankFacts, Side

FIGURES = "figures"  # the report's name and file suffix
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


# --- saving -----------------------------------------------------------------------------------------

@report(FIGURES, scope=JOB, depends=tuple(SAVED), choice=False)
def figures_report(figures: JobFigures, reports: Mapping[str, Report]) -> Report:
    """The figures a later comparison reads (--baseline=this output folder): the job's ranks, its reports' tables."""
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


# --- reading back ---------------------------------------------------------------------------------

def side_of(tables: Mapping[str, Table]) -> Side:
    """The saved tables, by key, as a comparison's side; KeyError, ValueError (no rank) and the like for tables that
    are not the report's."""
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
