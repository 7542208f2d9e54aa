"""Which reader a file needs, decided from its first bytes before anything opens it.

Contract: ``format_of(path) -> Format`` checks the file (a regular, non-empty file) and names its
format; ``Format.check(path)`` refuses what that format's reader cannot open (an nsys export's
un-checkpointed write-ahead log), ``Format.read(path, process, threads) -> Profile`` reads it. Every
reader yields the same `Profile`, so nothing after this choice knows which profiler wrote the file.
A new input format is one more `Format` in `FORMATS` (and, for jobs of several ranks, a probe in
``reader/discover.py``).

- ``sqlite``: an nsys export, or an nvprof database (told apart by their tables, ``reader/nvprof.py``);
- ``trace``: a PyTorch profiler (Kineto) trace, JSON, plain or gzip (``reader/kineto.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..log import shown
from ..model import Profile
from . import kineto
from .database import EXPORT_HINT, SQLITE_MAGIC, Database, check_file, check_input
from .nsys import read_nsys
from .nvprof import is_nvprof, read_nvprof

# Keys of a profiler trace's top level, one of which comes within its first bytes (a JSON file that has none,
# such as the ground truth recorded beside the shared traces, is no trace).
TRACE_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"',
              b'"displayTimeUnit"')
SQLITE, TRACE = "sqlite", "trace"


def _read_sqlite(path: Path, process: int | None, threads: int | None) -> Profile:
    db = Database(path, threads)
    try:
        if is_nvprof(db):
            return read_nvprof(db)
        return read_nsys(db, process)
    finally:
        db.close()


def _gzipped(path: Path) -> bool:
    """Whether the file is gzip (its first bytes, as `sniffed` gunzipped them, are not the file's own)."""
    with path.open("rb") as handle:
        return handle.read(2) == kineto.GZIP_MAGIC


def _is_trace(head: bytes) -> bool:
    return kineto.is_trace(head) and any(key in head for key in TRACE_KEYS)


@dataclass(frozen=True)
class Format:
    name: str
    what: str  # for messages: what a file of this format is
    matches: Callable[[bytes], bool]  # a test of the file's first bytes, gunzipped
    check: Callable[[Path], None]
    read: Callable[[Path, int | None, int | None], Profile]


FORMATS = (
    Format(SQLITE, "an nsys SQLite export or nvprof database", lambda head: head.startswith(SQLITE_MAGIC),
           check_input, _read_sqlite),
    Format(TRACE, "a PyTorch profiler trace", _is_trace, lambda path: None,
           lambda path, process, threads: kineto.read_kineto(path)),
)


def sniffed(path: Path) -> tuple[Format | None, bytes]:
    """The format of the (checked) file at `path`, None when no reader knows it; and its first bytes."""
    head = kineto.sniff(path)
    return next((f for f in FORMATS if f.matches(head)), None), head


def format_of(path: Path) -> Format:
    """The format of the file at `path`, checked; one line saying what to pass when dlagg reads no such file."""
    check_file(path)
    found, head = sniffed(path)
    if found is not None and found.name == SQLITE and _gzipped(path):
        raise InputError(f"{shown(path)}: is a gzip-compressed SQLite database, which dlagg cannot open in "
                         f"place; gunzip it first (gunzip -k {shown(path.name)}) and pass the .sqlite file")
    if found is not None:
        found.check(path)
        return found
    if path.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
        raise InputError(f"{shown(path)}: is an Nsight Systems report, not its SQLite export; "
                         + EXPORT_HINT.format(name=shown(path.name)))
    if kineto.is_trace(head):
        raise InputError(f"{shown(path)}: is JSON but not a PyTorch profiler trace (no traceEvents); pass the "
                         "*.pt.trace.json(.gz) file torch.profiler wrote")
    raise InputError(f"{shown(path)}: is not an SQLite database nor a PyTorch profiler trace; pass the file made by "
                     "'nsys export --type sqlite' or the trace torch.profiler wrote (*.pt.trace.json or .json.gz)")
