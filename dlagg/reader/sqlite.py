"""Read an nsys SQLite export into a `Profile`, read-only, whatever the nsys version.

Contract: ``load_profile(path) -> Profile``. The file is opened ``mode=ro&immutable=1``: nothing is
written, no index or column is added (DLProf altered its input; dlagg never does). Event tables
are read through the Arrow-native ADBC SQLite driver (see docs/design.md, "Reader"), with the
standard ``sqlite3`` module as a fallback for the rare column whose values change type mid-table.

Memory is the budget that matters on big exports (peak under twice the file size): each query
arrives as one Arrow batch whose numeric columns become numpy arrays *without a copy*, NULLs are
filled on the Arrow side (``COALESCE`` in SQL made the driver half as fast), and NVTX text is cut
and dictionary-encoded slice by slice as it is read (``reader/nvtx.py``). Tables and NVTX slices
are read on worker threads, each with its own connection: SQLite, the driver and Arrow compute
release the GIL.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..model import Profile, ProfileMeta, StringTable
from . import nvtx as nv
from . import schema
from .schema import NO_ID, Column, Table

SQLITE_MAGIC = b"SQLite format 3\x00"
# Rows per Arrow batch asked of the ADBC driver: a whole result in one batch, so columns arrive
# contiguous and numeric ones become numpy arrays with no copy (the default of 1024-row batches
# costs a concatenation per column and fragments the heap). The driver's maximum is 2**31 - 2.
ONE_BATCH_ROWS = 2**30
# NVTX rows per slice: big enough that per-query costs vanish (a slice is a row-id range: SQLite
# seeks to it), small enough that the slices being parsed (about 16 MB of Arrow data each) stay a
# small share of the memory budget.
NVTX_SLICE_ROWS = 1 << 18
# Worker threads for the reads; more than the cores only adds memory.
READ_THREADS = max(1, min(4, os.cpu_count() or 1))
# Thread ids of one process: globalTid = globalPid + tid, tid < 2^24 (reference §2.3).
PROCESS_THREADS = 1 << 24
EXPORT_HINT = "export it first: nsys export --type sqlite --output run.sqlite {name}"
DAMAGED = "{path}: cannot read the database ({exc}); the file may be truncated: {again}"
AGAIN = "export the nsys report again"  # what to do about a damaged file (nvprof databases: record again)


def _uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro&immutable=1"


def check_input(path: Path) -> None:
    """Refuse anything that is not an SQLite file, with one line that says what to do."""
    if not path.exists():
        raise InputError(f"{path}: no such file; pass the SQLite export of an nsys report with --nsys_database")
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass the .sqlite file exported by nsys, not its folder")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    if not head:
        raise InputError(f"{path}: the file is empty; export the nsys report again")
    if head != SQLITE_MAGIC:
        if path.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
            raise InputError(f"{path}: is an Nsight Systems report, not its SQLite export; "
                             + EXPORT_HINT.format(name=path.name))
        raise InputError(f"{path}: is not an SQLite database; pass the file made by "
                         "'nsys export --type sqlite'")


class Database:
    """A read-only view of one export: which tables and columns exist, and typed reads.

    Metadata queries use one ``sqlite3`` connection; Arrow reads use one ADBC connection per
    thread, so several threads can read at once.
    """

    def __init__(self, path: Path) -> None:
        check_input(path)
        self.path = path
        self.again = AGAIN
        self._local = threading.local()
        self._adbc: list[object] = []
        try:
            self.conn = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
            # nsys stores some strings that are not valid UTF-8 (environment blocks): keep them.
            self.conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
            self.tables = {
                name: None
                for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{path}: the SQLite file is damaged or truncated ({exc}); "
                             "export the nsys report (or record the nvprof database) again") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close every connection (a second call does nothing)."""
        self.conn.close()
        while self._adbc:
            self._adbc.pop().close()  # type: ignore[attr-defined]

    def find(self, candidates: Iterable[str]) -> str | None:
        return next((name for name in candidates if name in self.tables), None)

    def columns(self, table: str) -> list[str]:
        with self._lock:
            if self.tables.get(table) is None:
                self.tables[table] = [row[1] for row in self.conn.execute(f'PRAGMA table_info("{table}")')]
            return self.tables[table]  # type: ignore[return-value]

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            with self._lock:
                return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(DAMAGED.format(path=self.path, exc=exc, again=self.again)) from None

    def _adbc_table(self, sql: str, batch_rows: int | None) -> pa.Table:
        conn = getattr(self._local, "adbc", None)
        if conn is None:
            import adbc_driver_sqlite.dbapi as adbc

            conn = self._local.adbc = adbc.connect(_uri(self.path))
            self._adbc.append(conn)
        cursor = conn.cursor()
        try:
            if batch_rows is not None:
                from adbc_driver_sqlite import StatementOptions

                cursor.adbc_statement.set_options(**{StatementOptions.BATCH_ROWS.value: str(batch_rows)})
            cursor.execute(sql)
            return cursor.fetch_arrow_table()
        finally:
            cursor.close()

    def arrow(self, sql: str) -> pa.Table:
        """Run `sql` and return an Arrow table (ADBC; sqlite3 fallback on type surprises).

        One batch first; default batches when one does not fit (a string column over 2 GiB).
        """
        for batch_rows in (ONE_BATCH_ROWS, None):
            try:
                return self._adbc_table(sql, batch_rows)
            except Exception:  # noqa: BLE001, S112 - any driver failure: try the next, slower path
                continue
        conn = sqlite3.connect(_uri(self.path), uri=True)  # this thread's own: the fallback is rare
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            cursor = conn.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(DAMAGED.format(path=self.path, exc=exc, again=self.again)) from None
        finally:
            conn.close()
        return pa.table({n: pa.array([r[i] for r in rows]) for i, n in enumerate(names)})

    def select(self, table: Table, physical: str, *, extra: str = "", where: str = "") -> str:
        """SQL reading `table`'s declared columns from `physical`, plus `extra`; checks required columns."""
        present = set(self.columns(physical)) | {"rowid"}
        missing = [c.source for c in table.required if c.source not in present]
        if missing:
            raise InputError(f"{self.path}: table {physical} lacks column(s) {', '.join(missing)}; "
                             "this does not look like an nsys export")
        select = [_select(column, present) for column in table.columns]
        if extra:
            select.append(extra)
        return f'SELECT {", ".join(select)} FROM "{physical}"' + (f" WHERE {where}" if where else "")

    def process_filter(self, physical: str, process: int | None) -> str:
        """SQL condition keeping one process's rows of `physical` ('' for all processes).

        GPU tables carry the process (``globalPid``); CPU-side tables the thread, whose process part
        is the same number in the high bits: a process's threads are the ids [globalPid, globalPid +
        2^24). A table without either column cannot be split and is read whole.
        """
        if process is None:
            return ""
        present = set(self.columns(physical))
        if "globalPid" in present:
            return f'"globalPid" = {int(process)}'
        if "globalTid" in present:
            return f'"globalTid" >= {int(process)} AND "globalTid" < {int(process) + PROCESS_THREADS}'
        return ""

    def read(self, table: Table, process: int | None = None) -> tuple[pd.DataFrame, str | None]:
        """Read `table` with its declared dlagg columns and dtypes (empty frame if absent)."""
        physical = self.find(table.sources)
        if physical is None:
            return empty_frame(table), None
        arrow = self.arrow(self.select(table, physical, where=self.process_filter(physical, process)))
        return frame_of(arrow, table.columns), physical


