"""Read a PyTorch profiler (Kineto) trace into the same `Profile` as an nsys export.

Contract: ``read_kineto(path) -> Profile``; ``probe_kineto(path) -> TraceHead`` reads what ranks need
(``distributedInfo``, the devices) from the head of the file only. A trace is the JSON that
``torch.profiler`` writes (``export_chrome_trace``, ``tensorboard_trace_handler``; ``.json`` or
``.json.gz``). Nothing after the reader knows which profiler wrote the profile: the trace's events map
onto the nsys reader's frames, columns, dtypes and id encodings (``reader/schema.py``); the table of
what becomes what is in docs/kineto.md.

- ``cpu_op`` events (``aten::``, autograd nodes) and ``user_annotation`` ranges (``record_function``,
  ``ProfilerStep#N``) are NVTX ranges of the default domain, as PyTorch's ``emit_nvtx`` would have
  recorded them: a ``cpu_op`` name is an emit_nvtx name (its ``Sequence number`` is the range's
  ``seq``), a ``user_annotation`` a user range. ``Input Dims`` are the ranges' input shapes.
- ``cuda_runtime`` and ``cuda_driver`` events are API calls; ``kernel``, ``gpu_memcpy``,
  ``gpu_memset`` and ``cuda_sync`` events GPU work, joined to their call by ``correlation`` (the
  ``ac2g`` flow events say the same and are not read).
- Threads become nsys-style ids ``pid << 24 | k`` (k numbers the distinct threads: Kineto's thread
  ids can be 32-bit handles that do not fit nsys's 24 bits); GPU rows take the process of the call
  that launched them.
- Times are microseconds with three decimals, relative to ``baseTimeNanoseconds``: each is turned into
  whole nanoseconds exactly (integer and fraction apart, see `_ns`), then counted from the trace's
  first event, as nsys counts from its session start; the session's start on the epoch clock is
  ``baseTimeNanoseconds`` plus that first event's time (ranks' clocks are aligned on it).

The JSON is parsed with msgspec into typed records holding only the fields dlagg reads, a block of
events at a time (`_blocks`), and each block becomes columns at once: no Python object per event
outlives its block.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np
import pandas as pd

from ..errors import InputError
from ..model import TEXT, Profile, ProfileMeta, StringTable, categorical, factorize_ids
from . import schema
from .schema import NO_ID

GZIP_MAGIC = b"\x1f\x8b"
# The schema versions of the traces this reader was checked on (PyTorch 1.8 wrote none).
KNOWN_SCHEMAS = (1,)
# Bytes of decompressed text read as one block of events: a block's records live while its columns are made.
BLOCK_BYTES = 16 << 20
# Where the events may start: the top-level keys before "traceEvents" fit in this many bytes in every
# profiler version seen (a header read for a folder's ranks).
HEAD_BYTES = 1 << 20
# Timestamps of this many microseconds or more cannot keep exact nanoseconds in a double.
EXACT_US = float(1 << 43)

# Category -> what it becomes. Older profilers (PyTorch 1.8-1.9) used capitalised names.
CPU_OP, ANNOTATION, RUNTIME, KERNEL, MEMCPY, MEMSET, SYNC = range(7)
CATEGORIES = {
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "runtime": RUNTIME,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "cuda_sync": SYNC,
}
# Categories known and not read (see docs/kineto.md): flows that repeat `correlation`, GPU copies of the
# annotations, Python stacks, the profiler's own spans and overhead.
SKIPPED = frozenset({"ac2g", "fwdbwd", "gpu_user_annotation", "python_function", "python", "trace", "overhead",
                     "cpu_instant_event", "cuda_profiler_range", "async", "flow", "user_instant_event"})
UNREAD = -1

# Memcpy names: "Memcpy HtoD (Pageable -> Device)". Kinds as nsys's ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND.
_COPY_KINDS = {name: kind for kind, name in schema.MEMCPY_KINDS.items()}
_MEM_KINDS = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4, "Unknown": 7}
_MEMCPY_NAME = re.compile(r"Memcpy (?P<kind>\w+)(?: \((?P<src>\w+) -> (?P<dst>\w+)\))?")
# Synchronisation names -> CUPTI's sync types (ENUM_CUPTI_SYNC_TYPE).
_SYNC_TYPES = {"Event Sync": 1, "Stream Wait Event": 2, "Stream Sync": 3, "Context Sync": 4}


class _Args(msgspec.Struct, gc=False, frozen=True, rename={
        "external_id": "External id", "seq": "Sequence number", "dims": "Input Dims",
        "collective": "Collective name", "in_nelems": "In msg nelems", "out_nelems": "Out msg nelems",
        "group_size": "Group size", "group_name": "Process Group Name", "group_ranks": "Process Group Ranks"}):
    """The arguments dlagg reads; the others are skipped by the parser, never built."""

    correlation: int = NO_ID
    seq: int = -1
    dims: msgspec.Raw = msgspec.Raw(b"")
    device: int = 0
    stream: int = 0
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    bytes: int = 0
    collective: str = ""
    in_nelems: int = 0
    out_nelems: int = 0
    dtype: str = ""
    group_size: int = 0
    group_name: str = ""
    group_ranks: str = ""


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = float("nan")
    dur: float = -1.0
    args: _Args = _NO_ARGS


class _Device(msgspec.Struct, gc=False):
    id: int = 0
    name: str = ""
    computeMajor: int | None = None
    computeMinor: int | None = None
    totalGlobalMem: int | None = None
    numSms: int | None = None


class Distributed(msgspec.Struct, gc=False, frozen=True):
    backend: str = ""
    rank: int | None = None
    world_size: int | None = None


class _Head(msgspec.Struct, gc=False):
    schemaVersion: int | None = None
    deviceProperties: list[_Device] = []
    distributedInfo: Distributed | None = None
    baseTimeNanoseconds: int = 0
    cuda_driver_version: int | None = None
    trace_id: str = ""


class _Whole(_Head, gc=False):
    traceEvents: list[_Event] = []


_HEAD = msgspec.json.Decoder(_Head)
_WHOLE = msgspec.json.Decoder(_Whole)
_EVENTS = msgspec.json.Decoder(list[_Event])


def is_trace(head: bytes) -> bool:
    """Whether a file's first bytes (decompressed) are those of a profiler trace: a JSON object."""
    return head.lstrip()[:1] == b"{"


