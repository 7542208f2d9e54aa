"""Read an nvprof database (``nvprof -o run.sql`` / ``.nvvp``) into the same `Profile` as an nsys export.

Contract: ``is_nvprof(db)`` says whether an open SQLite file is an nvprof database (a
``StringTable`` with ``_id_`` ids and a ``CUPTI_ACTIVITY_KIND_KERNEL`` or ``..._CONCURRENT_KERNEL``
table with ``_id_`` rows); ``read_nvprof(db) -> Profile`` maps it onto the nsys reader's frames,
columns, dtypes and id encodings (``reader/schema.py``), so that nothing after the reader knows
which profiler wrote the file. Read-only like the nsys reader (the same ``Database``).

What is read, and how it becomes the nsys shape:

- kernels: both kernel tables (``nvprof --concurrent-kernels off`` writes the serial one). The
  name is a mangled ``StringTable`` string: ``name_id`` is its demangled text and
  ``short_name_id`` nsys's short form (``reader/demangle.py``).
- runtime and driver API calls (``CUPTI_ACTIVITY_KIND_RUNTIME`` / ``_DRIVER``) into one runtime
  frame, as nsys exports them; names from the CUPTI callback id (``reader/cupti.py``).
- memcpy (CUPTI's copy kinds equal nsys's; memory kinds are CUPTI's, one higher than nsys's
  ``ENUM_CUDA_MEM_KIND``, unknown = nsys's 7), memset, synchronisation (device from the
  context table), devices (``CUPTI_ACTIVITY_KIND_DEVICE``).
- NVTX from ``CUPTI_ACTIVITY_KIND_MARKER``: a start row (``flags`` 2) and an end row (``flags``
  4) share ``id``; instantaneous marks (``flags`` 1) are skipped like nsys marks; a start row
  without its end row stays open to the end of the profile, with a warning. Texts go through the
  nsys reader's emit_nvtx cut and ``name, seq = N`` split, so ranges carry ``text_id`` and ``seq``
  alike. ``row`` is the start row's ``_id_`` (``NvtxDetails`` reads input shapes by it).
- processes and threads: nvprof stores (processId, threadId) on API rows and in the markers'
  ``objectId`` blob (little-endian pid, tid). Threads become nsys-style ids ``pid << 24 | k``
  (k numbers the distinct threads; nvprof's thread ids are 32-bit handles that do not fit nsys's
  24 bits). GPU rows carry no process: they take the process of the API call with their
  ``correlationId`` (an nvprof file is one process; ``--profile-child-processes`` writes one file
  per process).
- times: nvprof's are absolute (ns since the epoch); they are shifted to start at the earliest
  record, as nsys times count from the session start.

Not read: metrics and events collected with ``--metrics`` / ``--events``
(``CUPTI_ACTIVITY_KIND_METRIC``/``_EVENT``: one value per kernel and counter; no report uses
per-kernel hardware counters), unified-memory, OpenACC, NVLink and PC-sampling tables, and the
``CUPTI_ACTIVITY_KIND_OVERHEAD`` rows of nvprof itself.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..model import TEXT, Profile, ProfileMeta, StringTable, factorize_ids
from . import nvtx as nv
from . import schema
from .cupti import DRIVER_NAMES, RUNTIME_NAMES, api_name
from .database import Database
from .demangle import demangle, short_name
from .frames import empty_frame, time_range
from .schema import NO_ID, Column
from .validate import integers
from .validate import texts as utf8_texts

KERNEL_TABLES = ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL")
RUNTIME_TABLE, DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"
MARKER_TABLE = "CUPTI_ACTIVITY_KIND_MARKER"
STRING_TABLE = "StringTable"
RECORD_AGAIN = "record it again with 'nvprof -o'"

# CUpti_ActivityFlag bits of marker rows (bit 1, an instantaneous marker, is no range and is not read)
MARKER_START, MARKER_END = 2, 4
# CUpti_ActivityObjectKind of a marker's objectId: 1 process, 2 thread (pid, tid); others name no thread
OBJECT_PROCESS, OBJECT_THREAD = 1, 2
# nsys's ENUM_CUDA_MEM_KIND has no "unknown" first: CUPTI kind k is nsys kind k - 1, CUPTI 0 is nsys 7
NSYS_MEM_KIND_UNKNOWN = 7

_TIME = (Column("start", "start", "int64"), Column("end", "end", "int64"))
_GPU = (*_TIME, Column("deviceId", "device_id", "int64", 0), Column("streamId", "stream_id", "int64", 0),
        Column("correlationId", "correlation_id", "int64", NO_ID))
KERNEL_COLUMNS = (*_GPU, Column("name", "name", "int64"),
                  *(Column(f"{k}{a}", f"{k.lower()}_{a.lower()}", "int64", 0) for k in ("grid", "block")
                    for a in "XYZ"))
API_COLUMNS = (Column("cbid", "cbid", "int64"), *_TIME, Column("processId", "pid", "int64", 0),
               Column("threadId", "tid", "int64", 0), Column("correlationId", "correlation_id", "int64", NO_ID))
MEMCPY_COLUMNS = (*_GPU, Column("bytes", "bytes", "int64", 0), Column("copyKind", "copy_kind", "int64", 0),
                  Column("srcKind", "src_kind", "int64", 0), Column("dstKind", "dst_kind", "int64", 0))
MEMSET_COLUMNS = (*_GPU, Column("bytes", "bytes", "int64", 0))
SYNC_COLUMNS = (*_TIME, Column("contextId", "context_id", "int64", NO_ID), Column("streamId", "stream_id", "int64", 0),
                Column("correlationId", "correlation_id", "int64", NO_ID), Column("type", "sync_type", "int64", NO_ID))
MARKER_COLUMNS = (Column("_id_", "row", "int64"), Column("flags", "flags", "int64"),
                  Column("timestamp", "time", "int64"), Column("id", "marker_id", "int64"),
                  Column("objectKind", "object_kind", "int64", OBJECT_THREAD), Column("name", "name", "int64", 0),
                  Column("domain", "domain", "int64", 0))


def is_nvprof(db: Database) -> bool:
    """An nvprof database: a StringTable and a kernel table, both keyed by ``_id_``."""
    if STRING_TABLE not in db.tables or "_id_" not in db.columns(STRING_TABLE):
        return False
    return any(t in db.tables and "_id_" in db.columns(t) for t in KERNEL_TABLES)


class _Reader:
    """One nvprof database's tables, read into plain frames (nvprof's own encodings still)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.warnings: list[str] = []

    def table(self, physical: str, columns: tuple[Column, ...]) -> pd.DataFrame | None:
        """`columns` of `physical` (None when the table is absent); a required column missing is an error.

        A marker table also gets the (pid, tid) of each row's ``objectId`` blob.
        """
        if physical not in self.db.tables:
            return None
        present = set(self.db.columns(physical))
        missing = [c.source for c in columns if c.default is None and c.source not in present]
        if missing:
            raise InputError(f"{self.db.path}: nvprof table {physical} lacks column(s) {', '.join(missing)}; "
                             f"the database is damaged or from an nvprof version dlagg does not know: {RECORD_AGAIN}")
        select = [f'"{c.source}" AS {c.name}' if c.source in present else f"{c.default} AS {c.name}" for c in columns]
        blob = physical == MARKER_TABLE and "objectId" in present
        if blob:
            select.append('"objectId" AS object_id')
        arrow = self.db.arrow(f'SELECT {", ".join(select)} FROM "{physical}"')
        frame = pd.DataFrame({c.name: _as_numpy(arrow.column(c.name), c) for c in columns})
        if physical == MARKER_TABLE:
            pid, tid = _object_threads(arrow.column("object_id")) if blob else (np.zeros(len(frame), np.int64),) * 2
            frame = frame.assign(pid=pid, tid=tid)
        return frame

    def tables(self, physicals: tuple[str, ...], columns: tuple[Column, ...]) -> tuple[pd.DataFrame, list[str]]:
        """`physicals` read and stacked, with ``source`` = index in `physicals` of each row's table (the
        empty typed frame when none exists), and the names of the tables read."""
        frames = [(k, name, self.table(name, columns)) for k, name in enumerate(physicals)]
        found = [(k, name, f) for k, name, f in frames if f is not None]
        if not found:
            return pd.DataFrame({c.name: np.empty(0, np.int64) for c in (*columns, Column("", "source", "int64"))}), []
        stacked = pd.concat([f.assign(source=k) for k, _, f in found], ignore_index=True)
        return stacked, [name for _, name, _ in found]

    def timed(self, frame: pd.DataFrame, what: str) -> pd.DataFrame:
        """Rows whose times CUPTI recorded (start > 0, end >= start); a warning counts the others."""
        start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
        good = (start > 0) & (end >= start)
        if good.all():
            return frame
        self.warnings.append(f"{self.db.path.name}: {int((~good).sum())} {what} record(s) without valid "
                             "timestamps were left out (nvprof stopped before CUPTI completed them)")
        return frame[good].reset_index(drop=True)


