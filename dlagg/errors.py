"""Typed errors. `cli.main` is the only place that turns them into an exit code and one stderr line."""

from __future__ import annotations

import signal


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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM received by the ``dlagg`` command (`on_signal`, installed first thing in dlagg/__main__.py).

    A KeyboardInterrupt, so that SIGTERM unwinds a run exactly as Ctrl-C does: staged outputs removed, an output
    commit that has begun finished (output/staging.py), the pool shut down."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_RECEIVED: list[int] = []


def on_signal(signum: int, _frame: object) -> None:
    """The command's SIGINT and SIGTERM handler: the run unwinds from wherever it is (imports included)."""
    _RECEIVED.append(signum)
    raise Interrupted(signum)


def received() -> Interrupted | None:
    """The interruption, if the command was given SIGINT or SIGTERM, whatever became of its exception.

    A library may turn the KeyboardInterrupt into its own error: raised while numpy's extension module initialises
    (pandas importing it), it comes out as pandas' "ImportError: Unable to import required dependency numpy". The
    run still ends as interrupted, not with an internal error."""
    return Interrupted(_RECEIVED[0]) if _RECEIVED else None


def interrupted(exc: BaseException) -> tuple[str, int]:
    """The one line an interrupted run ends with, and its exit status (128 + the signal: 130 SIGINT, 143 SIGTERM).

    A plain KeyboardInterrupt (a library caller's Ctrl-C, no handler of ours) is SIGINT. Any later SIGINT or SIGTERM
    to the command is noted and dropped from here on: the process is ending, and a second Ctrl-C must not turn the
    line into a traceback."""
    signum = getattr(exc, "signum", signal.SIGINT)
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is on_signal:  # the command's own handler (never a library caller's)
            try:
                signal.signal(sig, _ending)
            except ValueError:  # not the main thread: a second signal may still raise
                pass
    return f"dlagg: interrupted ({signal.Signals(signum).name}); no partial output was left behind", 128 + signum


def _ending(_signum: int, _frame: object) -> None:
    """SIGINT or SIGTERM once the interrupted command is ending: nothing more to do (a no-op rather than SIG_IGN, which
    would make Python report a signal already tripped as 'ignored due to race condition')."""
