"""NVTX ranges read as (name, seq): per-call text never enters memory.

PyTorch's ``emit_nvtx`` appends per-call details to every range's text: ``aten::conv2d, seq = 253,
op_id = 200, sizes = [[32, 256, 14, 14], ...], input_op_ids = [(198,0), ...]``. They make nearly
every text unique: 0.85 M ranges carry 100 MB of text per 160 MB of export, and holding it (or a
dictionary of it) was most of dlagg's memory. No report needs it whole: ops need the name and the
autograd ``seq``, and the input shapes of the few ranges that launched GPU work.

So SQLite cuts each text where ``, op_id = `` or ``, sizes = `` begins (keeping that marker, which
says the text was an emit_nvtx one), the Arrow side splits ``name, seq = N``, and names are
dictionary-encoded: a range is an integer name id (into the profile's string table) and a ``seq``
(-1 when none); per name, an ``emit`` flag says some range of that name carried emit_nvtx's
``seq``/``op_id``/``sizes`` (``Profile.nvtx_names``).
Registered strings (``textId`` -> ``StringIds``) go through the same cut, so every range's
``text_id`` is a name id. ``NvtxDetails.input_shapes`` reads the ``sizes = [...]`` part later,
by row id, for the ranges that need it.

The table is read in row-id slices on worker threads (SQLite, the ADBC driver and Arrow compute
release the GIL); each slice is parsed at once and written into preallocated columns, so no slice
of text outlives its parsing.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..model import categorical, factorize_ids
from .validate import texts as utf8_texts

# The markers emit_nvtx puts after "name[, seq = N]"; both are 10 characters long.
CUT_MARKERS = (", op_id = ", ", sizes = ")
CUT_LENGTH = 10
# (at most 9 digits: a seq number is an int32; longer digit runs are not emit_nvtx's)
_SEQ = r"^(?P<head>[^,]*), seq = (?P<seq>\d{1,9})(?:, |$)"
_INPUT_OP_IDS_TAIL = r", input_op_ids = .*$"
# Rows per SQL query when reading shapes by row id (literal integer lists, no parameters).
SHAPES_PER_QUERY = 20_000


def text_sql(present: set[str], strings_table: str) -> str:
    """The SQL expression of a range's whole text: inline ``text``, else its registered string."""
    registered = f'(SELECT "value" FROM "{strings_table}" WHERE "id" = "textId")'
    if "text" in present and "textId" in present:
        return f'COALESCE("text", {registered})'
    if "text" in present:
        return '"text"'
    return registered if "textId" in present else "NULL"


def cut_sql(text: str) -> str:
    """`text` up to and including the first emit_nvtx detail marker (the whole text when it has none)."""
    op_id, sizes = (f"instr({text}, '{marker}')" for marker in CUT_MARKERS)
    return (f"CASE WHEN {op_id} > 0 THEN substr({text}, 1, {op_id} + {CUT_LENGTH - 1}) "
            f"WHEN {sizes} > 0 THEN substr({text}, 1, {sizes} + {CUT_LENGTH - 1}) ELSE {text} END")


@dataclass(frozen=True)
class Names:
    """One slice's texts split: per row a code into `names`, the seq number and the emit flag."""

    codes: np.ndarray  # int32, -1 for a range without text
    seq: np.ndarray  # int32, -1 when none
    names: pa.Array  # distinct names of the slice
    emit: np.ndarray  # per name: some text of that name carried emit_nvtx details


def split_names(cut: pa.Array | pa.ChunkedArray) -> Names:
    """Split texts cut by `cut_sql` into name, seq and emit flag.

    Vectorised with Arrow (RE2), and over the distinct cut texts only: a name and seq repeat
    across iterations' ranges and between a forward op and its backward node, so an emit_nvtx
    export has about one distinct cut text per five ranges.
    """
    cut = utf8_texts(cut)  # any type a damaged column holds, as valid UTF-8
    encoded = pc.dictionary_encode(cut)
    rows = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    texts = encoded.dictionary
    marked = pc.or_(pc.ends_with(texts, CUT_MARKERS[0]), pc.ends_with(texts, CUT_MARKERS[1]))
    parts = pc.extract_regex(texts, _SEQ)  # null where the text has no ", seq = N" after its name
    has_seq = pc.is_valid(parts)
    head = pc.if_else(has_seq, pc.struct_field(parts, "head"),
                      pc.if_else(marked, pc.utf8_slice_codeunits(texts, 0, -CUT_LENGTH), texts))
    names = pc.dictionary_encode(head)
    # per distinct text, then per row (-1 stands for a range without text: the last slot)
    code = np.append(names.indices.to_numpy(zero_copy_only=False), -1).astype(np.int32)
    seq = np.append(pc.fill_null(pc.cast(pc.struct_field(parts, "seq"), pa.int64()), -1)
                    .to_numpy(zero_copy_only=False), -1).astype(np.int32)
    emit = pc.or_(marked, has_seq).to_numpy(zero_copy_only=False).astype(bool)
    emit_names = np.zeros(len(names.dictionary), dtype=bool)
    emit_names[code[:-1][emit]] = True
    rows = np.where(rows >= 0, rows, len(texts))
    return Names(codes=code[rows], seq=seq[rows], names=names.dictionary, emit=emit_names)


class NvtxDetails:
    """Reads what the frame leaves out, for a few ranges at a time, by NVTX row id."""

    def __init__(self, connect: Callable[[], Any], table: str | None, text: str, threads: int = 1) -> None:
        self.connect = connect  # opens the export again (read-only): an object with .arrow(sql) and .close()
        self.table = table
        self.text = text  # SQL expression of a range's whole text
        self.threads = threads

    def input_shapes(self, rows: np.ndarray) -> pd.Categorical:
        """emit_nvtx's ``sizes = [...]`` text of each NVTX row id ('' when it has none)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.table is None or len(rows) == 0:
            return categorical(np.full(len(rows), -1), [])
        wanted = factorize_ids(rows)[0]
        sizes = f"instr({self.text}, '{CUT_MARKERS[1]}')"

        def read(lo: int) -> pa.Table:
            ids = ",".join(map(str, wanted[lo:lo + SHAPES_PER_QUERY].tolist()))  # integers we made, not input
            return db.arrow(f'SELECT rowid AS row, substr({self.text}, {sizes} + {CUT_LENGTH}) AS sizes '
                        f'FROM "{self.table}" WHERE rowid IN ({ids}) AND {sizes} > 0', SHAPES_PER_QUERY,
                        f", table {self.table}")

        # a B-tree seek and a long text per row: worth the reader's threads on big exports
        db = self.connect()
        try:
            with ThreadPoolExecutor(self.threads) as pool:
                pieces = list(pool.map(read, range(0, len(wanted), SHAPES_PER_QUERY)))
        finally:
            db.close()
        found = pa.concat_tables(pieces)
        if found.num_rows == 0:
            return categorical(np.full(len(rows), -1), [])
        keys = found.column("row").to_numpy().astype(np.int64, copy=False)
        # the list of input shapes ends where emit_nvtx's input_op_ids begin
        text = pc.replace_substring_regex(utf8_texts(found.column("sizes")), _INPUT_OP_IDS_TAIL, "")
        encoded = pc.dictionary_encode(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text)
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.argsort(keys, kind="stable")
        keys, codes = keys[order], codes[order]
        pos = np.minimum(np.searchsorted(keys, rows), len(keys) - 1)
        codes = np.where(keys[pos] == rows, codes[pos], -1)
        return categorical(codes, np.array(encoded.dictionary.to_pylist(), dtype=object))
