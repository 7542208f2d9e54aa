"""Read an nsys SQLite export into a `Profile`, read-only, whatever the nsys version.

Contract: ``read_nsys(db, process=None) -> Profile``, `db` the `Database` opened on the export
(``reader/database.py``: read-only, Arrow reads through the ADBC SQLite driver; ``load_profile(path)`` opens
it). Every table is checked as it is read (``reader/validate.py``).

Memory is the budget that matters on big exports (peak under twice the file size): each table arrives as one
Arrow batch whose numeric columns become numpy arrays *without a copy*, NULLs are filled on the Arrow side
(``COALESCE`` in SQL made the driver half as fast), and NVTX text is cut and dictionary-encoded slice by slice
as it is read (``reader/nvtx.py``). Tables and NVTX slices are read on worker threads, each with its own
connection: SQLite, the driver and Arrow compute release the GIL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..log import shown
from ..model import SYSTEM_INFO, TEXT, Profile, ProfileMeta, StringTable
from . import nvtx as nv
from . import schema
from . import validate as va
from .database import DAMAGED, READ_THREADS, Database
from .frames import empty_frame, time_range
from .schema import NO_ID, Column, Table

# Bytes a name (a kernel's, an NVTX range's) may have in the reports; longer ones are shortened with a marker of
# what was cut (`bounded_names`, docs/input.md).
NAME_BOUND = 16384
# NVTX rows per slice: big enough that per-query costs vanish (a slice is a row-id range: SQLite
# seeks to it), small enough that the slices being parsed (about 16 MB of Arrow data each) stay a
# small share of the memory budget.
NVTX_SLICE_ROWS = 1 << 18
# NVTX row-id spans up to which the rows are taken as dense (columns preallocated over the span).
NVTX_DENSE_SPAN = 1 << 20
# Thread ids of one process: globalTid = globalPid + tid, tid < 2^24 (reference §2.3).
PROCESS_THREADS = 1 << 24


def _missing(db: Database, table: Table, physical: str) -> list[str]:
    """Columns `table` requires that `physical` lacks."""
    present = set(db.columns(physical)) | {"rowid"}
    return [c.source for c in table.required if c.source not in present]


def _table_sql(db: Database, table: Table, physical: str, *, extra: str = "", where: str = "") -> str:
    """SQL reading `table`'s declared columns from `physical`, plus `extra`; checks required columns."""
    present = set(db.columns(physical)) | {"rowid"}
    missing = _missing(db, table, physical)
    if missing:
        raise InputError(f"{shown(db.path)}: table {physical} lacks column(s) {', '.join(missing)}; "
                         "this does not look like an nsys export")
    select = [_select(column, present) for column in table.columns]
    if extra:
        select.append(extra)
    return f'SELECT {", ".join(select)} FROM "{physical}"' + (f" WHERE {where}" if where else "")


def _process_filter(db: Database, physical: str, process: int | None) -> str:
    """SQL condition keeping one process's rows of `physical` ('' for all processes).

    GPU tables carry the process (``globalPid``); CPU-side tables the thread, whose process part
    is the same number in the high bits: a process's threads are the ids [globalPid, globalPid +
    2^24). A table without either column cannot be split and is read whole.
    """
    if process is None:
        return ""
    present = set(db.columns(physical))
    if "globalPid" in present:
        return f'"globalPid" = {int(process)}'
    if "globalTid" in present:
        return f'"globalTid" >= {int(process)} AND "globalTid" < {int(process) + PROCESS_THREADS}'
    return ""


def _read_table(db: Database, table: Table, flaws: va.Flaws | None = None,
                process: int | None = None) -> tuple[pd.DataFrame, str | None]:
    """Read `table` with its declared dlagg columns and dtypes (empty frame if absent); all of it, or
    one process's rows (`process`: its ``globalPid``).

    Rows holding a value that is not an integer, or NULL in a required column, are dropped and
    counted in `flaws`; a table without a column it requires is an `InputError` (`_table_sql`).
    """
    physical = db.find(table.sources)
    if physical is None:
        return empty_frame(table), None
    flaws = flaws if flaws is not None else va.Flaws(db.path.name)
    arrow = db.arrow(_table_sql(db, table, physical, where=_process_filter(db, physical, process)),
                     db.rows(physical), f", table {physical}")
    return frame_of(arrow, table.columns, physical, flaws), physical


