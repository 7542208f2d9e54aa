"""Reader stage: an nsys SQLite export, or an nvprof database (``reader/nvprof.py``) -> `Profile`.

``load_profile(path, process=None)`` decides which by the tables the file has; nothing after the
reader knows which profiler wrote it.
"""

from __future__ import annotations

from pathlib import Path

from ..model import Profile
from .nvprof import is_nvprof, read_nvprof
from .sqlite import Database, check_input, read_nsys, read_threads


def load_profile(path: str | Path, process: int | None = None, threads: int | None = None) -> Profile:
    """Read every table dlagg uses from the export at `path`: all of it, or one process's rows
    (`process`: its ``globalPid``, for files that hold several ranks), on `threads` threads (default: one per
    core, up to 4; `read_threads` of the processes that read at once)."""
    db = Database(Path(path), threads)
    try:
        if is_nvprof(db):
            return read_nvprof(db)
        return read_nsys(db, process)
    finally:
        db.close()


__all__ = ["check_input", "load_profile", "read_threads"]