def _opened(path: Path) -> Iterator[bytes]:
    """The file's text in pieces, gunzipped when it is gzip (a truncated or damaged file: InputError)."""
    try:
        with path.open("rb") as handle:
            gz = handle.read(2) == GZIP_MAGIC
            handle.seek(0)
            if not gz:
                while piece := handle.read(BLOCK_BYTES):
                    yield piece
                return
            yield from _gunzipped(handle)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: the gzip file is damaged or cut short ({exc}); copy or record the trace "
                         "again") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc}); check the path and its "
                         "permissions") from None


# Compressed bytes read at a time: about 10-15 MB of a trace's text.
GZIP_PIECE = 1 << 20


def _gunzipped(handle: BinaryIO) -> Iterator[bytes]:
    """A gzip stream's text in pieces, with zlib directly (the gzip module's own reads and checksum cost a tenth
    of a trace's read); every member of a multi-member file; zlib checks each member's CRC and length."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    while chunk := handle.read(GZIP_PIECE):
        while chunk:
            yield inflater.decompress(chunk)
            chunk = inflater.unused_data
            if inflater.eof:
                if not chunk.strip(b"\0"):  # the padding some writers leave after the last member
                    break
                inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    if not inflater.eof:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")


def _text(path: Path) -> bytes:
    return b"".join(_opened(path))


def _damaged(path: Path, exc: Exception | str) -> InputError:
    return InputError(f"{path}: is not a PyTorch profiler trace dlagg can read ({exc}); pass the "
                      "*.pt.trace.json(.gz) file torch.profiler wrote, whole")


# Event records start after '"traceEvents": ['. The text is read a piece at a time and cut into blocks where one
# event ends and the next begins ("}", a comma, "{"), each parsed as a list: a cut inside a string (a name holding
# "}, {") fails to parse, and the whole text is then parsed at once.
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_CLOSE = re.compile(rb"\}\s*\]")  # the last event's end, and the list's
# Where a block's cut is looked for first: the end of the text read so far.
CUT_WINDOW = 1 << 16


class _Layout(Exception):
    """The text cannot be cut into blocks of events (it is then parsed whole)."""


def _add_block(columns: _Columns, buffer: bytearray, end: int) -> None:
    """The events of ``buffer[:end]``, a JSON list, into `columns`: parsed in place, no copy of the text. The
    parsed records refer to the buffer (the raw shapes) until `columns` has made them columns; then the buffer is
    free to change."""
    view = memoryview(buffer)[:end]
    try:
        events = _EVENTS.decode(view)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _Layout from None
    columns.add(events)
    del events
    view.release()


def _last_boundary(text: bytearray) -> re.Match[bytes] | None:
    """The last place in `text` where one event ends and another begins (None: none yet)."""
    for start in (max(len(text) - CUT_WINDOW, 0), 0):
        found = None
        for found in _BOUNDARY.finditer(text, start):  # noqa: B007 (the last one is wanted)
            pass
        if found is not None or start == 0:
            return found
    return None


def _streamed(path: Path, columns: _Columns) -> _Head:
    """The trace's events into `columns`, a block at a time as the text is read (never the whole text in memory),
    and its head: the keys before the events and after them. `_Layout` where the text cannot be cut so.

    The text read waits in one buffer that starts with the list's "[": a block is parsed where it is, with the
    comma after its last event made a "]" for the time of the parse, and that comma then becomes the next
    block's "["."""
    pieces = _opened(path)
    buffer = bytearray()
    for piece in pieces:
        buffer += piece
        if _EVENTS_KEY.search(buffer, 0, HEAD_BYTES) or len(buffer) >= HEAD_BYTES:
            break
    found = _EVENTS_KEY.search(buffer, 0, HEAD_BYTES)
    if found is None:
        raise _Layout
    prefix = bytes(buffer[:found.start()]).rstrip()
    del buffer[:found.end() - 1]
    for piece in pieces:
        buffer += piece
        cut = _last_boundary(buffer)
        if cut is not None:
            comma = buffer.index(b",", cut.start())
            buffer[comma] = ord("]")
            _add_block(columns, buffer, comma + 1)
            buffer[comma] = ord("[")
            del buffer[:comma]
    for close in _CLOSE.finditer(buffer):  # the first "}]" that ends the list (another is inside an event's args)
        try:
            _add_block(columns, buffer, close.end())
        except _Layout:
            continue
        tail = bytes(buffer[close.end():]).strip()
        # the keys before the events and after them, as one object
        joined = prefix + tail[1:] if tail.startswith(b",") else prefix.rstrip(b",") + tail
        try:
            return _HEAD.decode(joined)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _Layout from None
    raise _Layout