def frame_of(arrow: pa.Table, columns: Iterable[Column], physical: str = "",
             flaws: va.Flaws | None = None) -> pd.DataFrame:
    """The declared columns of `arrow` as a frame of numpy arrays (views of the Arrow buffers when
    they are one chunk of the right type). Rows with a value that is not an integer, or NULL in a
    required column, are dropped and counted in `flaws` (each row once, under its first fault)."""
    data = {}
    dropped = _Dropped(physical, flaws)
    for c in columns:
        converted = va.integers(arrow.column(c.name), c.dtype, c.default, whole=c.name in va.TIMES)
        data[c.name] = converted.values
        dropped.add(converted, c)
    frame = pd.DataFrame(data, copy=False)  # the arrays are views of the Arrow batch: keep them, do not consolidate
    return frame if dropped.rows is None else frame[~dropped.rows].reset_index(drop=True)


class _Dropped:
    """Rows dropped for their values, column after column: each counted once, under its first fault."""

    def __init__(self, physical: str, flaws: va.Flaws | None) -> None:
        self.physical = physical
        self.flaws = flaws if flaws is not None else va.Flaws("")
        self.rows: np.ndarray | None = None

    def add(self, converted: va.Converted, column: Column, among: np.ndarray | None = None) -> None:
        """Count `converted`'s bad values (and NULLs when `column` is required), within `among` rows."""
        for cause, mask in (("type", converted.bad), ("null", converted.null if column.default is None else None)):
            if mask is None:
                continue
            if among is not None:
                mask = mask & among
            fresh = mask if self.rows is None else mask & ~self.rows
            self.flaws.add(cause, self.physical, int(np.count_nonzero(fresh)), column.source)
            self.rows = mask.copy() if self.rows is None else self.rows | mask


def _select(column: Column, present: set[str]) -> str:
    """The column as is (NULLs are filled on the Arrow side), or its default when the export lacks it."""
    if column.source not in present:
        return f"{column.default} AS {column.name}"
    return f'"{column.source}" AS {column.name}'


def _key_values(db: Database, candidates: Iterable[str]) -> dict[str, str]:
    physical = db.find(candidates)
    if physical is None:
        return {}
    if not {"name", "value"} <= set(db.columns(physical)):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in db.query(f'SELECT name, value FROM "{physical}"')}


def _system_info(db: Database) -> dict[str, str]:
    """The ``SystemInfo`` table some older exports (nsys 2022.1) hold, as ``SystemInfo:<name>`` -> value:
    name/value rows, or the columns of its first row. Empty when the export has none."""
    physical = db.find(schema.SYSTEM_INFO_TABLES)
    if physical is None:
        return {}
    columns = db.columns(physical)
    if {"name", "value"} <= set(columns):
        rows = db.query(f'SELECT name, value FROM "{physical}"')
    else:
        first = db.query(f'SELECT * FROM "{physical}" LIMIT 1')
        rows = list(zip(columns, first[0], strict=True)) if first else []
    return {f"{SYSTEM_INFO}{k}": str(v) for k, v in rows if v is not None and str(v) != ""}


_GPU_COLUMNS = {  # dlagg column -> candidate nsys columns, across TARGET_INFO_GPU / _CUDA_GPU versions
    "device_id": ("cuDevice", "id", "deviceId"),
    "name": ("name",),
    "cc_major": ("computeMajor", "computeCapabilityMajor"),
    "cc_minor": ("computeMinor", "computeCapabilityMinor"),
    "total_memory": ("totalMemory", "globalMemorySize"),
    "sm_count": ("smCount", "numMultiprocessors"),
}


