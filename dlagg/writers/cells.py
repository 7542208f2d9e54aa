"""Figure tables as text cells, column by column, for the CSV, JSON and Markdown writers.

This is where figures get their display form: a float is shown with its field's ``digits``
(correctly rounded, as Python's format does), a boolean as the style's yes/no, a missing value as
the style's blank.

Contract: ``Cells(table, style)`` prepares every column of a `figures.Table` once, then
``cells.lines(first, stop, ...)`` returns the bytes of rows ``first..stop-1``, one line per row.
Everything is vectorised with Arrow compute; Python touches each *distinct* string at most once:
categorical columns (kernel and op names repeated over 100 k rows) have their categories
formatted once per table and are taken by code for each chunk, and JSON strings are escaped
once per distinct value. Writing a big table chunk by chunk keeps memory bounded.

CSV text cells that a spreadsheet would run as a formula are defused here, and only here (`CSV`,
`defuse`); `CSV_RAW` (--raw_csv=true) and JSON keep the text as it is.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..reports.figures import Field

STRING = pa.large_string()  # row texts of a chunk can pass 2 GiB in a huge report: 64-bit offsets


@functools.cache
def _text(value: str) -> pa.Scalar:
    """A string scalar for Arrow compute (made once: building scalars costs more than using them)."""
    return pa.scalar(value, STRING)


def _arrow(column: pd.Series, type_: pa.DataType | None = None) -> pa.Array:
    array = pa.array(column, from_pandas=True, type=type_)
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _is_text(column: pd.Series) -> bool:
    return pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty")


def _per_value(column: pd.Series, cell: Callable[[object], str]) -> pa.Array:
    """Cell by cell in Python: for float and mixed columns, which only small tables have."""
    missing = column.isna().to_numpy()
    texts = [None if m else cell(v) for v, m in zip(column.to_numpy(dtype=object), missing, strict=True)]
    return pa.array(texts, type=STRING)


def is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


@dataclass(frozen=True)
class Style:
    """How a format writes cells (one value, or a whole column vectorised) and rows."""

    missing: str  # a missing value
    true: str
    false: str
    integer: Callable[[int], str]
    number: Callable[[float, int | None], str]  # a float shown with `digits` decimals (None: the style's default)
    text: Callable[[str], str]  # one string
    texts: Callable[[pa.Array], pa.Array] | None = None  # a column of strings, vectorised (nulls stay null)
    # A string, and a column of strings, where the field asks for text bare when it can be (Field.quote).
    bare_text: Callable[[str], str] | None = None
    bare_texts: Callable[[pa.Array], pa.Array] | None = None
    separator: str = ","
    prefix: str = ""
    suffix: str = "\n"

    def value(self, value: object, digits: int | None = None, quote: bool = True) -> str:
        """One value of any type (`quote` False: text bare when it can be, see `Field.quote`)."""
        if is_missing(value):
            return self.missing
        if isinstance(value, (bool, np.bool_)):
            return self.true if value else self.false
        if isinstance(value, (int, np.integer)):
            return self.integer(int(value))
        if isinstance(value, (float, np.floating)):
            return self.number(float(value), digits)
        if not quote and self.bare_text is not None:
            return self.bare_text(str(value))
        return self.text(str(value))

    def cells(self, column: pd.Series, digits: int | None = None, quote: bool = True) -> pa.Array:
        """A (non-categorical) column as cell texts, nulls where values are missing."""
        dtype = column.dtype
        if pd.api.types.is_bool_dtype(dtype):
            return pc.if_else(_arrow(column, pa.bool_()), _text(self.true), _text(self.false))
        if pd.api.types.is_integer_dtype(dtype):  # digits in every style
            return pc.cast(_arrow(column), STRING)
        if pd.api.types.is_float_dtype(dtype):
            return _per_value(column, lambda v: self.number(float(v), digits))  # type: ignore[arg-type]
        if not quote and self.bare_texts is not None and _is_text(column):
            return self.bare_texts(_arrow(column, STRING))
        if self.texts is not None and _is_text(column):
            return self.texts(_arrow(column, STRING))
        return _per_value(column, lambda v: self.value(v, quote=quote))  # mixed object column: a few cells


def _csv_text(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _csv_texts(text: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(_text('"'), pc.replace_substring(text, '"', '""'), _text('"'), _text(""))


# What forces a CSV cell into quotes (RFC 4180): the separator, a quote or a line break in it.
_MUST_QUOTE = r'[,"\r\n]'


def _csv_bare(text: str) -> str:
    return _csv_text(text) if any(c in text for c in ',"\r\n') else text


def _csv_bare_texts(text: pa.Array) -> pa.Array:
    return pc.if_else(pc.match_substring_regex(text, _MUST_QUOTE), _csv_texts(text), text)


def _json_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _json_texts(text: pa.Array) -> pa.Array:
    """Escaped once per distinct string."""
    encoded = pc.dictionary_encode(text)
    return pa.array([_json_text(v) for v in encoded.dictionary.to_pylist()], type=STRING).take(encoded.indices)


def _fixed(value: float, digits: int | None) -> str:
    return f"{value:.{1 if digits is None else digits}f}"


def _exact(value: float, digits: int | None) -> str:
    return json.dumps(value)


# Spreadsheets run a cell that starts with one of these as a formula (`=cmd|' /C calc'!A0`, `@SUM(1+1)`, `+`,
# `-`; a leading tab or carriage return is dropped on import and can uncover one). Profile text (NVTX ranges,
# kernel, op and layer names) is whatever the profiled program wrote, so as OWASP's CSV injection guidance
# recommends such a text cell gets a single quote in front, which spreadsheets show and never evaluate.
# Numbers are not text: -3 stays -3. --raw_csv=true writes the profile's exact text (CSV_RAW).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_FORMULA = r"^[=+\-@\t\r]"


def defuse(text: str) -> str:
    """One text cell a spreadsheet will not run as a formula."""
    return "'" + text if text.startswith(FORMULA_START) else text


def defuse_texts(text: pa.Array) -> pa.Array:
    """A column of text cells, vectorised (nulls stay null)."""
    quoted = pc.binary_join_element_wise(_text("'"), text, _text(""))
    return pc.if_else(pc.match_substring_regex(text, _FORMULA), quoted, text)


def _safe_csv_text(text: str) -> str:
    return _csv_text(defuse(text))


def _safe_csv_texts(text: pa.Array) -> pa.Array:
    return _csv_texts(defuse_texts(text))


def _safe_csv_bare(text: str) -> str:
    return _csv_bare(defuse(text))


def _safe_csv_bare_texts(text: pa.Array) -> pa.Array:
    return _csv_bare_texts(defuse_texts(text))


# DLProf v1.8's cells: integers bare, floats with one decimal (Python's rounding), yes/no and strings quoted;
# text cells that would start a formula defused (above).
CSV = Style(missing="", true='"yes"', false='"no"', integer=str, number=_fixed, text=_safe_csv_text,
            texts=_safe_csv_texts, bare_text=_safe_csv_bare, bare_texts=_safe_csv_bare_texts)
# --raw_csv=true: DLProf's cells exactly, the profile's text as it is.
CSV_RAW = replace(CSV, text=_csv_text, texts=_csv_texts, bare_text=_csv_bare, bare_texts=_csv_bare_texts)


def csv_style(raw: bool) -> Style:
    return CSV_RAW if raw else CSV
# JSON carries the figures themselves: floats unrounded, booleans as booleans.
JSON = Style(missing="null", true="true", false="false", integer=str, number=_exact, text=_json_text,
             texts=_json_texts, prefix="[", suffix="],")


class Cells:
    """A figure table's columns (`fields`, in that order) ready to be written chunk by chunk in a style."""

    def __init__(self, frame: pd.DataFrame, fields: Sequence[Field], style: Style) -> None:
        self.style = style
        self.rows = len(frame)
        self.columns: list[tuple[pa.Array, np.ndarray] | pa.Array | tuple[pd.Series, Field]] = []
        for field in fields:
            column = frame[field.key]
            dtype = column.dtype
            if isinstance(dtype, pd.CategoricalDtype):  # categories formatted once for the table
                values = column.array
                categories = pd.Series(np.asarray(values.categories, dtype=object), dtype=object)
                self.columns.append((style.cells(categories, field.digits, field.quote).cast(STRING),
                                     np.asarray(values.codes)))
            elif pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
                self.columns.append(_arrow(column))  # the same digits in every style; sliced per chunk
            else:
                self.columns.append((column, field))

    def _chunk(self, column: tuple[pa.Array, np.ndarray] | pa.Array | tuple[pd.Series, Field], first: int,
               stop: int) -> pa.Array:
        if isinstance(column, pa.Array):
            return pc.cast(column.slice(first, stop - first), STRING)
        values, detail = column
        if isinstance(detail, Field):  # (series, field): formatted per chunk
            return self.style.cells(values.iloc[first:stop], detail.digits, detail.quote)
        part = detail[first:stop]  # codes into the formatted categories
        return values.take(pa.array(part, mask=part < 0)) if (part < 0).any() else values.take(part)

    def lines(self, first: int, stop: int) -> pa.Buffer:
        """The bytes of rows first..stop-1: ``prefix + cells joined by separator + suffix`` each.

        The joined rows are one Arrow string array whose data buffer *is* that text: it is handed
        over without another copy.
        """
        style = self.style
        columns = []
        for column in self.columns:
            cells = self._chunk(column, first, stop)
            if cells.type != STRING:
                cells = cells.cast(STRING)
            columns.append(pc.fill_null(cells, _text(style.missing)) if cells.null_count else cells)
        rows = pc.binary_join_element_wise(*columns, _text(style.separator)) if len(columns) > 1 else columns[0]
        del columns
        if style.prefix or style.suffix:
            rows = pc.binary_join_element_wise(_text(style.prefix), rows, _text(style.suffix), _text(""))
        if isinstance(rows, pa.ChunkedArray):
            rows = rows.combine_chunks()
        if len(rows) == 0:
            return pa.py_buffer(b"")
        offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[rows.offset:rows.offset + len(rows) + 1]
        return rows.buffers()[2][int(offsets[0]):int(offsets[-1])]
