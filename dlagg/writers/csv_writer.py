"""CSV in DLProf v1.8's layout: per section a title line, a header, rows; blank line between sections.

Integers as integers (ns), averages and percentages with one decimal, strings double-quoted,
missing values empty. Formatting is column-wise (vectorised), never per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..reports.base import Report, Section
from .base import RunInfo, atomic_write_text, report_path, writer

# Rows formatted and written at a time: bounds the writer's memory (about 25 MB of text for the
# iteration report's 21 columns) whatever the table size; larger chunks are no faster.
CHUNK_ROWS = 1 << 16
_EMPTY = pa.scalar("", pa.large_string())
_QUOTE = pa.scalar('"', pa.large_string())
_COMMA = pa.scalar(",", pa.large_string())
_NEWLINE = pa.scalar("\n", pa.large_string())


def _cell(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.1f}"
    text = str(value).replace('"', '""')
    return f'"{text}"'


def _header_cell(text: str) -> str:
    """Titles and column names are bare unless they need quoting."""
    return _cell(text) if ("," in text or '"' in text) else text


def format_column(column: pd.Series) -> pa.Array:
    """One column as CSV cell texts (an Arrow string array; missing values are empty)."""
    dtype = column.dtype
    if pd.api.types.is_bool_dtype(dtype):
        out = pc.if_else(pa.array(column, from_pandas=True, type=pa.bool_()), "yes", "no")
    elif pd.api.types.is_integer_dtype(dtype):
        out = pc.cast(pa.array(column, from_pandas=True), pa.string())
    elif pd.api.types.is_float_dtype(dtype):  # Python's rounding ("{:.1f}"), NaN -> missing below
        out = pa.array(column.astype("float64").map("{:.1f}".format).to_numpy(dtype=object))
        out = pc.if_else(pa.array(column.isna().to_numpy()), pa.scalar(None, pa.string()), out)
    elif pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty"):
        text = pa.array(column, from_pandas=True, type=pa.large_string())
        out = pc.binary_join_element_wise(_QUOTE, pc.replace_substring(text, '"', '""'), _QUOTE, _EMPTY)
    else:  # mixed object column (key/value sections): small, formatted cell by cell
        out = pa.array(column.map(_cell).to_numpy(dtype=object), type=pa.string())
        out = pc.if_else(pa.array(column.isna().to_numpy()), pa.scalar(None, pa.string()), out)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    return pc.fill_null(out.cast(pa.large_string()), _EMPTY)


def _rows(columns: list[pa.Array]) -> str:
    """CSV lines (each ending in a newline) from formatted columns, joined by Arrow, not per row."""
    last = pc.binary_join_element_wise(columns[-1], _NEWLINE, _EMPTY)
    rows = pc.binary_join_element_wise(*columns[:-1], last, _COMMA) if len(columns) > 1 else last
    text = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(rows)], pa.int64()), rows), _EMPTY)
    return text[0].as_py()


def section_chunks(section: Section) -> Iterator[str]:
    """The section's text in pieces of at most CHUNK_ROWS rows (title and header first)."""
    table = section.table
    lines = [_header_cell(section.title)]
    if section.header:
        lines.append(",".join(_header_cell(str(c)) for c in table.columns))
    yield "\n".join(lines) + "\n"
    if len(table.columns) == 0:
        return
    for first in range(0, len(table), CHUNK_ROWS):
        chunk = table.iloc[first:first + CHUNK_ROWS]
        yield _rows([format_column(chunk[c]) for c in chunk.columns])


def format_section(section: Section) -> str:
    return "".join(section_chunks(section))


def report_chunks(report: Report) -> Iterator[str]:
    """A report's CSV: its sections separated by blank lines."""
    for k, section in enumerate(report.sections):
        if k:
            yield "\n"
        yield from section_chunks(section)


@writer("csv")
class CsvWriter:
    """One CSV file per report, in DLProf's layout."""

    name = "csv"

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        return [report_path(out_dir, profile_name, suffix, "csv") for suffix in file_suffixes]

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo) -> list[Path]:
        written = []
        for report in reports:
            path = report_path(out_dir, info.profile_name, report.file_suffix, "csv")
            atomic_write_text(path, report_chunks(report))
            written.append(path)
        return written