@dataclass
class _Strings:
    """The profile's strings as they are met: text -> id."""

    ids: dict[str, int] = field(default_factory=dict)

    def codes(self, texts: list[str] | np.ndarray) -> np.ndarray:
        """Ids of `texts` (new texts get the next ids); one dictionary look-up per distinct text."""
        if len(texts) == 0:
            return np.empty(0, dtype=np.int64)
        codes, distinct = pd.factorize(np.asarray(texts, dtype=object))
        ids = np.fromiter((self.ids.setdefault(t, len(self.ids)) for t in distinct), np.int64, len(distinct))
        return ids[codes]

    def table(self) -> StringTable:
        values = pd.Series(list(self.ids), dtype=TEXT) if self.ids else pd.Series([], dtype=TEXT)
        return StringTable(pd.Series(values.array, index=pd.Index(np.arange(len(self.ids), dtype=np.int64))))


def _ns(us: np.ndarray) -> np.ndarray:
    """Microseconds (a double holding three decimals) as whole nanoseconds, exactly: the integer part and the
    fraction are converted apart, so the product never rounds (a double keeps the fraction of a value under
    2**43 us to better than half a nanosecond)."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _column(events: Sequence[_Event], name: str, dtype: type | str) -> np.ndarray:
    return np.fromiter(map(attrgetter(name), events), dtype=dtype, count=len(events))


@dataclass
class _Part:
    """One category's events of one block, as columns."""

    start: np.ndarray
    dur: np.ndarray
    pid: np.ndarray  # object: ints, or text in damaged traces
    tid: np.ndarray
    name: np.ndarray  # string ids
    extra: dict[str, np.ndarray]


_CATEGORY_COLUMNS: dict[int, tuple[tuple[str, str, type | str], ...]] = {
    CPU_OP: (("seq", "args.seq", np.int32),),
    ANNOTATION: (),
    RUNTIME: (("correlation_id", "args.correlation", np.int64),),
    KERNEL: (("correlation_id", "args.correlation", np.int64), ("device_id", "args.device", np.int64),
             ("stream_id", "args.stream", np.int64)),
    MEMCPY: (("correlation_id", "args.correlation", np.int64), ("device_id", "args.device", np.int64),
             ("stream_id", "args.stream", np.int64), ("bytes", "args.bytes", np.int64)),
    MEMSET: (("correlation_id", "args.correlation", np.int64), ("device_id", "args.device", np.int64),
             ("stream_id", "args.stream", np.int64), ("bytes", "args.bytes", np.int64)),
    SYNC: (("correlation_id", "args.correlation", np.int64), ("device_id", "args.device", np.int64),
           ("stream_id", "args.stream", np.int64)),
}
COLLECTIVE_ARGS = ("collective", "in_nelems", "out_nelems", "dtype", "group_size", "group_name", "group_ranks")


def _ids(events: Sequence[_Event], name: str) -> np.ndarray:
    """Process or thread ids: int64 when they are numbers of at most 32 bits (as the profiler writes them), else
    objects (text in a damaged trace)."""
    try:
        ids = _column(events, name, np.int64)
    except (TypeError, ValueError, OverflowError):
        return _column(events, name, object)
    return ids if len(ids) == 0 or (ids.min() >= 0 and ids.max() < 1 << 32) else ids.astype(object)


