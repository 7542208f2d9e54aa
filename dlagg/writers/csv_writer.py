"""CSV in DLProf v1.8's layout: per section a title line, a header, rows; blank line between sections.

Integers as integers (ns), averages and percentages with one decimal, strings double-quoted,
missing values empty. Formatting is column-wise (vectorised, ``cells.py``), never per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from ..reports.base import Report, Section
from .base import RunInfo, atomic_write, report_path, writer
from .cells import CSV, Cells

# Rows formatted and written at a time: bounds the writer's memory (about 10 MB of text for the
# iteration report's 21 columns, plus Arrow's intermediates) whatever the table size; larger
# chunks are no faster.
CHUNK_ROWS = 4096


def _header_cell(text: str) -> str:
    """Titles and column names are bare unless they need quoting."""
    return CSV.value(text) if ("," in text or '"' in text) else text


def section_chunks(section: Section) -> Iterator[str | memoryview]:
    """The section's text in pieces of at most CHUNK_ROWS rows (title and header first)."""
    table = section.table
    head = [_header_cell(section.title)]
    if section.header:
        head.append(",".join(_header_cell(str(c)) for c in table.columns))
    yield "\n".join(head) + "\n"
    if len(table.columns) == 0:
        return
    cells = Cells(table, CSV)
    for first in range(0, len(table), CHUNK_ROWS):
        yield memoryview(cells.lines(first, min(first + CHUNK_ROWS, len(table))))


def format_section(section: Section) -> str:
    return "".join(p if isinstance(p, str) else bytes(p).decode("utf-8") for p in section_chunks(section))


def report_chunks(report: Report) -> Iterator[str | memoryview]:
    """A report's CSV: its sections separated by blank lines."""
    for k, section in enumerate(report.sections):
        if k:
            yield "\n"
        yield from section_chunks(section)


@writer("csv")
class CsvWriter:
    """One CSV file per report, in DLProf's layout."""

    name = "csv"
    per_report = True

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        return [report_path(out_dir, profile_name, suffix, "csv") for suffix in file_suffixes]

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo) -> list[Path]:
        written = []
        for report in reports:
            path = report_path(out_dir, info.profile_name, report.file_suffix, "csv")
            atomic_write(path, report_chunks(report))
            written.append(path)
        return written
