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
