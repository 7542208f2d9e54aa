"""SQLite's own check of an export's pages, run beside the read.

An export whose pages were swapped, overwritten or cut can still open, and the reader then sees rows that are
silently missing or belong elsewhere: Input Shapes go blank, kernel totals change, and no warning says so. SQLite's
``PRAGMA quick_check`` walks every page of every table and finds such damage, at about a tenth of a run's CPU time.
It runs in a thread of its own, at the lowest priority, while the run reads and reduces (sqlite releases the GIL
while it works, so on a machine of two cores or more it takes the cores the run leaves idle), and its verdict is
taken before any output is moved into place: a damaged export gives one line and no outputs. ``--check=false``
skips it, for a user who wants what can still be read from a file they know is damaged.

Only SQLite inputs are checked; a trace's gzip stream carries its own checksum and its JSON fails to parse when cut.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import InputError
from ..log import shown
from .database import SQLITE_MAGIC

MESSAGES = 3  # quick_check's first lines quoted in the error: enough to tell the damage's kind
LOWEST_PRIORITY = 19  # nice value of the checking thread


class PageCheck:
    """`PRAGMA quick_check` of every SQLite file of `paths`, one after the other in a daemon thread started at once;
    `verdict` waits for it and raises `InputError` for the first damaged file."""

    def __init__(self, paths: Sequence[Path], sound: Callable[[Path], None] | None = None) -> None:
        self._paths = [p for p in paths if _is_sqlite(p)]
        self._sound = sound  # told of each file found sound (the read cache keeps it: reader/cache.py)
        self._failure: str | None = None
        self._error: BaseException | None = None  # raised in the thread (out of memory): raised again in `verdict`
        self._thread = threading.Thread(target=self._check_all, name="dlagg-page-check", daemon=True)
        if self._paths:
            self._thread.start()

    def _check_all(self) -> None:
        _yield_the_cores()
        try:
            for path in self._paths:
                problem = _quick_check(path)
                if problem is not None:
                    self._failure = damaged(path, problem)
                    return
                if self._sound is not None:
                    self._sound(path)
        except BaseException as exc:  # the run's own handlers say what it means, from the main thread
            self._error = exc

    def verdict(self) -> None:
        if self._thread.ident is not None:  # started
            self._thread.join()
        if self._error is not None:
            raise self._error
        if self._failure is not None:
            raise InputError(self._failure)


def _yield_the_cores() -> None:
    """Run this thread at the lowest priority (Linux sets a nice value per thread): the check then takes the cores
    the run leaves idle (its reports are built on one thread) instead of slowing the read, whose queries want every
    core. Its verdict is needed only when the outputs are moved into place. Elsewhere a thread's id is no process id
    (macOS would take it for one): the check runs at the run's priority."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
    except OSError:  # not allowed (a seccomp profile): the check runs at the run's priority
        pass


def damaged(path: Path, problem: str) -> str:
    """The one line for an export SQLite finds damaged."""
    return (f"{shown(path)}: the file is damaged (SQLite's quick_check: {problem}), so its figures could be wrong or "
            "missing; export the report again (nsys export --type sqlite), or pass --check=false to read what can "
            "still be read")


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:  # the reader says what is wrong with an unreadable file
        return False


def _quick_check(path: Path) -> str | None:
    """None when SQLite finds the file's pages sound, else what it says (its first lines, or the error it raised).
    The connection is read-only and immutable, as the reader's: the check never writes or locks the file."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True,
                                     check_same_thread=False)
        connection.text_factory = lambda raw: raw.decode("utf-8", "replace")  # damage may reach the messages
        try:
            rows = connection.execute("PRAGMA quick_check").fetchall()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        return str(exc)
    lines = [str(row[0]) for row in rows]
    if lines == ["ok"]:
        return None
    # a row may hold several lines, the first naming the schema ("*** in database main ***")
    lines = [line for row in lines for line in row.splitlines() if line.strip() and not line.startswith("***")]
    shown_lines = "; ".join(shown(line) for line in lines[:MESSAGES])
    more = f"; and {len(lines) - MESSAGES} more" if len(lines) > MESSAGES else ""
    return shown_lines + more
