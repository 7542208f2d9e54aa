"""CSV in DLProf v1.8's layout: per section a title line, a header, rows; blank line between sections.

Integers as integers (ns), averages and percentages with one decimal, strings double-quoted,
missing values empty. Formatting is column-wise (vectorised), never per row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..reports.base import Report, Section
from .base import RunInfo, atomic_write_text, report_path, writer


def _quote(values: pd.Series) -> pd.Series:
    return '"' + values.astype(str).str.replace('"', '""', regex=False) + '"'


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


def format_column(column: pd.Series) -> pd.Series:
    """One column as CSV cell texts."""
    missing = column.isna().to_numpy()
    dtype = column.dtype
    if pd.api.types.is_bool_dtype(dtype):
        out = pd.Series(np.where(column.to_numpy(dtype=bool), "yes", "no"), index=column.index, dtype=object)
    elif pd.api.types.is_integer_dtype(dtype):
        out = column.astype("Int64").astype(str)
    elif pd.api.types.is_float_dtype(dtype):
        out = column.astype("float64").map("{:.1f}".format)
    elif pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty"):
        out = _quote(column.fillna(""))
    else:  # mixed object column (key/value sections): small, formatted cell by cell
        out = column.map(_cell)
    out = out.astype(object)
    out[missing] = ""
    return out


def format_section(section: Section) -> str:
    table = section.table
    lines = [_header_cell(section.title)]
    if section.header:
        lines.append(",".join(_header_cell(str(c)) for c in table.columns))
    if len(table):
        columns = [format_column(table[c]) for c in table.columns]
        rows = columns[0]
        for column in columns[1:]:
            rows = rows + "," + column
        lines.append("\n".join(rows.tolist()))
    return "\n".join(lines) + "\n"


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
            atomic_write_text(path, "\n".join(format_section(s) for s in report.sections))
            written.append(path)
        return written