def frame_of(arrow: pa.Table, columns: Iterable[Column]) -> pd.DataFrame:
    """The declared columns of `arrow` as a frame of numpy arrays (views of the Arrow buffers)."""
    return pd.DataFrame({c.name: _as_numpy(arrow.column(c.name), c) for c in columns},
                        copy=False)  # the arrays are views of the Arrow batch: keep them, do not consolidate


def _select(column: Column, present: set[str]) -> str:
    """The column as is (NULLs are filled on the Arrow side), or its default when the export lacks it."""
    if column.source not in present:
        return f"{column.default} AS {column.name}"
    return f'"{column.source}" AS {column.name}'


def _as_numpy(array: pa.ChunkedArray, column: Column) -> np.ndarray:
    """The column as numpy: a view of the Arrow buffer when it is one chunk of the right type."""
    if array.null_count:
        array = pc.fill_null(array, column.default if column.default is not None else 0)
    if pa.types.is_null(array.type):
        return np.full(len(array), column.default or 0, dtype=column.dtype)
    return array.to_numpy().astype(column.dtype, copy=False)


def empty_frame(table: Table) -> pd.DataFrame:
    return pd.DataFrame({c.name: np.empty(0, dtype=c.dtype) for c in table.columns})


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
    return {f"SystemInfo:{k}": str(v) for k, v in rows if v is not None and str(v) != ""}