def _gpus(db: Database, flaws: va.Flaws | None = None) -> pd.DataFrame:
    """One row per GPU, from whichever GPU table answers most of the columns.

    ``device_id`` is int64 (rows without a usable one are dropped and counted), ``name`` a string,
    the other columns nullable integers (``<NA>`` where the export has no usable value). A few rows: read in
    Python rather than through pandas, whose fixed cost per call would outweigh them.
    """
    best: tuple[int, list[tuple[object, ...]], str, dict[str, str | None]] | None = None
    for physical in schema.GPU_TABLES:
        if physical not in db.tables:
            continue
        present = db.columns(physical)
        picks = {key: next((c for c in cands if c in present), None) for key, cands in _GPU_COLUMNS.items()}
        if picks["name"] is None or picks["device_id"] is None:
            continue
        select = ", ".join(f'"{col}" AS {key}' if col else f"NULL AS {key}" for key, col in picks.items())
        rows = db.query(f'SELECT {select} FROM "{physical}"')
        score = sum(col is not None for col in picks.values())
        if rows and (best is None or score > best[0]):
            best = (score, rows, physical, picks)
    by_device: dict[int, tuple[object, ...]] = {}
    if best is not None:
        _, rows, physical, picks = best
        read = [(_whole(device), _gpu_name(name), *map(_whole, rest)) for device, name, *rest in rows]
        usable = [row for row in read if row[0] is not None]
        if len(usable) < len(rows) and flaws is not None:
            flaws.add("type", physical, len(rows) - len(usable), picks["device_id"] or "")
        for row in usable:  # the first row of each device
            by_device.setdefault(row[0], row)  # type: ignore[arg-type]
    columns = list(zip(*(by_device[device] for device in sorted(by_device)), strict=True)) or [()] * len(_GPU_COLUMNS)
    return pd.DataFrame({"device_id": np.array(columns[0], dtype=np.int64), "name": pd.Series(columns[1], dtype=object),
                         **{key: pd.array(list(values), dtype="Int64")
                            for key, values in zip(list(_GPU_COLUMNS)[2:], columns[2:], strict=True)}})


def _gpu_name(value: object) -> str:
    return "" if value is None else value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _whole(value: object) -> int | None:
    """A cell holding a whole number (of magnitude under 2**62), else None (text, NaN, a fraction)."""
    if isinstance(value, int | float) and math.isfinite(value) and value == math.floor(value) and abs(value) < 2.0**62:
        return int(value)
    return None


