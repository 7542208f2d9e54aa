"""The local process pool's start method, and starting it before the parent's own imports.

Ranks are reduced, and then the run's outputs written, by this process and a pool whose workers
fork from a *fork server* that has imported dlagg once (``multiprocessing``'s forkserver with ``dlagg._forkserver``
preloaded): each worker then starts in milliseconds, without the parent's threads and memory.
Importing dlagg takes about 0.8 s of one core; started from ``python -m dlagg`` before the parent's
imports (``start_early``), the fork server does it on the other core while the parent does its own,
so a run over several files does not wait for it.

Standard library only: ``__main__`` imports this before numpy, pandas and pyarrow.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
from collections.abc import Sequence
from typing import Any

PRELOAD = ["dlagg._forkserver"]  # dlagg.pipeline, and a quick exit


def pool_context() -> Any:
    """A fork server that has imported dlagg, else spawn (platforms without fork)."""
    context: Any = multiprocessing.get_context("forkserver" if "forkserver" in
                                               multiprocessing.get_all_start_methods() else "spawn")
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload(PRELOAD)
    return context


def start_early() -> None:
    """Start the fork server now (it imports dlagg in the background); a later pool uses it."""
    if pool_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _value(argv: Sequence[str], option: str) -> str | None:
    """The last value of `--option=value` or `--option value` in `argv` (None when absent)."""
    found = None
    for i, arg in enumerate(argv):  # command-line words, not events
        if arg.startswith(option + "="):
            found = arg[len(option) + 1:]
        elif arg == option and i + 1 < len(argv):
            found = argv[i + 1]
    return found


def several_files(argv: Sequence[str]) -> bool:
    """Whether the command line names several input files for a local pool (a cheap guess made before
    the options are parsed: a comma list, a glob or a folder; not with --workers=1 or --scheduler).
    A wrong guess costs a fork server that is never used, or one started later."""
    spec = _value(argv, "--nsys_database") or _value(argv, "--nvprof_database")
    if not spec or _value(argv, "--workers") == "1" or _value(argv, "--scheduler"):
        return False
    if (os.cpu_count() or 1) < 2 and _value(argv, "--workers") is None:
        return False
    return "," in spec or glob.has_magic(spec) or os.path.isdir(spec)
