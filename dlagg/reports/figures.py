"""Typed figures: what a report computes, before any display formatting.

A report is a few `Table`s. A table is a frame whose columns are `Field`s: a stable ``key`` (what
a comparison of two runs, the cross-rank reduce and the HTML page join on; it carries its unit,
``gpu_time_total_ns``), DLProf's ``title`` (what the CSV shows), a ``unit`` and the decimals a
person is shown. Values are exact: integer nanoseconds, unrounded floats, booleans, decoded text.
Only the writers round, write booleans as yes/no and use the titles.

A key/value section (DLProf's summary) is a one-row table shown transposed: one field per line.

Fields also say how a figure combines over ranks (``merge``): ``key`` columns identify a row,
``sum``/``min``/``max``/``any`` columns aggregate, ``first`` keeps the first rank's value, and
``derived`` columns (averages, shares) are recomputed from the combined ones by the report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..model import stack_ranks
from .spilled import Spilled, spill, stacked

KEY, SUM, MIN, MAX, ANY, FIRST, DERIVED = "key", "sum", "min", "max", "any", "first", "derived"
MERGES = (KEY, SUM, MIN, MAX, ANY, FIRST, DERIVED)

NS, PERCENT, COUNT, BYTES = "ns", "percent", "count", "bytes"


@dataclass(frozen=True)
class Field:
    """One figure (a column of a table, or a line of a key/value section)."""

    key: str  # stable name, with its unit: "gpu_time_total_ns", "calls", "tc_utilization_pct"
    title: str  # DLProf's title: "Total GPU Time (ns)"
    unit: str = ""  # NS, PERCENT, COUNT, BYTES, or "" (text, flags, identifiers)
    digits: int | None = None  # decimals shown for a float figure; None: shown as it is
    merge: str = FIRST  # how the figure combines over ranks (see the module docstring)
    csv: bool = True  # written in the DLProf CSV; False: an extra figure (JSON, TensorBoard, HTML, comparison)
    # CSV text quoting: False writes the text bare unless it must be quoted (a comma, quote or line
    # break in it), as DLProf writes its summary's row labels ("All ops,...").
    quote: bool = True

    def __post_init__(self) -> None:
        if self.merge not in MERGES:
            raise ValueError(f"field {self.key}: unknown merge rule {self.merge!r}")


@dataclass(frozen=True)
class Table:
    """One titled table of a report: `frame` has one column per field, named by the field's key.

    Its rows are in memory, or in files (`spilled`: a big table's rows kept out of a job's parent,
    reports/spilled.py), read when `frame` or `rows` asks for them; the frame given is then empty."""

    key: str  # stable name within the report: "kernels", "all_ops", "iterations"
    title: str  # DLProf's section title: "Kernel Report"
    fields: tuple[Field, ...]
    _frame: pd.DataFrame
    key_value: bool = False  # a one-row table shown as "title,value" lines without a header
    csv: bool = True  # written in the DLProf CSV (False: figures for the other writers only)
    spilled: Spilled | None = None  # where its rows are when not in `_frame`
    # what the figures are beyond their titles, which stay DLProf's whatever the data (e.g. "times summed over 2
    # ranks"); JSON and the pages show it
    note: str = ""
    _index: dict[str, Field] = field(default_factory=dict, init=False, repr=False, compare=False)
    _values: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = [f.key for f in self.fields]
        if list(self._frame.columns) != keys:
            raise ValueError(f"table {self.key}: frame columns {list(self._frame.columns)} differ from fields {keys}")
        if self.key_value and len(self._frame) != 1:
            raise ValueError(f"table {self.key}: a key/value table has exactly one row, not {len(self._frame)}")
        if self.spilled is not None and len(self._frame):
            raise ValueError(f"table {self.key}: rows both in memory and in files")
        self._index.update((f.key, f) for f in self.fields)
        if self.key_value:  # read once, where the table is made (a rank's, on its worker); never spilled: one row
            self._values.update(self._first_row())

    @property
    def frame(self) -> pd.DataFrame:
        """Every row (read from the files of a spilled table)."""
        return self._frame if self.spilled is None else self.rows(0, len(self))

    @property
    def columns(self) -> pd.DataFrame:
        """A frame with the table's columns and their types, read from no file: the rows in memory, or a spilled
        table's empty frame (a writer that needs the types, not the rows)."""
        return self._frame

    def rows(self, first: int, stop: int) -> pd.DataFrame:
        """Rows first..stop-1 (of a spilled table, only those are read), indexed from 0."""
        if self.spilled is None:
            return self._frame.iloc[first:stop].reset_index(drop=True)
        frames = self.spilled.read(first, stop)
        if not frames:
            return self._frame
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)

    def spill(self, path: Path) -> Table:
        """The table with its rows in the file `path` instead of memory (reports/spilled.py)."""
        return replace(self, _frame=self._frame.iloc[:0], spilled=spill(self.frame, path))

    def loaded(self) -> Table:
        """The table with its rows in memory (read once from the files of a spilled table)."""
        return self if self.spilled is None else self.with_frame(self.frame)

    def field(self, key: str) -> Field:
        return self._index[key]

    def __getitem__(self, key: str) -> pd.Series:
        return self.frame[key]

    def __len__(self) -> int:
        return len(self._frame) if self.spilled is None else self.spilled.count

    @property
    def values(self) -> dict[str, Any]:
        """A key/value table's figures by key (plain Python values): read when the table is made, so that a merge of
        many ranks does not read every rank's in this process, where the cost grows with the ranks."""
        return dict(self._values) if self._values else self._first_row()

    def _first_row(self) -> dict[str, Any]:
        frame = self.frame
        return {f.key: _plain(frame[f.key].iat[0]) for f in self.fields}  # column by column: no upcast

    def with_frame(self, frame: pd.DataFrame) -> Table:
        """The same table (fields, titles) over other rows."""
        return Table(self.key, self.title, self.fields, frame[[f.key for f in self.fields]].reset_index(drop=True),
                     self.key_value, self.csv, note=self.note)

    def csv_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.csv)