def _take(events: Sequence[_Event], rows: np.ndarray) -> Sequence[_Event]:
    """The events at `rows` (itemgetter: no Python loop)."""
    if len(rows) == 0:
        return ()
    taken = itemgetter(*rows.tolist())(events)
    return taken if len(rows) > 1 else (taken,)


def _launch(events: Sequence[_Event]) -> dict[str, np.ndarray]:
    """A kernel's grid and block (0 where the trace does not say) and its collective's arguments."""
    out: dict[str, np.ndarray] = {}
    for key, attr in (("grid", "args.grid"), ("block", "args.block")):
        dims = list(map(attrgetter(attr), events))
        flat = pd.DataFrame(dims).reindex(columns=range(3)).fillna(0).to_numpy(dtype=np.int64) if dims else \
            np.zeros((0, 3), dtype=np.int64)
        for axis, letter in enumerate("xyz"):
            out[f"{key}_{letter}"] = flat[:, axis]
    for name in COLLECTIVE_ARGS:
        out[name] = np.asarray(list(map(attrgetter(f"args.{name}"), events)), dtype=object)
    return out


class _Columns:
    """Events, a block at a time, into per-category columns."""

    def __init__(self) -> None:
        self.strings = _Strings()
        self.parts: dict[int, list[_Part]] = {code: [] for code in _CATEGORY_COLUMNS}
        self.skipped: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.no_duration = 0
        self.origin = np.inf  # the earliest timestamp of any event (us)

    def add(self, events: Sequence[_Event]) -> None:
        if not events:
            return
        codes, distinct = pd.factorize(_column(events, "cat", object))
        lowered = [str(c).lower() for c in distinct]
        kinds = np.array([CATEGORIES.get(c, UNREAD) for c in lowered], dtype=np.int64)[codes]
        for i, cat in enumerate(lowered):
            if CATEGORIES.get(cat, UNREAD) == UNREAD:
                n = int(np.count_nonzero(codes == i))
                (self.skipped if cat in SKIPPED or not cat else self.unknown)[str(distinct[i])] += n
        read = np.flatnonzero(kinds != UNREAD)
        kinds, events = kinds[read], _take(events, read) if len(read) < len(events) else events
        complete = _column(events, "ph", object) == "X"
        for kind in self.parts:
            rows = np.flatnonzero((kinds == kind) & complete)
            if len(rows):
                self._part(kind, _take(events, rows) if len(rows) < len(events) else events)

    def _part(self, kind: int, picked: Sequence[_Event]) -> None:
        ts, dur = _column(picked, "ts", np.float64), _column(picked, "dur", np.float64)
        usable = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0)
        if not usable.all():
            self.no_duration += int(np.count_nonzero(~usable))
            picked, ts, dur = _take(picked, np.flatnonzero(usable)), ts[usable], dur[usable]
        if len(ts):
            self.origin = min(self.origin, float(ts.min()))
        extra = {name: _column(picked, attr, dtype) for name, attr, dtype in _CATEGORY_COLUMNS[kind]}
        if kind == CPU_OP:  # the text of the shapes, decoded once per distinct text (`_ranges`)
            extra["dims"] = np.fromiter(map(bytes, map(attrgetter("args.dims"), picked)), object, len(picked))
        if kind == KERNEL:
            extra.update(_launch(picked))
        self.parts[kind].append(_Part(
            start=ts, dur=dur, pid=_ids(picked, "pid"), tid=_ids(picked, "tid"),
            name=self.strings.codes(_column(picked, "name", object)), extra=extra))

    def joined(self, kind: int) -> _Part:
        parts = self.parts[kind]
        if not parts:
            columns = _CATEGORY_COLUMNS[kind]
            extra = {name: np.empty(0, dtype=dtype) for name, _, dtype in columns}
            if kind == CPU_OP:
                extra["dims"] = np.empty(0, dtype=object)
            if kind == KERNEL:
                extra.update({f"{k}_{a}": np.empty(0, np.int64) for k in ("grid", "block") for a in "xyz"})
                extra.update({name: np.empty(0, dtype=object) for name in COLLECTIVE_ARGS})
            none = np.empty(0, dtype=np.int64)
            return _Part(np.empty(0), np.empty(0), none, none, none, extra)
        return _Part(
            start=np.concatenate([p.start for p in parts]), dur=np.concatenate([p.dur for p in parts]),
            pid=np.concatenate([p.pid for p in parts]), tid=np.concatenate([p.tid for p in parts]),
            name=np.concatenate([p.name for p in parts]),
            extra={key: np.concatenate([p.extra[key] for p in parts]) for key in parts[0].extra})