class _NvtxRead:
    """NVTX ranges read in row-id slices into preallocated columns (see reader/nvtx.py).

    Slices are read, parsed and checked (validate.py: values, negative times, ends before starts)
    on worker threads; ``finish`` unifies their name dictionaries and drops the row ids that held
    no usable range (marks, domain rows, gaps, damaged rows).
    """

    def __init__(self, db: Database, strings_table: str, flaws: va.Flaws, process: int | None = None) -> None:
        self.db = db
        self.flaws = flaws
        self.process = process
        self.physical = db.find(schema.NVTX.sources)
        self.slices: list[tuple[int, int, int]] = []  # (first row id, end row id, offset in the columns)
        self.text = "NULL"
        if self.physical is None:
            return
        self.text = nv.text_sql(set(db.columns(self.physical)), strings_table)
        # min and max of the rowid are single b-tree seeks each (together they would be a scan)
        first = db.query(f'SELECT min(rowid) FROM "{self.physical}"')[0][0]
        last = db.query(f'SELECT max(rowid) FROM "{self.physical}"')[0][0]
        if first is None:
            return
        span = int(last) - int(first) + 1
        size = span
        if span <= 0 or (span > NVTX_DENSE_SPAN and 2 * (count := db.rows(self.physical)) < span):
            if span <= 0:  # min and max disagree: a damaged b-tree; count what a scan finds
                count = int(db.query(f'SELECT count(*) FROM "{self.physical}"')[0][0])
            # row ids far apart (never in an nsys export: a damaged or rebuilt table): slices of
            # NVTX_SLICE_ROWS rows each, cut at the row ids that start them
            ids = np.sort(db.arrow(f'SELECT rowid AS row FROM "{self.physical}"', max(count, 1),
                                   f", table {self.physical}").column("row").to_numpy())
            size = len(ids)
            starts = ids[::NVTX_SLICE_ROWS]
            ends = np.r_[ids[NVTX_SLICE_ROWS::NVTX_SLICE_ROWS], ids[-1] + 1] if len(ids) else starts
            self.slices = [(int(lo), int(hi), k * NVTX_SLICE_ROWS) for k, (lo, hi) in enumerate(zip(starts, ends,
                                                                                                 strict=True))]
        else:
            count = -(-span // NVTX_SLICE_ROWS)
            if span >= 100_000:  # big enough to be worth reading on every thread
                count = max(count, READ_THREADS)
            bounds = np.linspace(int(first), int(first) + span, count + 1).astype(np.int64)
            self.slices = [(int(lo), int(hi), int(lo) - int(first))
                           for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
        # Every row is read: a WHERE on the event type costs SQLite more than reading the few
        # rows that are not ranges, which numpy drops.
        self.sql = _table_sql(db, schema.NVTX, self.physical, extra=f"{nv.cut_sql(self.text)} AS text")
        # event types and end threads are only looked at here; the frame keeps what they say
        self.out = {c.name: np.empty(size, dtype=c.dtype) for c in schema.NVTX.columns
                    if c.name not in ("event_type", "end_global_tid")}
        self.out["crosses_thread"] = np.empty(size, dtype=bool)
        self.out["pushpop"] = np.empty(size, dtype=bool)  # read by validate.nested_ranges, then dropped
        self.out["row"] = np.empty(size, dtype=np.int32 if int(last) < np.iinfo(np.int32).max else np.int64)
        self.codes = np.empty(size, dtype=np.int32)
        self.seq = np.empty(size, dtype=np.int32)
        self.keep = np.zeros(size, dtype=bool)  # rows that are usable ranges (not gaps, domain rows, damage)

    def read_slice(self, lo: int, hi: int, offset: int) -> tuple[int, int, nv.Names, dict[int, str]]:
        """Read rows with lo <= rowid < hi into the columns from `offset` on.

        Returns (offset, rows, the slice's names, NVTX domains created in the slice).
        """
        where = f"rowid >= {lo} AND rowid < {hi}"
        own = _process_filter(self.db, self.physical, self.process)  # type: ignore[arg-type]
        where += f" AND {own}" if own else ""
        arrow = self.db.arrow(f"{self.sql} WHERE {where}", hi - lo, f", table {self.physical}")
        n = arrow.num_rows
        if offset + n > len(self.keep) or (n > hi - lo):  # row ids that are not unique: a damaged b-tree
            raise InputError(DAMAGED.format(path=shown(self.db.path), what=f", table {self.physical}",
                                            exc="row ids out of order", again=self.db.again))
        here = slice(offset, offset + n)
        dropped = _Dropped(self.physical or "", self.flaws)
        kind = schema.NVTX.column("event_type")
        event_type = va.integers(arrow.column(kind.name), kind.dtype, kind.default)
        dropped.add(event_type, kind)  # a row of unknown kind may have been a range
        is_range = np.isin(event_type.values, schema.NVTX_RANGE_TYPES) & (dropped.rows is None or ~dropped.rows)
        self.out["pushpop"][here] = np.isin(event_type.values, (schema.NVTX_PUSHPOP, schema.NVTXT_PUSHPOP))
        ends_open = None
        for column in schema.NVTX.columns:
            if column.name == "event_type":
                continue
            converted = va.integers(arrow.column(column.name), column.dtype, column.default,
                                    whole=column.name in va.TIMES)
            dropped.add(converted, column, among=is_range)  # marks and domain rows are not used
            if column.name == "end":
                ends_open = converted.null
            if column.name in self.out:
                self.out[column.name][here] = converted.values
            else:  # end_global_tid, 0: no end thread
                tid = self.out["global_tid"][here]
                self.out["crosses_thread"][here] = (converted.values != 0) & (converted.values != tid)
        keep = is_range if dropped.rows is None else is_range & ~dropped.rows
        # times that cannot be (the session bound is checked on the whole frame: validate.py)
        start, end = self.out["start"][here], self.out["end"][here]
        checks = va.time_checks(start, end, ends_open, va.MAX_TIME)
        bad = self.flaws.drop_rows(self.physical or "", {c: checks[c] & keep for c in ("negative", "reversed")})
        self.keep[here] = keep if bad is None else keep & ~bad
        # Row ids are dense in nsys exports: the slice's rows are lo, lo + 1, ... unless it has holes.
        rows = self.out["row"][here]
        if n == hi - lo:
            rows[:] = np.arange(lo, hi)
        else:
            rows[:] = self.db.arrow(f'SELECT rowid AS row FROM "{self.physical}" WHERE {where}', hi - lo,
                                    f", table {self.physical}").column("row")
        names = nv.split_names(arrow.column("text"))
        self.codes[here] = names.codes
        self.seq[here] = names.seq
        is_domain = (event_type.values == schema.NVTX_DOMAIN_CREATE)
        if event_type.bad is not None:
            is_domain &= ~event_type.bad
        domains = {}
        if is_domain.any():  # a few rows: one per domain
            at = np.flatnonzero(is_domain)
            texts = va.texts(arrow.column("text").take(pa.array(at))).to_pylist()
            domain_ids = self.out["domain_id"][offset + at]
            domains = {int(d): t or "" for d, t in zip(domain_ids, texts, strict=True)}
        return offset, n, names, domains

    def finish(self, results: list[tuple[int, int, nv.Names, dict[int, str]]],
               base: int) -> tuple[pd.DataFrame, pa.Array, np.ndarray, dict[int, str]]:
        """The NVTX frame (``text_id`` = `base` + name code), the distinct names, their emit flags
        and the domain names."""
        domains = {0: ""}
        if not self.slices:
            frame = empty_frame(schema.NVTX).drop(columns=["event_type", "end_global_tid"])
            return (frame.assign(crosses_thread=np.empty(0, bool), pushpop=np.empty(0, bool),
                                 row=np.empty(0, np.int64), text_id=np.empty(0, np.int32), seq=np.empty(0, np.int32)),
                    pa.array([], pa.string()), np.empty(0, bool), domains)
        merged = pc.dictionary_encode(pa.concat_arrays([names.names for _, _, names, _ in results]))
        distinct = merged.dictionary
        global_codes = merged.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        emit = np.zeros(len(distinct), dtype=bool)
        id_type = np.int32 if base + len(distinct) < np.iinfo(np.int32).max else np.int64
        text_id = self.codes if id_type is np.int32 else self.codes.astype(np.int64)
        at = 0
        for offset, n, names, created in results:  # slices, not events
            codes = global_codes[at:at + len(names.names)]
            emit[codes[names.emit]] = True
            remap = np.append(codes + base, NO_ID).astype(id_type)
            local = text_id[offset:offset + n]
            text_id[offset:offset + n] = remap[np.where(local >= 0, local, len(names.names))]
            at += len(names.names)
            domains.update(created)
        columns = _compact({**self.out, "text_id": text_id, "seq": self.seq}, self.keep)
        self.out = {}
        return pd.DataFrame(columns, copy=False), distinct, emit, domains


# Rows to drop (domain rows, row-id gaps) up to which the NVTX columns are compacted in place by
# block moves; beyond it, by one boolean selection per column. The block moves are a Python loop over
# the runs between dropped rows (not over events), so its cost grows with their count while the
# selection's does not; benchmarks/bench_compact.py measures where the two meet. Up to here the loop
# is as fast as the selection or faster, and it copies no column.
FEW_GAPS = 10_000


def _compact(columns: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of `columns` where `keep`, without a second copy of the table when few rows go."""
    drop = np.flatnonzero(~keep)
    if len(drop) == 0:
        return columns
    if len(drop) > FEW_GAPS:  # one column at a time: the transient copy is one column
        return {name: values[keep] for name, values in columns.items()}
    # runs of kept rows, moved down over the dropped ones (a few block moves per column)
    starts = np.r_[0, drop + 1]
    ends = np.r_[drop, len(keep)]
    runs = [(int(a), int(b)) for a, b in zip(starts, ends, strict=True) if b > a]
    total = sum(b - a for a, b in runs)
    for values in columns.values():
        at = 0
        for a, b in runs:  # runs between dropped rows, not events
            if at != a:
                values[at:at + b - a] = values[a:b]
            at += b - a
    return {name: values[:total] for name, values in columns.items()}


def _string_ids(db: Database, strings_table: str, flaws: va.Flaws) -> tuple[np.ndarray, pa.Array]:
    """Ids (sorted, distinct) and texts of the export's strings; rows whose id is unusable are dropped."""
    missing = [c for c in ("id", "value") if c not in db.columns(strings_table)]
    if missing:
        raise InputError(f"{shown(db.path)}: table {strings_table} lacks column(s) {', '.join(missing)}, which "
                         f"every kernel, "
                         "API call and NVTX name comes from; export the nsys report again")
    arrow = db.arrow(f'SELECT "id", "value" FROM "{strings_table}" ORDER BY "id"', db.rows(strings_table),
                     f", table {strings_table}")
    converted = va.integers(arrow.column("id"), "int64", None)
    ids, values = converted.values, bounded_names(va.texts(arrow.column("value")))
    dropped = _Dropped(strings_table, flaws)
    dropped.add(converted, Column("id", "id", "int64"))
    if dropped.rows is not None:
        ids, values = ids[~dropped.rows], values.filter(pa.array(~dropped.rows))
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # text ids sort apart in SQL, or ids repeat
        order = np.argsort(ids, kind="stable")
        ids, values = ids[order], values.take(pa.array(order))
        repeated = np.r_[False, ids[1:] == ids[:-1]]
        if repeated.any():
            flaws.add("duplicate", strings_table, int(repeated.sum()), "id")
            ids, values = ids[~repeated], values.filter(pa.array(~repeated))
    return ids, values


def bounded_names(values: pa.Array, bound: int = NAME_BOUND) -> pa.Array:
    """`values` with each text over `bound` bytes cut to its first `bound` characters (at most) and a marker of what
    was cut, ``…[+N bytes]``: a kernel or NVTX name is repeated in every report row, page and event file that
    names it, so a name of a megabyte made gigabytes of output. Arrow compute, no Python per row."""
    lengths = pc.binary_length(values)
    long = pc.greater(lengths, bound)
    if not pc.any(long).as_py():
        return values
    cut = pc.utf8_slice_codeunits(values, 0, bound)
    over = pc.greater(pc.binary_length(cut), bound)  # multi-byte characters: a quarter as many (4 bytes at most)
    if pc.any(over).as_py():
        cut = pc.if_else(over, pc.utf8_slice_codeunits(cut, 0, max(1, bound // 4)), cut)
    rest = pc.subtract(lengths, pc.binary_length(cut))
    marker = pc.binary_join_element_wise("…[+", pc.cast(rest, pa.string()), " bytes]", "")
    shortened = pc.binary_join_element_wise(cut, marker, "")
    return pc.if_else(long, shortened, values)


def _strings_table(db: Database) -> str:
    """The export's string table; an `InputError` when `db` has none, or no event table: not an nsys export."""
    known = [t for t in schema.EVENT_TABLES if db.find(t.sources)]
    strings_table = db.find(schema.STRING_TABLES)
    if strings_table is None or not known:
        raise InputError(f"{shown(db.path)}: is an SQLite database but not an nsys export (no StringIds or "
                         f"event tables) "
                         "nor an nvprof database (no StringTable and kernel tables); pass the file made by "
                         "'nsys export --type sqlite' or 'nvprof -o'")
    return strings_table


def read_nsys(db: Database, process: int | None = None) -> Profile:
    """Read every table dlagg uses from the nsys export `db`, checked (validate.py): all of it, or one
    process's rows (`process`: its ``globalPid``, for files that hold several ranks). Closes `db`."""
    path = db.path
    flaws = va.Flaws(path.name)
    try:
        strings_table = _strings_table(db)
        nvtx = _NvtxRead(db, strings_table, flaws, process)
        others = [t for t in schema.EVENT_TABLES if t is not schema.NVTX]
        with ThreadPoolExecutor(db.threads) as pool:
            # NVTX slices first: they are most of the work, the small tables fill in behind them
            slices = [pool.submit(nvtx.read_slice, lo, hi, offset) for lo, hi, offset in nvtx.slices]
            tables = {t.name: pool.submit(_read_table, db, t, flaws, process) for t in others}
            string_ids = pool.submit(_string_ids, db, strings_table, flaws)
            meta_values = _key_values(db, schema.META_TABLES)
            env = {**_key_values(db, schema.SYSTEM_ENV_TABLES), **_system_info(db)}
            gpus = _gpus(db, flaws)
            stated = stated_session(db)
            whole_file = file_late_events(db, stated) if process is not None and stated is not None else None
            started = session_start(db)
            results = _results([*slices, *tables.values(), string_ids])[:len(slices)]
            frames = {name: job.result()[0] for name, job in tables.items()}
            read_from = {name: job.result()[1] for name, job in tables.items()}
            ids, values = string_ids.result()
        base = int(ids[-1]) + 1 if len(ids) else 0
        frames["nvtx"], names, emit, domains = nvtx.finish(results, base)
        read_from["nvtx"] = nvtx.physical
        strings = _strings(ids, values, bounded_names(names), base)
        found = {t.name: db.find(t.sources) for t in schema.EVENT_TABLES}
        frames = {table.name: frames[table.name] for table in schema.EVENT_TABLES}
        pairs = ((t.name, read_from[t.name]) for t in schema.EVENT_TABLES)
        physical = {name: table for name, table in pairs if table is not None}
    finally:
        db.close()

    frames, start, end = _checked_frames(frames, physical, stated, flaws, whole_file)
    has_gpu_work = any(len(frames[name]) for name in ("kernels", "memcpy", "memset"))
    if gpus.empty and len(frames["kernels"]):  # no GPU table (some exports): the devices kernels ran on
        gpus = _unknown_gpus(np.unique(frames["kernels"]["device_id"].to_numpy()))
    warnings = flaws.warnings() + va.missing_table_warnings(
        path.name, {name: table for name, table in found.items() if table is not None}, has_gpu_work)
    meta = ProfileMeta(
        source=path.name,
        nsys_version=meta_values.get("EXPORT_PRODUCT_VERSION", ""),
        tables=physical,
        system_env=env,
        domains=domains,
        start=start,
        end=end,
        session_start_utc=started,
        process=process,
        warnings=warnings,
    )
    details = nv.NvtxDetails(partial(Database, path.resolve()), nvtx.physical, nvtx.text, db.threads)
    nvtx_names = pd.DataFrame({"emit": emit}, index=pd.Index(base + np.arange(len(emit), dtype=np.int64), name="id"))
    return Profile(strings=strings, gpus=gpus, meta=meta, nvtx_names=nvtx_names, nvtx_details=details, **frames)


def _strings(ids: np.ndarray, values: pa.Array, names: pa.Array, base: int) -> StringTable:
    """The export's strings (`ids`, `values`) and the distinct NVTX names after them (ids from `base` on)."""
    return StringTable(pd.Series(
        pd.array(pa.chunked_array([values, names], type=pa.string()), dtype=TEXT),
        index=pd.Index(np.concatenate((ids, base + np.arange(len(names), dtype=np.int64))), copy=False)))


def _checked_frames(frames: dict[str, pd.DataFrame], physical: dict[str, str], stated: int | None,
                    flaws: va.Flaws, whole_file: tuple[int, int] | None = None) -> tuple[dict[str, pd.DataFrame],
                                                                                           int, int]:
    """The frames without rows whose times cannot be (`_checked`), NVTX ranges left open closed at the
    profile's end and push/pop ranges that do not nest left out (`validate.nested_ranges`); and the
    profile's (start, end). `whole_file`: see `_session_bound`."""
    session_end = _session_bound(frames, stated, flaws, whole_file)
    frames = {name: _checked(name, frame, physical.get(name, ""), session_end, flaws) for name, frame in frames.items()}
    start, end = time_range(frames)
    frames["nvtx"] = va.nested_ranges(frames["nvtx"], end, flaws, physical.get("nvtx", ""))
    return frames, start, end


def _unknown_gpus(devices: np.ndarray) -> pd.DataFrame:
    """The GPU table of an export without one: the devices, nothing known about them."""
    unknown = pd.array([pd.NA] * len(devices), dtype="Int64")
    return pd.DataFrame({"device_id": devices, "name": "", "cc_major": unknown, "cc_minor": unknown,
                         "total_memory": unknown, "sm_count": unknown})


SESSION_TABLE = "ANALYSIS_DETAILS"


def stated_session(db: Database) -> int | None:
    """The session's length the export states (events are timed from the session start), if sane."""
    if SESSION_TABLE not in db.tables or "duration" not in db.columns(SESSION_TABLE):
        return None
    value = db.query(f"SELECT max(duration) FROM {SESSION_TABLE} WHERE typeof(duration) = 'integer'")[0][0]
    return int(value) if isinstance(value, int) and 0 < value <= va.MAX_TIME else None


def file_late_events(db: Database, stated: int) -> tuple[int, int]:
    """(events, events ending after `stated`) over every event table of the whole file, by SQL: what
    `_session_bound` decides on when one process of several is read, so that every rank of a file,
    and the discovery of its ranks, trust the stated session length or not alike."""
    rows = late = 0
    for table in schema.EVENT_TABLES:
        physical = db.find(table.sources)
        if physical is None or not {"start", "end"} <= set(db.columns(physical)):
            continue
        ok = """typeof("start") = 'integer' AND (typeof("end") = 'integer' OR "end" IS NULL)"""
        n, m = db.query(f'SELECT count(*), total("start" > {stated} OR coalesce("end" > {stated}, 0)) '
                        f'FROM "{physical}" WHERE {ok}')[0]
        rows, late = rows + int(n or 0), late + int(m or 0)
    return rows, late


def trusted_session(stated: int | None, rows: int, late: int) -> int | None:
    """The stated session length, unless over UNTRUSTED_DURATION_SHARE of the events end after it."""
    if stated is None or (rows and late > va.UNTRUSTED_DURATION_SHARE * rows):
        return None
    return stated


def _session_bound(frames: dict[str, pd.DataFrame], stated: int | None, flaws: va.Flaws,
                   whole_file: tuple[int, int] | None = None) -> int:
    """The latest time an event may have: the stated session length, unless many events end after it
    (then the statement is what is damaged), else `validate.MAX_TIME`. The events counted are those
    read, or `whole_file`'s (events, late events) when only one process was read."""
    if stated is None:
        flaws.session_note = f"the export states no session length; times beyond {va.MAX_TIME:,} ns are taken as damage"
        return va.MAX_TIME
    if whole_file is not None:
        rows, late = whole_file
    else:
        rows = sum(len(f) for f in frames.values())
        late = sum(int(np.count_nonzero((f["start"].to_numpy() > stated) | (f["end"].to_numpy() > stated)))
                   for f in frames.values())
    if trusted_session(stated, rows, late) is None:
        flaws.session_note = (f"{SESSION_TABLE} states a session of {stated:,} ns but {late:,} of {rows:,} events "
                              f"end after it; the statement is ignored and times beyond {va.MAX_TIME:,} ns are damage")
        return va.MAX_TIME
    flaws.session_note = f"the session lasted {stated:,} ns ({SESSION_TABLE})"
    return stated


# Columns that make two rows of a frame the same event (NVTX: the row id aside).
_NVTX_IDENTITY = ("start", "end", "global_tid", "domain_id", "text_id", "seq", "crosses_thread")


def _checked(name: str, frame: pd.DataFrame, physical: str, session_end: int, flaws: va.Flaws) -> pd.DataFrame:
    """`frame` without rows whose times cannot be (validate.time_checks) or that copy another row.

    NVTX ranges were checked for negative and reversed times slice by slice; here only the session
    bound: a range starting after it is dropped, one ending after it is opened (ends with the profile).
    """
    if len(frame) == 0:
        return frame
    start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
    if name == "nvtx":
        open_end = end < start  # unclosed ranges (NULL end) read as NO_ID
        checks = va.time_checks(start, end, open_end, session_end)
        drop = flaws.drop_rows(physical, {"late": checks["late"]})
        if checks["open"].any():
            flaws.add("open", physical, int(np.count_nonzero(checks["open"] & ~checks["late"])))
            frame = frame.assign(end=np.where(checks["open"], NO_ID, end).astype(end.dtype, copy=False))
        columns = [frame[c].to_numpy() for c in _NVTX_IDENTITY]
    else:
        drop = flaws.drop_rows(physical, va.time_checks(start, end, None, session_end))
        columns = [frame[c].to_numpy() for c in frame.columns]
    if drop is not None and not drop.any():  # every row passed: no copy of the columns, nor of the frame below
        drop = None
    if drop is not None:
        columns = [c[~drop] for c in columns]
    copies = va.duplicated(columns)
    if copies is not None:
        flaws.add("duplicate", physical, int(copies.sum()))
    if drop is None and copies is None:
        return frame
    keep = np.ones(len(frame), dtype=bool) if drop is None else ~drop
    if copies is not None:
        keep[np.flatnonzero(keep)[copies]] = False
    return frame[keep].reset_index(drop=True)


def session_start(db: Database) -> int | None:
    """Wall-clock time (ns since the Unix epoch) of the session's time 0, when the export says."""
    if "TARGET_INFO_SESSION_START_TIME" not in db.tables or "utcEpochNs" not in db.columns(
            "TARGET_INFO_SESSION_START_TIME"):
        return None
    rows = db.query('SELECT "utcEpochNs" FROM "TARGET_INFO_SESSION_START_TIME" LIMIT 1')
    return int(rows[0][0]) if rows and isinstance(rows[0][0], int) else None


def _results(jobs: list) -> list:
    """Results of `jobs` in order; the first failure is raised once every job has stopped."""
    errors = [job.exception() for job in jobs]
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        raise failed
    return [job.result() for job in jobs]


__all__ = ["read_nsys", "bounded_names", "file_late_events", "session_start", "stated_session", "trusted_session"]