_GPU_COLUMNS = {  # dlagg column -> candidate nsys columns, across TARGET_INFO_GPU / _CUDA_GPU versions
    "device_id": ("cuDevice", "id", "deviceId"),
    "name": ("name",),
    "cc_major": ("computeMajor", "computeCapabilityMajor"),
    "cc_minor": ("computeMinor", "computeCapabilityMinor"),
    "total_memory": ("totalMemory", "globalMemorySize"),
    "sm_count": ("smCount", "numMultiprocessors"),
}


def _gpus(db: Database) -> pd.DataFrame:
    """One row per GPU, from whichever GPU table answers most of the columns."""
    best: tuple[int, pd.DataFrame] | None = None
    for physical in schema.GPU_TABLES:
        if physical not in db.tables:
            continue
        present = db.columns(physical)
        picks = {key: next((c for c in cands if c in present), None) for key, cands in _GPU_COLUMNS.items()}
        if picks["name"] is None or picks["device_id"] is None:
            continue
        select = ", ".join(f'"{col}" AS {key}' if col else f"NULL AS {key}" for key, col in picks.items())
        frame = pd.DataFrame(db.query(f'SELECT {select} FROM "{physical}"'), columns=list(_GPU_COLUMNS))
        score = sum(col is not None for col in picks.values())
        if len(frame) and (best is None or score > best[0]):
            best = (score, frame)
    if best is None:
        return pd.DataFrame(columns=list(_GPU_COLUMNS))
    gpus = best[1].drop_duplicates("device_id", keep="first")
    return gpus.sort_values("device_id", kind="stable").reset_index(drop=True)


