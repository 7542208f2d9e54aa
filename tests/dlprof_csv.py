"""Read the CSV files dlagg writes in DLProf's "titled sections" layout, independently of dlagg.

The layout (DLProf v1.8, docs/reports.md): each section is a title line, then either a header line
and rows (a table) or ``Key,value`` rows with no header (key/value); sections are separated by a
blank line. Strings in tables are double-quoted, numbers and missing values bare; titles, column
names, a table's row labels (the summary's ``All ops``) and key/value lines are bare unless they
hold a comma or a quote, as DLProf writes them. So a section is key/value when each of its lines
has two cells and its first line's value is a value (a number, empty, quoted, or a bare word that
is no column title: a header line is followed by rows of the same width).

Only the file's text is read here: no dlagg import, so the tests that use this keep working while
the reports behind the files change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

Cell = tuple[str, bool]  # (text, was quoted)


def _records(text: str) -> list[list[Cell]]:
    """CSV records with each cell's quoting kept (quoted cells may hold commas, quotes, newlines)."""
    records: list[list[Cell]] = []
    row: list[Cell] = []
    cell: list[str] = []
    quoted = in_quotes = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if in_quotes:
            if ch == '"' and i + 1 < n and text[i + 1] == '"':
                cell.append('"')
                i += 1
            elif ch == '"':
                in_quotes = False
            else:
                cell.append(ch)
        elif ch == '"' and not cell:
            in_quotes = quoted = True
        elif ch == ",":
            row.append(("".join(cell), quoted))
            cell, quoted = [], False
        elif ch == "\n":
            if row or cell or quoted:
                row.append(("".join(cell), quoted))
            records.append(row)
            row, cell, quoted = [], [], False
        else:
            cell.append(ch)
        i += 1
    if in_quotes:
        raise ValueError("unterminated quoted cell")
    if row or cell or quoted:
        row.append(("".join(cell), quoted))
        records.append(row)
    return records


def _value(cell: Cell, bare_text: bool = False) -> object:
    """Quoted: the string. Bare: None when empty, else an int or a float; a bare word is an error
    unless `bare_text` (row labels, key/value lines), where it is the string."""
    text, quoted = cell
    if quoted:
        return text
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            if bare_text:
                return text
            raise


@dataclass(frozen=True)
class Section:
    title: str
    header: tuple[str, ...] | None  # None: a key/value section
    rows: tuple[tuple[object, ...], ...]

    def frame(self) -> pd.DataFrame:
        """A table section as a frame (object columns: the file's values as they are)."""
        if self.header is None:
            raise ValueError(f"section {self.title!r} is a key/value section")
        return pd.DataFrame([list(r) for r in self.rows], columns=list(self.header), dtype=object)

    def values(self) -> dict[str, object]:
        """A key/value section as a dict."""
        if self.header is not None:
            raise ValueError(f"section {self.title!r} is a table")
        return {str(k): v for k, v in self.rows}


def is_number(text: str) -> bool:
    """Whether a CSV cell reads as a number (as float() reads it)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _key_value(body: list[list[Cell]]) -> bool:
    """Whether a section's lines are key/value lines rather than a header and rows: a header holds
    bare titles, never a number and never a quoted first cell (the old key/value style); a bare
    text/text first line is a key/value line when every line is a bare key and a value."""
    first = body[0]
    if first[0][1] or any(not quoted and text and is_number(text) for text, quoted in first):
        return True
    return len(first) == 2 and len(body) > 1 and all(len(r) == 2 and not r[0][1] and r[0][0] for r in body)


def parse(text: str) -> dict[str, Section]:
    """Every section of a file's text, by title, in file order."""
    blocks: list[list[list[Cell]]] = [[]]
    for record in _records(text):
        if record:
            blocks[-1].append(record)
        elif blocks[-1]:
            blocks.append([])
    sections: dict[str, Section] = {}
    for block in blocks:
        if not block:
            continue
        if len(block[0]) != 1:
            raise ValueError(f"a section title is one cell, got {block[0]!r}")
        title = block[0][0][0]
        body = block[1:]
        if body and not _key_value(body):  # a header, then rows
            header = tuple(text for text, _ in body[0])
            labels = header[0] == ""  # an untitled first column holds bare row labels (the summary's)
            rows = tuple(tuple(_value(c, bare_text=labels and k == 0) for k, c in enumerate(r)) for r in body[1:])
            if any(len(r) != len(header) for r in rows):
                raise ValueError(f"section {title!r}: a row's length differs from the header's")
        else:
            header = None
            rows = tuple(tuple(_value(c, bare_text=True) for c in r) for r in body)
            if any(len(r) != 2 for r in rows):
                raise ValueError(f"section {title!r}: key/value rows have two cells")
        if title in sections:
            raise ValueError(f"two sections titled {title!r}")
        sections[title] = Section(title, header, rows)
    return sections


def read(path: Path) -> dict[str, Section]:
    return parse(path.read_text(encoding="utf-8"))


def table(path: Path, title: str | None = None) -> pd.DataFrame:
    """The table section `title` of a file (its only section when `title` is None) as a frame."""
    sections = read(path)
    if title is None:
        if len(sections) != 1:
            raise ValueError(f"{path.name} has {len(sections)} sections: name one")
        return next(iter(sections.values())).frame()
    return sections[title].frame()
