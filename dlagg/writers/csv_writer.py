"""CSV in DLProf v1.8's layout: per table a title line, a header, rows; blank line between tables.

Integers as integers (ns), floats with their field's decimals (one for averages and percentages),
booleans as "yes"/"no", strings double-quoted (bare, as DLProf writes them, for fields that say so:
the summary's row labels), missing values empty; a key/value table is one ``title,value`` line per
figure, both written bare unless they must be quoted (a comma, quote or line break), as DLProf does.
A text cell that a spreadsheet would run as a formula (it starts with =, +, -, @, tab or carriage
return) gets a single quote in front (``cells.defuse``), unless ``info.raw_csv`` (--raw_csv=true).
Tables marked ``csv=False`` (figures DLProf's files do not have) and fields marked ``csv=False`` are
left out. A report registered with a ``detail_csv`` suffix (the expert systems': DLProf's file has two
columns, Problem and Recommendation, and scripts unpack its rows in two) also gets a second file,
``<profile>_<detail_csv>.csv``, with its main table and every field (dlagg's evidence, severity, time at
stake). Formatting is column-wise (``cells.py``), never per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ..reports import REPORTS
from ..reports.base import Report
from ..reports.figures import Field, Table
from .base import RunInfo, Writer, atomic_write, report_path, writer
from .cells import CSV, Cells, Style, csv_style

# Rows formatted and written at a time: bounds the writer's memory (about 10 MB of text for the
# iteration report's 21 columns, plus Arrow's intermediates) whatever the table size; larger
# chunks are no faster.
CHUNK_ROWS = 4096


def _header_cell(text: str, style: Style = CSV) -> str:
    """Titles and column names are bare unless they need quoting."""
    return style.value(text, quote=False)


def table_chunks(table: Table, style: Style = CSV, rows: Sequence[Path] | None = None,
                 every_field: bool = False) -> Iterator[str | memoryview | Path]:
    """The table's text in pieces of at most CHUNK_ROWS rows (title and header first); `style` CSV or CSV_RAW.
    With `rows`, the text of the rows is those files' (``row_chunks`` of parts of the table, in order).
    `every_field`: the fields marked ``csv=False`` too (a report's detail CSV)."""
    fields = table.fields if every_field else table.csv_fields()
    if table.key_value:
        values = table.values
        yield "\n".join([_header_cell(table.title, style)]
                        + [f"{_header_cell(f.title, style)},{style.value(values[f.key], f.digits, quote=False)}"
                           for f in fields]) + "\n"
        return
    yield _header_cell(table.title, style) + "\n" + ",".join(_header_cell(f.title, style) for f in fields) + "\n"
    if not fields:
        return
    if rows is not None:
        yield from rows
    else:
        yield from row_chunks(table, style, fields)


def row_chunks(table: Table, style: Style = CSV, fields: tuple[Field, ...] | None = None) -> Iterator[memoryview]:
    """The text of the table's rows alone (its CSV fields unless `fields`), CHUNK_ROWS at a time."""
    cells = Cells(table.frame, table.csv_fields() if fields is None else fields, style)
    for first in range(0, len(table), CHUNK_ROWS):
        yield memoryview(cells.lines(first, min(first + CHUNK_ROWS, len(table))))


def format_table(table: Table, style: Style = CSV) -> str:
    return "".join(p if isinstance(p, str) else bytes(p).decode("utf-8") for p in table_chunks(table, style))


def report_chunks(report: Report, style: Style = CSV,
                  rows: Mapping[str, Sequence[Path]] | None = None) -> Iterator[str | memoryview | Path]:
    """A report's CSV: its CSV tables separated by blank lines; `rows` (table key -> files) as in `table_chunks`."""
    for k, table in enumerate(t for t in report.tables if t.csv):
        if k:
            yield "\n"
        yield from table_chunks(table, style, (rows or {}).get(table.key))


@writer("csv")
class CsvWriter(Writer):
    """One CSV file per report, in DLProf's layout."""

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        details = [spec.detail_csv for spec in REPORTS.values()
                   if spec.detail_csv and spec.file_suffix in file_suffixes]
        return [report_path(out_dir, profile_name, suffix, "csv") for suffix in (*file_suffixes, *details)]

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo,
              rows: Mapping[str, Sequence[Path]] | None = None,
              pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
        written = []
        for report in reports:
            path = report_path(out_dir, info.profile_name, report.file_suffix, "csv")
            atomic_write(path, report_chunks(report, csv_style(info.raw_csv), rows))
            written.append(path)
            spec = REPORTS.get(report.name)
            if spec is not None and spec.detail_csv:  # the main table again, every field (a small table)
                path = report_path(out_dir, info.profile_name, spec.detail_csv, "csv")
                atomic_write(path, table_chunks(report.main, csv_style(info.raw_csv), every_field=True))
                written.append(path)
        return written

    def writes_rows(self, table: Table) -> bool:
        return table.csv and not table.key_value and bool(table.csv_fields())

    def rows(self, table: Table, info: RunInfo, last: bool) -> Iterator[memoryview]:
        return row_chunks(table, csv_style(info.raw_csv))  # (`last` alike: CSV parts need no separator)
