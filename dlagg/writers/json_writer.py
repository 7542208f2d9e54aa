"""JSON: every figure of a report, with its stable key, title and unit.

    {"format": "dlagg-report", "format_version": 2, "report": "kernel",
     "dlagg_version": ..., "source": ..., "nsys_version": ...,
     "key_node": ..., "key_node_reason": ..., "iterations": {"total", "start", "stop", "window_ns"},
     "warnings": [...],
     "tables": [{"key": "kernels", "title": "Kernel Report", "key_value": false, "csv": true,
                 "fields": [{"key", "title", "unit", "digits", "csv", "type"}], "rows": [[...], ...]}]}

Unlike the CSV, values are the figures themselves: floats unrounded, booleans true/false, missing
values null, and tables and fields the CSV leaves out are here too. A key/value table has one row.
Cells are formatted column by column (``cells.py``), never row by row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pandas as pd

from ..reports.base import Report
from ..reports.figures import Table
from .base import RunInfo, Writer, atomic_write, report_path, writer
from .cells import JSON, Cells

# Rows serialised and written at a time: bounds the writer's memory whatever the table size.
CHUNK_ROWS = 4096

FORMAT_VERSION = 2


def _type(column: pd.Series) -> str:
    if isinstance(column.dtype, pd.CategoricalDtype):  # the type of its values
        return _type(pd.Series(column.cat.categories, dtype=object))
    if pd.api.types.is_bool_dtype(column.dtype):
        return "boolean"
    if pd.api.types.is_integer_dtype(column.dtype):
        return "integer"
    if pd.api.types.is_float_dtype(column.dtype):
        return "number"
    kind = pd.api.types.infer_dtype(column, skipna=True)
    return "string" if kind in ("string", "empty") else "mixed"


def table_chunks(table: Table, rows: Sequence[Path] | None = None) -> Iterator[str | memoryview | Path]:
    """The table's JSON object in pieces: head, then rows CHUNK_ROWS at a time. With `rows`, the text of the rows
    is those files' (``row_chunks`` of parts of the table, in order, the last with ``last=True``)."""
    fields = [{"key": f.key, "title": f.title, "unit": f.unit or None, "digits": f.digits, "csv": f.csv,
               "type": _type(table.columns[f.key])} for f in table.fields]
    head = json.dumps({"key": table.key, "title": table.title, "key_value": table.key_value, "csv": table.csv,
                       **({"note": table.note} if table.note else {}), "fields": fields})
    yield head[:-1] + ', "rows": ['
    if table.fields:
        yield from rows if rows is not None else row_chunks(table)
    yield "]}"


def row_chunks(table: Table, last: bool = True) -> Iterator[memoryview]:
    """The JSON rows of the table, CHUNK_ROWS at a time, each followed by a comma but the table's last one
    (`last`: this table's rows end the report's table; False for a part of it that others follow)."""
    cells = Cells(table.frame, table.fields, JSON)
    for first in range(0, len(table), CHUNK_ROWS):
        stop = min(first + CHUNK_ROWS, len(table))
        text = memoryview(cells.lines(first, stop))
        yield text[:-1] if last and stop == len(table) else text  # the last row's comma


def report_chunks(report: Report, info: RunInfo,
                  rows: Mapping[str, Sequence[Path]] | None = None) -> Iterator[str | memoryview | Path]:
    """The report's JSON document in pieces (see the module docstring for its layout); `rows` (table key ->
    files) as in `table_chunks`."""
    head = {
        "format": "dlagg-report",
        "format_version": FORMAT_VERSION,
        "report": report.name,
        "dlagg_version": info.dlagg_version,
        "source": info.source,
        "nsys_version": info.nsys_version,
        "key_node": info.key_node,
        "key_node_reason": info.key_node_reason,
        "iterations": {
            "total": info.iterations_total,
            "start": info.iter_start,
            "stop": info.iter_stop,
            "window_ns": list(info.iteration_window_ns),
        },
        "warnings": list(report.warnings),
    }
    yield json.dumps(head)[:-1] + ', "tables": ['
    for k, table in enumerate(report.tables):
        if k:
            yield ", "
        yield from table_chunks(table, (rows or {}).get(table.key))
    yield "]}\n"


@writer("json")
class JsonWriter(Writer):
    """One JSON file per report: metadata, then every table's fields (key, title, unit) and rows."""

    adds = ("figures",)  # the figures a later run compares with (--baseline=this output folder)

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        return [report_path(out_dir, profile_name, suffix, "json") for suffix in file_suffixes]

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo,
              rows: Mapping[str, Sequence[Path]] | None = None,
              pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
        written = []
        for report in reports:
            path = report_path(out_dir, info.profile_name, report.file_suffix, "json")
            atomic_write(path, report_chunks(report, info, rows))
            written.append(path)
        return written

    def writes_rows(self, table: Table) -> bool:
        return bool(table.fields)

    def rows(self, table: Table, info: RunInfo, last: bool) -> Iterator[memoryview]:
        return row_chunks(table, last)
