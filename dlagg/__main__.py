"""``python -m dlagg`` and the ``dlagg`` command: process settings that must precede the imports, then the CLI.

Under an address-space limit (``ulimit -v``, ``prlimit --as``, batch schedulers) what counts is
the virtual memory *reserved*, and three libraries reserve far more than dlagg uses, each at a
moment only the process's first lines can control (docs/memory.md):

- Arrow's C++ code allocates from a default pool chosen once, when pyarrow loads, from
  ``ARROW_DEFAULT_MEMORY_POOL`` (`pyarrow.set_memory_pool` in tuning.tune_process does not change
  it). Its default, mimalloc, reserves 1 GiB at its first allocation: 1.4 GB of address space for
  a run that touches 140 MB. The system allocator reserves what is used.
- numpy's OpenBLAS starts a thread per core at import, each with its own buffers (40 MB on two
  cores, about a GB on a many-core node); dlagg does no linear algebra.
- glibc gives every thread that allocates an arena of 64 MB of address space; pyarrow starts a
  thread at import, before tuning.tune_process could limit the arenas. So the limit to one arena is
  set here first. And every thread reserves a stack of 8 MB (the stack limit): under an address-space
  limit, Python's threads get smaller ones (`limits.small_thread_stacks`).

A user's own settings of these variables are kept.

Before them, SIGINT and SIGTERM are given dlagg's handler (`errors.on_signal`): either one, whenever it comes, ends
the run with one line ("dlagg: interrupted (SIGTERM); no partial output was left behind") and exit status 130 or
143. The CLI itself is light (--help and option errors load no pandas, pyarrow or numpy); the pipeline is imported
once a run starts.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

from .errors import interrupted, on_signal, received

# First of all, SIGINT and SIGTERM: from here on either one, at any moment (a run's imports alone take a while), ends
# the run with one line and 130 or 143 (cli.main, or `_end_interrupted` outside it), never a traceback or a silent
# death. Only the interpreter's own start, before this line, is left to Python's defaults.
for _signal in (signal.SIGINT, signal.SIGTERM):
    try:
        signal.signal(_signal, on_signal)
    except ValueError:  # imported from another thread than the main one: signals are not ours to handle
        break


def _end_interrupted(exc: KeyboardInterrupt) -> NoReturn:
    line, code = interrupted(exc)
    print(line, file=sys.stderr, flush=True)
    os._exit(code)


try:
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    from .limits import libraries_fit, out_of_memory_loading, small_thread_stacks  # standard library only
    from .log import one_malloc_arena  # after the variables: it imports nothing of numpy or pyarrow
    from .ranks.pool import pool_context, several_files, start_early  # standard library only

    one_malloc_arena()
    small_thread_stacks()  # before any thread: pyarrow's import starts one
except KeyboardInterrupt as _exc:
    _end_interrupted(_exc)


def _start_pool_early() -> None:
    """The pool's fork server, started now: it imports dlagg on another core while this process does.

    It is spawned with SIGINT ignored, which it inherits across exec (Python keeps an ignored SIGINT): a Ctrl-C at
    the terminal reaches the whole process group, and the server's own imports would end in a KeyboardInterrupt
    traceback, and this process in exit status 3. This process says the one line and ends the pool. Blocking SIGINT
    instead would lose nothing, but the spawn clears the mask; so multiprocessing is imported first, and a SIGINT
    to this process is lost only during the spawn itself."""
    pool_context()
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        start_early()
    finally:
        signal.signal(signal.SIGINT, ignored)


def main() -> NoReturn:
    try:
        if several_files(sys.argv[1:]) and libraries_fit():  # (else the CLI says the limit is too small)
            _start_pool_early()
        try:
            from .cli import entry  # light: the pipeline (pandas, pyarrow, numpy) is imported once a run starts
        except (MemoryError, ImportError) as exc:
            signalled = received()
            if signalled is not None:  # the interruption, turned into an ImportError by the module it stopped
                _end_interrupted(signalled)
            if isinstance(exc, ImportError) and "failed to map segment" not in str(exc):
                raise
            # an address-space limit too small for the libraries themselves (a traceback otherwise)
            print(f"dlagg: error: {out_of_memory_loading()}", file=sys.stderr, flush=True)
            os._exit(1)
        entry()
    except KeyboardInterrupt as exc:  # outside cli.main's own handling: the imports, the parsing, the exit
        _end_interrupted(exc)


if __name__ == "__main__":
    main()