def _strings(db: Database) -> tuple[np.ndarray, pa.Array]:
    arrow = db.arrow(f'SELECT "_id_" AS id, "value" FROM "{STRING_TABLE}" ORDER BY "_id_"')
    ids = arrow.column("id")
    ids = ids.to_numpy().astype(np.int64, copy=False) if len(ids) else np.empty(0, np.int64)
    # one string array whatever the driver typed the column as (an empty result is typed int64)
    return ids, utf8_texts(arrow.column("value"))


def _lookup(ids: np.ndarray, values: pa.Array, wanted: np.ndarray) -> pa.Array:
    """`values` of the string ids `wanted` ('' for ids the table lacks)."""
    pos = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
    found = (ids[pos] == wanted) if len(ids) else np.zeros(len(wanted), dtype=bool)
    taken = values.take(pa.array(np.where(found, pos, 0))) if len(ids) else pa.nulls(len(wanted), pa.string())
    return pc.fill_null(pc.if_else(pa.array(found), taken, pa.scalar(None, pa.string())), "")


def _cut(texts: pa.Array) -> pa.Array:
    """The nsys reader's SQL cut (``nvtx.cut_sql``) in Arrow: up to and including ``, op_id = ``, else
    ``, sizes = ``, else the whole text."""
    at_op_id = pc.replace_substring_regex(texts, r"(?s)^(.*?, op_id = ).*$", r"\1")
    at_sizes = pc.replace_substring_regex(texts, r"(?s)^(.*?, sizes = ).*$", r"\1")
    return pc.if_else(pc.match_substring(texts, nv.CUT_MARKERS[0]), at_op_id, at_sizes)


