"""Typed errors. `cli.main` is the only place that turns them into an exit code and one stderr line."""

from __future__ import annotations


class DlaggError(Exception):
    """Base class: the message is the whole user-facing line (what, which file, what to do)."""

    exit_code = 1


class InputError(DlaggError):
    """The input database is missing, unreadable, or not an nsys SQLite export."""


class OptionsError(DlaggError):
    """An option value is invalid for this input (unknown report, iteration out of range, ...)."""

    exit_code = 2


class OutputError(DlaggError):
    """An output cannot be written (folder not writable, file exists without --force)."""


class WorkerLost(DlaggError):
    """A process of the local pool ended abruptly while it worked (killed: most often by the system, for memory)."""


class RecordError(DlaggError):
    """Running the program under nsys, or exporting its report, failed (nsys missing, program not found, ...).

    The exit code is the program's status when the program failed, else 1."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
