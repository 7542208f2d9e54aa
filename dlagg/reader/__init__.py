"""Reader stage: a profile file -> `Profile`, whichever profiler wrote it.

``load_profile(path, process=None)`` reads the file with the reader its format needs
(``reader/formats.py``: an nsys export, an nvprof database, a PyTorch profiler trace); nothing after
the reader knows which profiler wrote it.
"""

from __future__ import annotations

from pathlib import Path

from ..model import Profile
from .database import read_threads
from .formats import format_of


def check_input(path: Path) -> None:
    """Refuse, with one line saying what to do, a file no reader of dlagg can read."""
    format_of(path)


def load_profile(path: str | Path, process: int | None = None, threads: int | None = None) -> Profile:
    """Read every table dlagg uses from the profile at `path`: all of it, or one process's rows
    (`process`: its ``globalPid``, for nsys files that hold several ranks), on `threads` threads (default: one
    per core, up to 4; `read_threads` of the processes that read at once)."""
    path = Path(path)
    return format_of(path).read(path, process, threads)


__all__ = ["check_input", "load_profile", "read_threads"]