def _object_threads(blobs: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) of CUPTI objectId blobs: two little-endian uint32 at their start (0 when shorter)."""
    array = blobs.combine_chunks() if isinstance(blobs, pa.ChunkedArray) else blobs
    n = len(array)
    if n == 0 or pa.types.is_null(array.type):
        return np.zeros(n, np.int64), np.zeros(n, np.int64)
    array = array.cast(pa.large_binary())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64, count=n + 1, offset=array.offset * 8)
    buffer = array.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if array.null_count:
        lengths = np.where(pc.is_valid(array).to_numpy(zero_copy_only=False), lengths, 0)
    width = int(lengths[0])
    if width >= 8 and (lengths == width).all():  # nvprof's 12-byte union: one reshape, no index array
        raw = data[offsets[0]:offsets[0] + n * width].reshape(n, width)[:, :8].copy()
    else:
        raw = np.zeros((n, 8), dtype=np.uint8)
        for k in range(8):  # bytes of the two words, not events
            ok = lengths > k
            raw[ok, k] = data[offsets[:-1][ok] + k]
        raw[lengths < 8] = 0
    words = raw.view("<u4").reshape(n, 2).astype(np.int64)
    return words[:, 0], words[:, 1]


class _Threads:
    """nsys-style global thread ids for nvprof's (pid, tid) pairs: ``pid << 24 | k``."""

    def __init__(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        keys = [(p << 32) | (t & 0xFFFFFFFF) for p, t in pairs]
        self.keys = factorize_ids(np.concatenate(keys))[0] if keys else np.empty(0, np.int64)
        if len(self.keys) >= 1 << 24:
            raise InputError("nvprof database: more than 16 million threads; this is not a profile dlagg can read")

    def global_tid(self, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        key = (pid << 32) | (tid & 0xFFFFFFFF)
        return (pid << 24) | (np.searchsorted(self.keys, key) + 1)


def _process_of(corr: np.ndarray, api: pd.DataFrame) -> np.ndarray:
    """nsys-style global pid of GPU rows: the process of the API call with the same correlation id,
    else the process with most API calls (0 without any)."""
    pids = api["pid"].to_numpy()
    if len(pids) == 0:
        return np.zeros(len(corr), dtype=np.int64)
    common = int(pd.Series(pids).value_counts().index[0])
    keys = api["correlation_id"].to_numpy()
    order = np.argsort(keys, kind="stable")
    keys, pids = keys[order], pids[order]
    pos = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
    return np.where(keys[pos] == corr, pids[pos], common) << 24


def _frame(table: schema.Table, values: dict[str, np.ndarray]) -> pd.DataFrame:
    """A frame with exactly `table`'s dlagg columns and dtypes."""
    return pd.DataFrame({c.name: np.asarray(values[c.name]).astype(c.dtype, copy=False) for c in table.columns})


@dataclass
class _Read:
    """The nvprof tables as read, before they become nsys-shaped frames (times still nvprof's)."""

    ids: np.ndarray  # StringTable ids
    values: pa.Array  # StringTable values
    kernels: pd.DataFrame
    api: pd.DataFrame
    frames: dict[str, pd.DataFrame]  # memcpy, memset, sync
    ranges: pd.DataFrame
    physical: dict[str, str]  # dlagg table -> the nvprof table(s) it was read from


def _read(db: Database, reader: _Reader) -> _Read:
    """Every table dlagg uses, read on the reader's threads."""
    with ThreadPoolExecutor(db.threads) as pool:
        strings_job = pool.submit(_strings, db)
        kernels_job = pool.submit(reader.tables, KERNEL_TABLES, KERNEL_COLUMNS)
        api_job = pool.submit(reader.tables, (RUNTIME_TABLE, DRIVER_TABLE), API_COLUMNS)
        jobs = {name: pool.submit(reader.table, physical, columns) for name, physical, columns in (
            ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLUMNS),
            ("memset", "CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_COLUMNS),
            ("sync", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", SYNC_COLUMNS),
            ("markers", MARKER_TABLE, MARKER_COLUMNS))}
        ids, values = strings_job.result()
        kernels, kernel_tables = kernels_job.result()
        api, api_tables = api_job.result()
        read = {name: job.result() for name, job in jobs.items()}
    physical = {"kernels": "+".join(kernel_tables), "runtime": "+".join(api_tables)}
    physical.update({name: table for name, table in (
        ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"), ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
        ("sync", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"), ("nvtx", MARKER_TABLE)) if table in db.tables})
    empty = {"memcpy": MEMCPY_COLUMNS, "memset": MEMSET_COLUMNS, "sync": SYNC_COLUMNS}
    frames = {name: read[name] if read[name] is not None else
              pd.DataFrame({c.name: np.empty(0, np.int64) for c in columns}) for name, columns in empty.items()}
    return _Read(ids, values, reader.timed(kernels, "kernel"), reader.timed(api, "CUDA API"),
                 {name: reader.timed(frame, name) for name, frame in frames.items()},
                 _ranges(reader, read["markers"]), {name: table for name, table in physical.items() if table})


def _from_session_start(read: _Read) -> None:
    """nvprof's clock is absolute; nsys's counts from the session: times start at the earliest record."""
    frames = (read.kernels, read.api, *read.frames.values(), read.ranges)
    firsts = [f["start"].min() for f in frames if len(f)]
    origin = int(min(firsts)) if firsts else 0
    for frame in frames:
        frame["start"] -= origin
        frame["end"] = np.where(frame["end"].to_numpy() >= 0, frame["end"].to_numpy() - origin, NO_ID)


def _event_frames(db: Database, read: _Read, strings: _Strings, threads: _Threads) -> dict[str, pd.DataFrame]:
    """The GPU and API frames as the nsys reader gives them (ids, processes and threads as nsys encodes them)."""
    kernels, api, frames = read.kernels, read.api, read.frames
    api_names = strings.api_names(api["source"].to_numpy(), api["cbid"].to_numpy())
    long_ids, short_ids = strings.kernel_names(kernels["name"].to_numpy())

    def pid_of(frame: pd.DataFrame) -> np.ndarray:
        return _process_of(frame["correlation_id"].to_numpy(), api)

    out = {
        "kernels": _frame(schema.KERNELS, {**kernels, "global_pid": pid_of(kernels), "name_id": long_ids,
                                           "short_name_id": short_ids, "mangled_name_id": kernels["name"]}),
        "runtime": _frame(schema.RUNTIME, {**api, "global_tid": threads.global_tid(api["pid"].to_numpy(),
                                                                                   api["tid"].to_numpy()),
                                           "name_id": api_names}),
        "memcpy": _frame(schema.MEMCPY, {**frames["memcpy"], "global_pid": pid_of(frames["memcpy"]),
                                         "src_kind": _nsys_mem_kind(frames["memcpy"]["src_kind"].to_numpy()),
                                         "dst_kind": _nsys_mem_kind(frames["memcpy"]["dst_kind"].to_numpy())}),
        "memset": _frame(schema.MEMSET, {**frames["memset"], "global_pid": pid_of(frames["memset"])}),
        "sync": _frame(schema.SYNC, {**frames["sync"], "global_pid": pid_of(frames["sync"]),
                                     "device_id": _devices_of(frames["sync"]["context_id"].to_numpy(),
                                                              _context_devices(db))}),
        "osrt": empty_frame(schema.OSRT),
    }
    return {name: frame.sort_values("start", kind="stable").reset_index(drop=True) for name, frame in out.items()}


def read_nvprof(db: Database) -> Profile:
    """Every table dlagg uses, from the nvprof database `db`, as a `Profile` (see the module docstring)."""
    db.again = RECORD_AGAIN
    reader = _Reader(db)
    read = _read(db, reader)
    _from_session_start(read)
    ranges = read.ranges
    threads = _Threads([(read.api["pid"].to_numpy(), read.api["tid"].to_numpy()),
                        (ranges["pid"].to_numpy(), ranges["tid"].to_numpy()),
                        (ranges["end_pid"].to_numpy(), ranges["end_tid"].to_numpy())])
    strings = _Strings(read.ids, read.values)
    texts = strings.nvtx_names(ranges["name"].to_numpy())
    out = _event_frames(db, read, strings, threads)
    nvtx = pd.DataFrame({
        "start": ranges["start"].to_numpy(),
        "end": ranges["end"].to_numpy(),
        "global_tid": threads.global_tid(ranges["pid"].to_numpy(), ranges["tid"].to_numpy()),
        "domain_id": ranges["domain"].to_numpy().astype(np.int32),
        "crosses_thread": ranges["crosses_thread"].to_numpy(),
        "row": ranges["row"].to_numpy(),
        "text_id": texts.text_id,
        "seq": texts.seq,
    })
    start, end = time_range({**out, "nvtx": nvtx})
    out["nvtx"] = _close_nvtx(nvtx, end)
    meta = ProfileMeta(
        source=db.path.name,
        nsys_version="",
        tables=read.physical,
        system_env={},
        domains=strings.domains(ranges["domain"].to_numpy()),
        start=start,
        end=end,
        warnings=tuple(reader.warnings),
    )
    text = f'(SELECT "value" FROM "{STRING_TABLE}" WHERE "_id_" = "name")'
    details = nv.NvtxDetails(partial(Database, db.path.resolve()), MARKER_TABLE if MARKER_TABLE in db.tables else None,
                             text, db.threads)
    return Profile(strings=strings.table(), gpus=_gpus(db, strings), meta=meta, nvtx_names=texts.names,
                   nvtx_details=details, **{t.name: out[t.name] for t in schema.EVENT_TABLES})


def _ranges(reader: _Reader, markers: pd.DataFrame | None) -> pd.DataFrame:
    """NVTX ranges from marker rows: each start row with its end row (same ``id``), in start order.

    Columns: row, start, end (-1: no end row), pid, tid, end_pid, end_tid, crosses_thread, name, domain.
    """
    columns = ("row", "start", "end", "pid", "tid", "end_pid", "end_tid", "name", "domain")
    if markers is None or markers.empty:
        return pd.DataFrame({**{c: np.empty(0, np.int64) for c in columns}, "crosses_thread": np.empty(0, bool)})
    flags = markers["flags"].to_numpy()
    kind = markers["object_kind"].to_numpy()
    is_start = ((flags & MARKER_START) != 0) & np.isin(kind, (OBJECT_PROCESS, OBJECT_THREAD))
    is_end = ((flags & MARKER_END) != 0) & ~is_start
    starts = markers[is_start]
    ends = markers[is_end].sort_values("marker_id", kind="stable").drop_duplicates("marker_id")
    end_ids = ends["marker_id"].to_numpy()
    pos = np.minimum(np.searchsorted(end_ids, starts["marker_id"].to_numpy()), max(len(end_ids) - 1, 0))
    found = (end_ids[pos] == starts["marker_id"].to_numpy()) if len(end_ids) else np.zeros(len(starts), bool)
    end_time = np.where(found, ends["time"].to_numpy()[pos] if len(end_ids) else 0, NO_ID)
    found &= end_time >= starts["time"].to_numpy()
    end_time = np.where(found, end_time, NO_ID)
    end_pid = np.where(found, ends["pid"].to_numpy()[pos] if len(end_ids) else 0, starts["pid"].to_numpy())
    end_tid = np.where(found, ends["tid"].to_numpy()[pos] if len(end_ids) else 0, starts["tid"].to_numpy())
    end_thread = found & (ends["object_kind"].to_numpy()[pos] == OBJECT_THREAD) if len(end_ids) else found
    crosses = end_thread & ((end_pid != starts["pid"].to_numpy()) | (end_tid != starts["tid"].to_numpy()))
    open_ranges = int((~found).sum())
    if open_ranges:
        reader.warnings.append(f"{reader.db.path.name}: {open_ranges} NVTX range(s) have no end record; they are "
                               "taken to end with the profile (the run stopped inside them)")
    ranges = pd.DataFrame({
        "row": starts["row"].to_numpy(), "start": starts["time"].to_numpy(), "end": end_time,
        "pid": starts["pid"].to_numpy(), "tid": starts["tid"].to_numpy(), "end_pid": end_pid, "end_tid": end_tid,
        "crosses_thread": crosses, "name": starts["name"].to_numpy(), "domain": starts["domain"].to_numpy(),
    })
    ranges = ranges[ranges["start"].to_numpy() > 0]
    return ranges.sort_values(["start", "row"], kind="stable").reset_index(drop=True)


def _nsys_mem_kind(cupti: np.ndarray) -> np.ndarray:
    return np.where(cupti >= 1, cupti - 1, NSYS_MEM_KIND_UNKNOWN)


def _devices_of(context: np.ndarray, devices: dict[int, int]) -> np.ndarray:
    if not devices:
        return np.zeros(len(context), dtype=np.int64)
    keys = np.array(sorted(devices), dtype=np.int64)
    values = np.array([devices[k] for k in keys], dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, context), len(keys) - 1)
    return np.where(keys[pos] == context, values[pos], 0)


@dataclass(frozen=True)
class _Names:
    """NVTX texts split for the Profile: per range a name id and seq; per name its emit flag."""

    text_id: np.ndarray
    seq: np.ndarray
    names: pd.DataFrame  # Profile.nvtx_names


class _Strings:
    """The profile's string table: nvprof's StringTable, then the strings the reader derives from it
    (NVTX names, API names, demangled and short kernel names), each appended with new ids."""

    def __init__(self, ids: np.ndarray, values: pa.Array) -> None:
        self.ids, self.values = ids, values
        self.parts: list[pa.Array] = [values]
        self.next = int(ids[-1]) + 1 if len(ids) else 0

    def _append(self, texts: pa.Array | list[str]) -> int:
        """Append `texts`; returns the id of the first."""
        array = texts if isinstance(texts, pa.Array) else pa.array(texts, type=pa.string())
        first = self.next
        self.parts.append(array.cast(pa.string()))
        self.next += len(array)
        return first

    def text(self, wanted: np.ndarray) -> pa.Array:
        return _lookup(self.ids, self.values, np.asarray(wanted, dtype=np.int64))

    def nvtx_names(self, name_ids: np.ndarray) -> _Names:
        """Ranges' StringTable ids -> the nsys reader's (name id, seq), decided per distinct text."""
        distinct, inverse = factorize_ids(name_ids)
        texts = self.text(distinct)
        # StringTable id 0 is nvprof's "-- null --": a range without a text
        texts = pc.if_else(pa.array(distinct == 0), pa.scalar(None, pa.string()), texts) if len(distinct) else texts
        split = nv.split_names(_cut(texts))
        base = self._append(split.names)
        code = split.codes[inverse] if len(name_ids) else np.empty(0, np.int32)
        id_type = np.int32 if self.next < np.iinfo(np.int32).max else np.int64
        text_id = np.where(code >= 0, base + code.astype(np.int64), NO_ID).astype(id_type)
        seq = split.seq[inverse] if len(name_ids) else np.empty(0, np.int32)
        names = pd.DataFrame({"emit": split.emit},
                             index=pd.Index(base + np.arange(len(split.emit), dtype=np.int64), name="id"))
        return _Names(text_id, seq.astype(np.int32), names)

    def api_names(self, source: np.ndarray, cbid: np.ndarray) -> np.ndarray:
        """Name id of each API row (source 0: runtime, 1: driver callback ids)."""
        key = source * (1 << 32) + cbid
        distinct, inverse = factorize_ids(key)
        tables = (RUNTIME_NAMES, DRIVER_NAMES)
        texts = [api_name(tables[int(k >> 32)], int(k & 0xFFFFFFFF)) for k in distinct]  # distinct calls
        return self._append(texts) + inverse

    def kernel_names(self, name_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(demangled name id, short name id) of each kernel's StringTable name id."""
        distinct, inverse = factorize_ids(name_ids)
        raw = [str(t) for t in self.text(distinct).to_pylist()]
        long_base = self._append(demangle(raw))
        short_base = self._append([short_name(t) for t in raw])  # distinct kernel names
        return long_base + inverse, short_base + inverse

    def domains(self, domain_ids: np.ndarray) -> dict[int, str]:
        """NVTX domain id (a StringTable id; 0 = the default domain) -> name."""
        named = factorize_ids(domain_ids[domain_ids != 0])[0]
        texts = self.text(named).to_pylist()
        return {0: "", **{int(d): str(t) for d, t in zip(named, texts, strict=True)}}

    def table(self) -> StringTable:
        values = pa.chunked_array(self.parts, type=pa.string())
        index = np.concatenate((self.ids, np.arange(self.next - (len(values) - len(self.ids)), self.next)))
        return StringTable(pd.Series(pd.array(values, dtype=TEXT), index=pd.Index(index, copy=False)))


def _as_numpy(array: pa.ChunkedArray, column: Column) -> np.ndarray:
    """The column as numpy, unusable values and NULLs as the column's default (0 when required).

    This reader does not check rows yet; the nsys reader drops such rows (``reader/nsys.py``, `frame_of`)."""
    return integers(array, column.dtype, column.default).values


def _close_nvtx(nvtx: pd.DataFrame, profile_end: int) -> pd.DataFrame:
    """Ranges left open (NULL end) end with the profile."""
    end = nvtx["end"].to_numpy()
    open_range = end < nvtx["start"].to_numpy()
    if not open_range.any():
        return nvtx
    return nvtx.assign(end=np.where(open_range, profile_end, end))


def _gpus(db: Database, strings: _Strings) -> pd.DataFrame:
    """One row per device of ``CUPTI_ACTIVITY_KIND_DEVICE`` (columns as the nsys reader's)."""
    table = "CUPTI_ACTIVITY_KIND_DEVICE"
    columns = {"device_id": "id", "name": "name", "cc_major": "computeCapabilityMajor",
               "cc_minor": "computeCapabilityMinor", "total_memory": "globalMemorySize",
               "sm_count": "numMultiprocessors"}
    if table not in db.tables or not {"id", "name"} <= set(db.columns(table)):
        return pd.DataFrame(columns=list(columns))
    present = set(db.columns(table))
    select = ", ".join(f'"{col}" AS {key}' if col in present else f"NULL AS {key}" for key, col in columns.items())
    gpus = pd.DataFrame(db.query(f'SELECT {select} FROM "{table}"'), columns=list(columns))
    gpus["name"] = strings.text(gpus["name"].to_numpy(dtype=np.int64)).to_pylist()
    gpus = gpus.drop_duplicates("device_id", keep="first")
    return gpus.sort_values("device_id", kind="stable").reset_index(drop=True)


def _context_devices(db: Database) -> dict[int, int]:
    """contextId -> deviceId (synchronisation rows name only the context)."""
    table = "CUPTI_ACTIVITY_KIND_CONTEXT"
    if table not in db.tables or not {"contextId", "deviceId"} <= set(db.columns(table)):
        return {}
    return {int(c): int(d) for c, d in db.query(f'SELECT "contextId", "deviceId" FROM "{table}"')}


__all__ = ["is_nvprof", "read_nvprof"]