class _NvtxRead:
    """NVTX ranges read in row-id slices into preallocated columns (see reader/nvtx.py).

    Slices are read and parsed on worker threads; ``finish`` unifies their name dictionaries and
    drops the row ids that held no range (marks, domain rows, gaps).
    """

    def __init__(self, db: Database, strings_table: str, process: int | None = None) -> None:
        self.db = db
        self.physical = db.find(schema.NVTX.sources)
        self.process = process
        self.slices: list[tuple[int, int]] = []
        self.text = "NULL"
        if self.physical is None:
            return
        self.text = nv.text_sql(set(db.columns(self.physical)), strings_table)
        # min and max of the rowid are single b-tree seeks each (together they would be a scan)
        first = db.query(f'SELECT min(rowid) FROM "{self.physical}"')[0][0]
        last = db.query(f'SELECT max(rowid) FROM "{self.physical}"')[0][0]
        if first is None:
            return
        self.first, span = int(first), int(last) - int(first) + 1  # type: ignore[arg-type]
        count = -(-span // NVTX_SLICE_ROWS)
        if span >= 100_000:  # big enough to be worth reading on every thread
            count = max(count, READ_THREADS)
        bounds = np.linspace(self.first, self.first + span, count + 1).astype(np.int64)
        self.slices = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
        # Every row is read: a WHERE on the event type costs SQLite more than reading the few
        # rows that are not ranges, which numpy drops.
        self.sql = db.select(schema.NVTX, self.physical, extra=f"{nv.cut_sql(self.text)} AS text")
        # event types and end threads are only looked at here; the frame keeps what they say
        self.out = {c.name: np.empty(span, dtype=c.dtype) for c in schema.NVTX.columns
                    if c.name not in ("event_type", "end_global_tid")}
        self.out["crosses_thread"] = np.empty(span, dtype=bool)
        self.out["row"] = np.empty(span, dtype=np.int32 if int(last) < np.iinfo(np.int32).max else np.int64)
        self.codes = np.empty(span, dtype=np.int32)
        self.seq = np.empty(span, dtype=np.int32)
        self.keep = np.zeros(span, dtype=bool)  # rows that are ranges (not gaps, not domain rows)

    def read_slice(self, lo: int, hi: int) -> tuple[int, int, nv.Names, dict[int, str]]:
        """Read rows with lo <= rowid < hi into the columns.

        Returns (offset, rows, the slice's names, NVTX domains created in the slice).
        """
        where = f"rowid >= {lo} AND rowid < {hi}"
        own = self.db.process_filter(self.physical, self.process)  # type: ignore[arg-type]
        where += f" AND {own}" if own else ""
        arrow = self.db.arrow(f"{self.sql} WHERE {where}")
        offset, n = lo - self.first, arrow.num_rows
        for column in schema.NVTX.columns:
            if column.name in self.out:
                self.out[column.name][offset:offset + n] = _as_numpy(arrow.column(column.name), column)
        end_tid = _as_numpy(arrow.column("end_global_tid"), schema.NVTX.column("end_global_tid"))  # 0: no end thread
        tid = self.out["global_tid"][offset:offset + n]
        self.out["crosses_thread"][offset:offset + n] = (end_tid != 0) & (end_tid != tid)
        # Row ids are dense in nsys exports: the slice's rows are lo, lo + 1, ... unless it has holes.
        rows = self.out["row"][offset:offset + n]
        if n == hi - lo:
            rows[:] = np.arange(lo, hi)
        else:
            rows[:] = self.db.arrow(f'SELECT rowid AS row FROM "{self.physical}" WHERE {where}').column("row")
        names = nv.split_names(arrow.column("text"))
        self.codes[offset:offset + n] = names.codes
        self.seq[offset:offset + n] = names.seq
        event_type = _as_numpy(arrow.column("event_type"), schema.NVTX.column("event_type"))
        is_domain = event_type == schema.NVTX_DOMAIN_CREATE
        self.keep[offset:offset + n] = np.isin(event_type, schema.NVTX_RANGE_TYPES)
        domains = {}
        if is_domain.any():  # a few rows: one per domain
            rows = np.flatnonzero(is_domain)
            texts = nv.valid_utf8(arrow.column("text").take(pa.array(rows))).to_pylist()
            domain_ids = self.out["domain_id"][offset + rows]
            domains = {int(d): t or "" for d, t in zip(domain_ids, texts, strict=True)}
        return offset, n, names, domains

    def finish(self, results: list[tuple[int, int, nv.Names, dict[int, str]]],
               base: int) -> tuple[pd.DataFrame, pa.Array, np.ndarray, dict[int, str]]:
        """The NVTX frame (``text_id`` = `base` + name code), the distinct names, their emit flags
        and the domain names."""
        domains = {0: ""}
        if not self.slices:
            frame = empty_frame(schema.NVTX).drop(columns=["event_type", "end_global_tid"])
            return (frame.assign(crosses_thread=np.empty(0, bool), row=np.empty(0, np.int64),
                                 text_id=np.empty(0, np.int32), seq=np.empty(0, np.int32)),
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
# block moves; beyond it, by one boolean selection per column.
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


def _string_ids(db: Database, strings_table: str) -> tuple[np.ndarray, pa.Array]:
    arrow = db.arrow(f'SELECT "id", "value" FROM "{strings_table}" ORDER BY "id"')
    ids = arrow.column("id")
    ids = ids.to_numpy().astype(np.int64, copy=False) if len(ids) else np.empty(0, np.int64)
    values = nv.valid_utf8(arrow.column("value"))
    if len(values) == 0:  # an empty result has no declared type in Arrow (the driver says int64)
        values = pa.array([], type=pa.string())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return ids, values


def read_nsys(db: Database, process: int | None = None) -> Profile:
    """Read every table dlagg uses from the nsys export `db`: all of it, or one process's rows (`process`:
    its ``globalPid``, for files that hold several ranks). Closes `db`."""
    path = db.path
    try:
        known = [t for t in schema.EVENT_TABLES if db.find(t.sources)]
        strings_table = db.find(schema.STRING_TABLES)
        if strings_table is None or not known:
            raise InputError(f"{path}: is an SQLite database but not an nsys export (no StringIds or event tables) "
                             "nor an nvprof database (no StringTable and kernel tables); pass the file made by "
                             "'nsys export --type sqlite' or 'nvprof -o'")
        nvtx = _NvtxRead(db, strings_table, process)
        others = [t for t in schema.EVENT_TABLES if t is not schema.NVTX]
        with ThreadPoolExecutor(READ_THREADS) as pool:
            # NVTX slices first: they are most of the work, the small tables fill in behind them
            slices = [pool.submit(nvtx.read_slice, lo, hi) for lo, hi in nvtx.slices]
            tables = {t.name: pool.submit(db.read, t, process) for t in others}
            string_ids = pool.submit(_string_ids, db, strings_table)
            meta_values = _key_values(db, schema.META_TABLES)
            env = {**_key_values(db, schema.SYSTEM_ENV_TABLES), **_system_info(db)}
            gpus = _gpus(db)
            session_start = _session_start(db)
            results = _results(slices)
            frames = {name: job.result()[0] for name, job in tables.items()}
            physical = {name: job.result()[1] for name, job in tables.items()}
            ids, values = string_ids.result()
        base = int(ids[-1]) + 1 if len(ids) else 0
        frames["nvtx"], names, emit, domains = nvtx.finish(results, base)
        physical["nvtx"] = nvtx.physical
        strings = StringTable(pd.Series(
            pd.array(pa.chunked_array([values, names], type=pa.string()), dtype="str"),
            index=pd.Index(np.concatenate((ids, base + np.arange(len(names), dtype=np.int64))), copy=False)))
        frames = {table.name: frames[table.name] for table in schema.EVENT_TABLES}
        physical = {t.name: physical[t.name] for t in schema.EVENT_TABLES if physical[t.name] is not None}
    finally:
        db.close()

    start, end = _time_range(frames)
    frames["nvtx"] = _close_nvtx(frames["nvtx"], end)
    if gpus.empty and len(frames["kernels"]):  # no GPU table (some exports): the devices kernels ran on
        devices = np.unique(frames["kernels"]["device_id"].to_numpy())
        gpus = pd.DataFrame({"device_id": devices, "name": "", "cc_major": np.nan, "cc_minor": np.nan,
                             "total_memory": np.nan, "sm_count": np.nan})
    meta = ProfileMeta(
        source=path.name,
        nsys_version=meta_values.get("EXPORT_PRODUCT_VERSION", ""),
        schema_version=meta_values.get("EXPORT_SCHEMA_VERSION", ""),
        tables=physical,
        system_env=env,
        domains=domains,
        start=start,
        end=end,
        session_start_utc=session_start,
        process=process,
    )
    details = nv.NvtxDetails(partial(Database, path.resolve()), nvtx.physical, nvtx.text, READ_THREADS)
    nvtx_names = pd.DataFrame({"emit": emit}, index=pd.Index(base + np.arange(len(emit), dtype=np.int64), name="id"))
    return Profile(strings=strings, gpus=gpus, meta=meta, nvtx_names=nvtx_names, nvtx_details=details, **frames)


def _session_start(db: Database) -> int | None:
    """Wall-clock time (ns since the Unix epoch) of the session's time 0, when the export says."""
    if "TARGET_INFO_SESSION_START_TIME" not in db.tables or "utcEpochNs" not in db.columns(
            "TARGET_INFO_SESSION_START_TIME"):
        return None
    rows = db.query('SELECT "utcEpochNs" FROM "TARGET_INFO_SESSION_START_TIME" LIMIT 1')
    return int(rows[0][0]) if rows and isinstance(rows[0][0], int) else None


def _results(jobs: list) -> list:  # type: ignore[type-arg]
    """Results of `jobs` in order; the first failure is raised once every job has stopped."""
    errors = [job.exception() for job in jobs]
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        raise failed
    return [job.result() for job in jobs]


def _close_nvtx(nvtx: pd.DataFrame, profile_end: int) -> pd.DataFrame:
    """Ranges left open (NULL end) end with the profile."""
    end = nvtx["end"].to_numpy()
    open_range = end < nvtx["start"].to_numpy()
    if not open_range.any():
        return nvtx
    return nvtx.assign(end=np.where(open_range, profile_end, end))


def _time_range(frames: dict[str, pd.DataFrame]) -> tuple[int, int]:
    starts = [f["start"].min() for f in frames.values() if len(f)]
    ends = [f["end"].max() for f in frames.values() if len(f)]  # NULL ends read as -1: harmless here
    if not starts:
        return 0, 0
    return int(min(starts)), int(max(max(ends), max(starts)))


__all__ = ["read_nsys", "Database", "check_input", "NO_ID"]