def _parse(path: Path) -> tuple[_Head, _Columns]:
    """The trace's head and its events as columns: streamed (`_streamed`), else parsed whole."""
    if not is_trace(sniff(path)):
        raise _damaged(path, "not a JSON object")
    try:
        columns = _Columns()
        return _streamed(path, columns), columns
    except _Layout:
        pass
    text = _text(path)
    try:
        whole = _WHOLE.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _damaged(path, _reason(exc)) from None
    del text
    columns = _Columns()
    columns.add(whole.traceEvents)
    whole.traceEvents = []
    return whole, columns


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "truncated" in text.lower() or "unexpected end" in text.lower():
        return "the JSON is cut short"
    return text if len(text) < 200 else text[:197] + "..."


class _Threads:
    """nsys-style global thread ids ``pid << 24 | k`` for (pid, tid) pairs of any values."""

    def __init__(self, pids: np.ndarray, tids: np.ndarray) -> None:
        self.numeric = pids.dtype.kind == "i" and tids.dtype.kind == "i"  # 32-bit ids (`_ids`): one int64 key
        if self.numeric:
            self.keys: pd.Index = pd.Index(factorize_ids((pids << 32) | tids)[0])
            pid_of_key = self.keys.to_numpy() >> 32
        else:
            self.keys = pd.MultiIndex.from_arrays([pids, tids]).unique()
            pid_of_key = self.keys.get_level_values(0).to_numpy()
        if len(self.keys) >= 1 << 24:
            raise InputError("trace: more than 16 million threads; this is not a profile dlagg can read")
        self.pid = _process_ids(pid_of_key)

    def global_tid(self, pids: np.ndarray, tids: np.ndarray) -> np.ndarray:
        if self.numeric and pids.dtype.kind == "i" and tids.dtype.kind == "i":
            k = np.searchsorted(self.keys.to_numpy(), (pids << 32) | tids)
        else:
            k = self.keys.get_indexer(pd.MultiIndex.from_arrays([pids, tids]))
        return (self.pid[k] << 24) | (k + 1)


def _process_ids(pids: np.ndarray) -> np.ndarray:
    """The OS process id of each pid value (a number in [0, 2**39); text or out-of-range values are numbered)."""
    out = np.empty(len(pids), dtype=np.int64)
    if pids.dtype.kind in "iu":
        numeric = (pids >= 0) & (pids < 1 << 39)
    else:  # a few distinct processes
        numeric = np.array([isinstance(p, int | np.integer) and not isinstance(p, bool) and 0 <= p < 1 << 39
                            for p in pids], dtype=bool)
    out[numeric] = pids[numeric].astype(np.int64)
    out[~numeric] = (1 << 38) + pd.factorize(pids[~numeric])[0]
    return out


def _process_of(corr: np.ndarray, calls: np.ndarray, call_pids: np.ndarray) -> np.ndarray:
    """Global pid of GPU rows: the process of the call with the same correlation id, else the process that made
    most calls (0 without any)."""
    if len(calls) == 0:
        return np.zeros(len(corr), dtype=np.int64)
    common = int(pd.Series(call_pids).value_counts().index[0])
    order = np.argsort(calls, kind="stable")
    keys, pids = calls[order], call_pids[order]
    pos = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
    return np.where(keys[pos] == corr, pids[pos], common) << 24