@dataclass(frozen=True)
class Image:
    """A picture a report draws (the roofline): PNG bytes, and the Vega-Lite spec they were drawn from
    (an HTML page can embed the spec). The writers save the PNG as ``<profile_name>_<file_suffix>.png``
    and put it in TensorBoard; they never draw."""

    key: str  # stable name within the report: "kernels", "op_types"
    title: str
    file_suffix: str  # <profile_name>_<file_suffix>.png
    png: bytes = field(repr=False)
    spec: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels, from the PNG's header (IHDR)."""
        return int.from_bytes(self.png[16:20], "big"), int.from_bytes(self.png[20:24], "big")


def _plain(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    return value


def key_values(key: str, title: str, figures: Sequence[tuple[Field, object]], *, csv: bool = True) -> Table:
    """A key/value section from (field, value) pairs, in display order."""
    fields = tuple(f for f, _ in figures)
    frame = pd.DataFrame({f.key: pd.Series([value], dtype=_dtype(value)) for f, value in figures},
                         columns=[f.key for f in fields])
    return Table(key, title, fields, frame, key_value=True, csv=csv)


def _dtype(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int64"
    if isinstance(value, (float, np.floating)):
        return "float64"
    return "object"


# --- DLProf's Total / Avg / Min / Max statistics, in one place -------------------------------------

def stat_fields(stem: str, label: str, *, avg: str = "Avg.", unit: str = NS) -> tuple[Field, ...]:
    """Total, average, minimum and maximum of a per-call figure: ``gpu_time`` / "GPU Time" ->
    "Total GPU Time (ns)", "Avg. GPU Time (ns)", ... (DLProf's kernel report writes "Avg" without the
    dot, its other reports with it: `avg` gives the spelling)."""
    suffix = "_ns" if unit == NS else ""
    title = " (ns)" if unit == NS else ""
    return (
        Field(f"{stem}_total{suffix}", f"Total {label}{title}", unit, merge=SUM),
        Field(f"{stem}_avg{suffix}", f"{avg} {label}{title}", unit, digits=1, merge=DERIVED),
        Field(f"{stem}_min{suffix}", f"Min {label}{title}", unit, merge=MIN),
        Field(f"{stem}_max{suffix}", f"Max {label}{title}", unit, merge=MAX),
    )


def stat_columns(grouped: pd.core.groupby.SeriesGroupBy, fields: tuple[Field, ...],
                 count: pd.Series | None = None) -> dict[str, pd.Series]:
    """Total / average / min / max of one grouped figure, keyed like `fields` (from `stat_fields`).

    The average is the total over `count` (calls) when given, else the mean of the group's values
    (the same thing unless values are missing: the kernel report's API time of kernels without a
    launch call).
    """
    total, avg, low, high = fields
    sums = grouped.sum()
    mean = sums / count if count is not None else grouped.mean()
    return {total.key: sums, avg.key: mean, low.key: grouped.min(), high.key: grouped.max()}


def merge_tables(tables: Sequence[Table], derive: Callable[[pd.DataFrame], pd.DataFrame] | None = None) -> Table:
    """Tables of the same kind from several ranks combined row by row (rows with equal key fields
    become one), by each field's merge rule; `derive` recomputes the derived fields."""
    first = tables[0]
    frame = pd.concat([t.frame for t in tables], ignore_index=True)
    keys = [f.key for f in first.fields if f.merge == KEY]
    if not keys or frame.empty:
        return first.with_frame(derive(frame) if derive else frame)
    rules = {SUM: "sum", MIN: "min", MAX: "max", ANY: "max", FIRST: "first", DERIVED: "first"}
    aggregations = {f.key: rules[f.merge] for f in first.fields if f.merge != KEY}
    merged = frame.groupby(keys, sort=False, dropna=False, observed=True).agg(aggregations).reset_index()
    if derive is not None:
        merged = derive(merged)
    return first.with_frame(merged)


def derive_averages(frame: pd.DataFrame, pairs: Iterable[tuple[str, str, str]]) -> pd.DataFrame:
    """(average, total, count) column keys: average = total / count, recomputed after a merge."""
    out = frame.copy()
    for avg, total, count in pairs:
        calls = out[count].to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[avg] = np.where(calls > 0, out[total].to_numpy(dtype=np.float64) / calls, np.nan)
    return out


RANK_FIELD = Field("rank", "Rank", merge=KEY)


def with_rank(tables: Sequence[Table], ranks: Sequence[int]) -> Table:
    """Several ranks' tables of the same kind stacked, each row with its rank first."""
    fields = (RANK_FIELD, *tables[0].fields)
    if all(t.spilled is not None for t in tables):
        return stacked_table(tables, fields, partial(rank_first, ranks=tuple(ranks)))
    first = tables[0]
    frame = stack_ranks([t.frame for t in tables], ranks, first=True)
    return Table(first.key, first.title, fields, frame[[f.key for f in fields]], first.key_value, first.csv)


def stacked_table(tables: Sequence[Table], fields: tuple[Field, ...],
                  finish: Callable[[pd.DataFrame, int], pd.DataFrame]) -> Table:
    """Several ranks' tables of the same kind one after the other, with `fields`: `finish(rows, k)` makes the k-th
    table's rows the stack's (its rank first, ...), now for rows in memory, as they are read for rows kept in files
    (reports/spilled.py: those stay there)."""
    first = tables[0]
    if all(t.spilled is not None for t in tables):
        return Table(first.key, first.title, fields, finish(first.rows(0, 0), 0), first.key_value, first.csv,
                     spilled=stacked([t.spilled for t in tables], finish))  # type: ignore[misc]
    frame = pd.concat([finish(t.frame, k) for k, t in enumerate(tables)], ignore_index=True)
    return Table(first.key, first.title, fields, frame[[f.key for f in fields]], first.key_value, first.csv)


def rank_first(frame: pd.DataFrame, source: int, ranks: tuple[int, ...]) -> pd.DataFrame:
    """The rows of the `source`-th rank's table with its rank first (`frame` itself unchanged)."""
    frame = frame.copy(deep=False)
    frame.insert(0, "rank", np.full(len(frame), ranks[source], dtype=np.int64))
    return frame


def summed_over(table: Table, ranks: int) -> Table:
    """The table with a note that its summed time figures add up several ranks' GPUs. The column titles stay
    DLProf's ("Total GPU Time (ns)"): scripts find columns by title, whatever the number of ranks."""
    summed = [f.title for f in table.fields if f.merge == SUM and f.unit == NS]
    if not summed:
        return table
    return replace(table, note=f"times summed over {ranks} ranks: {', '.join(summed)}")