def _memcpy_kinds(strings: _Strings, name_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(copy kind, source memory kind, destination memory kind) of each memcpy from its name."""
    texts = list(strings.ids)
    distinct, inverse = factorize_ids(name_ids)
    kinds = np.zeros((len(distinct), 3), dtype=np.int64)
    kinds[:, 1:] = NO_ID
    for row, name_id in enumerate(distinct.tolist()):  # a handful of distinct names
        found = _MEMCPY_NAME.match(texts[name_id])
        if found:
            kinds[row] = (_COPY_KINDS.get(found["kind"], 0), _MEM_KINDS.get(found["src"] or "", NO_ID),
                          _MEM_KINDS.get(found["dst"] or "", NO_ID))
    return kinds[inverse, 0], kinds[inverse, 1], kinds[inverse, 2]


def demangled_short_name(name: str) -> str:
    """nsys-style short name of a demangled kernel name: ``void at::native::vectorized_elementwise_kernel<4,
    ...>(int, ...)`` -> ``vectorized_elementwise_kernel``; ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` ->
    ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``."""
    text = name[5:] if name.startswith("void ") else name
    text = text.replace("(anonymous namespace)", "anonymous_namespace")
    depth, end = 0, len(text)
    for at, ch in enumerate(text):
        if ch in "<(" and depth == 0:
            end = at
            break
        depth += ch == "<" or ch == "("
        depth -= ch == ">" or ch == ")"
    short = text[:end].rsplit("::", 1)[-1].strip()
    return short or name


def read_kineto(path: str | Path) -> Profile:
    """Every frame dlagg uses from the trace at `path` (see the module docstring)."""
    path = Path(path)
    head, cols = _parse(path)
    warnings = _head_warnings(path, head, cols)
    ops, notes, calls = cols.joined(CPU_OP), cols.joined(ANNOTATION), cols.joined(RUNTIME)
    gpu = {kind: cols.joined(kind) for kind in (KERNEL, MEMCPY, MEMSET, SYNC)}
    if not any(len(p.start) for p in (ops, notes, calls, *gpu.values())):
        if cols.no_duration:
            raise InputError(f"{path}: none of the trace's {cols.no_duration:,} events has a usable time and duration "
                             "(ts, dur); pass the trace torch.profiler wrote, unchanged")
        raise InputError(f"{path}: the trace holds no profiler events (its traceEvents list is empty or has no "
                         "complete events); record at least one active step (torch.profiler's schedule)")
    origin = cols.origin if np.isfinite(cols.origin) else 0.0
    if max(abs(origin), *(float(np.abs(p.start).max()) for p in (ops, notes, calls, *gpu.values())
                          if len(p.start))) >= EXACT_US:
        warnings.append(f"{path.name}: timestamps beyond 2**43 us: nanoseconds are rounded (the profiler's clock "
                        "base is far behind its events)")
    zero = _ns(np.array([origin]))[0]

    def times(part: _Part) -> tuple[np.ndarray, np.ndarray]:
        start = _ns(part.start) - zero
        return start, start + _ns(part.dur)

    threads = _Threads(np.concatenate([ops.pid, notes.pid, calls.pid]), np.concatenate([ops.tid, notes.tid, calls.tid]))
    frames = {t.name: _empty(t) for t in schema.EVENT_TABLES}
    call_tid = threads.global_tid(calls.pid, calls.tid)
    start, end = times(calls)
    frames["runtime"] = _frame(schema.RUNTIME, start=start, end=end, global_tid=call_tid,
                               correlation_id=calls.extra["correlation_id"], name_id=calls.name)
    strings = cols.strings
    for kind, table in ((KERNEL, schema.KERNELS), (MEMCPY, schema.MEMCPY), (MEMSET, schema.MEMSET),
                        (SYNC, schema.SYNC)):
        start, end = times(gpu[kind])
        process = _process_of(gpu[kind].extra["correlation_id"], calls.extra["correlation_id"], call_tid >> 24)
        frames[table.name] = _gpu_frame(kind, table, gpu[kind], strings, start=start, end=end, global_pid=process)
    frames["nvtx"], nvtx_names, shapes = _ranges(ops, notes, threads, times, strings)
    frames = {name: frame.sort_values("start", kind="stable").reset_index(drop=True) if name != "nvtx" else frame
              for name, frame in frames.items()}
    starts = [int(f["start"].min()) for f in frames.values() if len(f)]
    ends = [int(f["end"].max()) for f in frames.values() if len(f)]
    meta = ProfileMeta(
        source=path.name,
        nsys_version="",
        tables={name: "traceEvents" for name, frame in frames.items() if len(frame)},
        system_env={"CudaDriverVersion": str(head.cuda_driver_version)} if head.cuda_driver_version else {},
        domains={0: ""},
        start=min(starts, default=0),
        end=max(ends, default=0),
        warnings=tuple(warnings),
        session_start_utc=head.baseTimeNanoseconds + int(zero) if head.baseTimeNanoseconds else None,
    )
    kernels = frames["kernels"]
    return Profile(strings=strings.table(), gpus=_gpus(head, kernels), meta=meta, nvtx_names=nvtx_names,
                   nvtx_details=Shapes(shapes), **frames)


def _gpu_frame(kind: int, table: schema.Table, part: _Part, strings: _Strings, **values: np.ndarray) -> pd.DataFrame:
    """The frame of one kind of GPU work, with what its names say (short kernel names, copy and sync kinds)."""
    values.update(part.extra, name_id=part.name)
    texts = list(strings.ids)
    distinct, inverse = factorize_ids(part.name)  # a few hundred distinct names at most
    if kind == KERNEL:
        short = strings.codes([demangled_short_name(texts[i]) for i in distinct.tolist()])
        values.update(short_name_id=short[inverse], mangled_name_id=np.full(len(part.name), NO_ID))
    elif kind == MEMCPY:
        values["copy_kind"], values["src_kind"], values["dst_kind"] = _memcpy_kinds(strings, part.name)
    elif kind == SYNC:
        types = np.array([_SYNC_TYPES.get(texts[i], NO_ID) for i in distinct.tolist()], dtype=np.int64)
        values["sync_type"] = types[inverse] if len(part.name) else np.empty(0, np.int64)
    return _frame(table, **values)


def _empty(table: schema.Table) -> pd.DataFrame:
    return pd.DataFrame({c.name: np.empty(0, dtype=c.dtype) for c in table.columns})


def _frame(table: schema.Table, **values: np.ndarray) -> pd.DataFrame:
    """A frame with `table`'s dlagg columns (their defaults where `values` has none) and dtypes; a kernel frame
    keeps its collective's arguments after them."""
    n = len(values["start"])
    frame = pd.DataFrame({c.name: np.asarray(values[c.name]).astype(c.dtype, copy=False) if c.name in values
                          else np.full(n, c.default if c.default is not None else 0, dtype=c.dtype)
                          for c in table.columns})
    if table is schema.KERNELS:
        frame = frame.assign(**_collective_columns(values))
    return frame


# Bytes of one element of each data type a collective's args name (c10's ScalarType names).
DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "UInt16": 2,
               "UInt32": 4, "UInt64": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
               "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1}


def _collective_columns(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per kernel, what its collective's args say: the message size in bytes as nccl-tests counts it (the larger
    of the input and output buffers: the whole gathered or scattered buffer; -1 where not known), the ranks of
    its process group (0: not known) and the group's name ('' for other kernels)."""
    elements = np.maximum(values["in_nelems"].astype(np.int64), values["out_nelems"].astype(np.int64))
    size = pd.Series(values["dtype"], dtype=object).map(DTYPE_BYTES).fillna(0).to_numpy(dtype=np.int64)
    known = (elements > 0) & (size > 0)
    return {"comm_bytes": np.where(known, elements * size, -1),
            "comm_ranks": values["group_size"].astype(np.int64),
            "comm_group": values["group_name"].astype(object)}


def _ranges(ops: _Part, notes: _Part, threads: _Threads, times: Callable[[_Part], tuple[np.ndarray, np.ndarray]],
            strings: _Strings) -> tuple[pd.DataFrame, pd.DataFrame, pd.Categorical]:
    """The NVTX frame of the op and annotation ranges, the names' emit flags, and each range's input shapes."""
    op_start, op_end = times(ops)
    note_start, note_end = times(notes)
    start = np.concatenate([op_start, note_start])
    end = np.concatenate([op_end, note_end])
    text_id = np.concatenate([ops.name, notes.name])
    seq = np.concatenate([ops.extra["seq"], np.full(len(notes.start), -1, np.int32)]).astype(np.int32)
    seq[seq < 0] = -1
    global_tid = threads.global_tid(np.concatenate([ops.pid, notes.pid]), np.concatenate([ops.tid, notes.tid]))
    dims = np.concatenate([ops.extra["dims"], np.full(len(notes.start), b"", dtype=object)])
    # ranges that start together: the enclosing (longer) one first, as a profiler records nested calls
    order = np.lexsort((-(end - start), start))
    n = len(start)
    frame = pd.DataFrame({
        "start": start[order], "end": end[order], "global_tid": global_tid[order],
        "domain_id": np.zeros(n, np.int32), "crosses_thread": np.zeros(n, bool),
        "row": np.arange(n, dtype=np.int64), "text_id": text_id[order].astype(np.int32), "seq": seq[order],
    })
    op_names = np.unique(ops.name)
    names = np.unique(text_id)
    emit = np.isin(names, op_names)
    nvtx_names = pd.DataFrame({"emit": emit}, index=pd.Index(names.astype(np.int64), name="id"))
    codes, distinct = pd.factorize(dims[order])
    texts = np.array([bytes(d).decode("utf-8", "replace") for d in distinct], dtype=object)  # distinct shapes
    blank = texts == ""
    codes = np.where(blank[codes] if len(texts) else np.zeros(n, bool), -1, codes)
    return frame, nvtx_names, categorical(codes, texts)


@dataclass(frozen=True)
class Shapes:
    """Input shapes of the trace's ranges (``Input Dims``), by NVTX row: read with the events."""

    shapes: pd.Categorical

    def input_shapes(self, rows: np.ndarray) -> pd.Categorical:
        rows = np.asarray(rows, dtype=np.int64)
        return self.shapes.take(rows) if len(rows) else self.shapes[:0]


def _gpus(head: _Head, kernels: pd.DataFrame) -> pd.DataFrame:
    """The devices the trace's GPU work ran on, with the properties the trace gives (every listed device when no
    work ran)."""
    used = set(np.unique(kernels["device_id"].to_numpy()).tolist())
    devices = {d.id: d for d in head.deviceProperties}
    ids = sorted(used or devices)
    pick = [devices.get(i) for i in ids]
    return pd.DataFrame({
        "device_id": np.array(ids, dtype=np.int64),
        "name": pd.Series([d.name if d else "" for d in pick], dtype=object),
        "cc_major": pd.array([d.computeMajor if d else None for d in pick], dtype="Int64"),
        "cc_minor": pd.array([d.computeMinor if d else None for d in pick], dtype="Int64"),
        "total_memory": pd.array([d.totalGlobalMem if d else None for d in pick], dtype="Int64"),
        "sm_count": pd.array([d.numSms if d else None for d in pick], dtype="Int64"),
    })


def _head_warnings(path: Path, head: _Head, cols: _Columns) -> list[str]:
    out: list[str] = []
    if head.schemaVersion is not None and head.schemaVersion not in KNOWN_SCHEMAS:
        newer = head.schemaVersion > max(KNOWN_SCHEMAS)
        out.append(f"{path.name}: written by a{' newer' if newer else 'n older'} profiler (trace schemaVersion "
                   f"{head.schemaVersion}; dlagg knows {', '.join(map(str, KNOWN_SCHEMAS))}): the categories dlagg "
                   "knows are read, check the reports")
    if cols.unknown:
        listed = ", ".join(f"{cat} ({n:,})" for cat, n in cols.unknown.most_common(5))
        out.append(f"{path.name}: events of categories dlagg does not know were left out: {listed}")
    if cols.no_duration:
        out.append(f"{path.name}: {cols.no_duration:,} events without a usable time or duration were left out")
    if not any(cols.parts[k] for k in (KERNEL, MEMCPY, MEMSET)):
        out.append(f"{path.name}: no CUDA activity in the trace (CPU only): GPU figures are 0; record with "
                   "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] to see the GPU")
    return out


@dataclass(frozen=True)
class TraceHead:
    """What a folder of ranks needs to know of one trace, from its first and last bytes."""

    distributed: Distributed | None
    trace_id: str
    # (first, last) event time on the epoch clock, ns: an estimate within the recording (`_span`); None when the
    # trace's ends hold no event time
    span: tuple[int, int] | None = None


# The keys the profiler writes before its events (any of them there: the head is the keys before the events).
_HEAD_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "trace_id")
# Bytes at the end of the text read for the last events' times (the profiler ends its trace with its own span and
# the "Record Window End" instant, at the window's end).
TAIL_BYTES = 64 << 10
_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)')


def _ends(path: Path, tail: bool = True) -> tuple[bytes, bytes]:
    """The first HEAD_BYTES and (with `tail`) the last TAIL_BYTES of the file's text: a plain file's read at once,
    a gzip file's streamed through (only the two ends are kept)."""
    with path.open("rb") as handle:
        gz = handle.read(2) == GZIP_MAGIC
    if not tail:
        head = b""
        for piece in _opened(path):
            head += piece
            if len(head) >= HEAD_BYTES:
                break
        return head[:HEAD_BYTES], b""
    if not gz:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
            handle.seek(max(handle.seek(0, 2) - TAIL_BYTES, 0))
            return head, handle.read()
    head, last = b"", b""
    for piece in _opened(path):
        if len(head) < HEAD_BYTES:
            head += piece[:HEAD_BYTES - len(head)]
        last = (last + piece)[-TAIL_BYTES:]
    return head, last


def _span(head: bytes, tail: bytes, events_at: int, base: int) -> tuple[int, int] | None:
    """(first, last) event time on the epoch clock (ns) as the trace's ends show it: the first event's time and the
    tail's times (the profiler's own span starts at the window's start, its last instant at the window's end). Both
    lie within the recording: traces whose spans are apart were recorded apart."""
    first = _TS.search(head, events_at)
    times = [float(m) for m in _TS.findall(tail)] + ([float(first[1])] if first else [])
    if not times:
        return None
    return base + round(min(times) * 1000), base + round(max(times) * 1000)


def probe_kineto(path: Path, span: bool = True) -> TraceHead:
    """The trace's ``distributedInfo``, id and (with `span`: a gzip file is then read through) time span, from the
    keys before its events (from the whole text when they hold none of the keys the profiler writes there: another
    writer's order, the events first) and from the times of its first and last events."""
    text, tail = _ends(path, span)
    found = _EVENTS_KEY.search(text, 0, HEAD_BYTES)
    head = None
    if found is not None and any(f'"{key}"'.encode() in text[:found.start()] for key in _HEAD_KEYS):
        try:
            head = _HEAD.decode(text[:found.start()].rstrip().rstrip(b",") + b"}")
        except (msgspec.DecodeError, msgspec.ValidationError):
            head = None
    if head is None:
        try:
            head = _HEAD.decode(_text(path))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise _damaged(path, _reason(exc)) from None
    at = found.end() if found is not None else len(text)
    return TraceHead(head.distributedInfo, head.trace_id, _span(text, tail, at, head.baseTimeNanoseconds) if span
                     else None)


def sniff(path: Path) -> bytes:
    """The first bytes of the file's text (gunzipped): what decides its format."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
            if head[:2] != GZIP_MAGIC:
                return head
            handle.seek(0)
            with gzip.GzipFile(fileobj=handle) as stream:
                return stream.read(4096)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: the gzip file is damaged or cut short ({exc}); copy or record it again") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from None


__all__ = ["read_kineto", "probe_kineto", "is_trace", "sniff", "TraceHead", "Distributed", "Shapes"]
