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
  set here first.

A user's own settings of these variables are kept.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .limits import out_of_memory_loading  # noqa: E402 - standard library only: loaded before the memory runs out
from .log import one_malloc_arena  # noqa: E402 - after the variables: it imports nothing of numpy or pyarrow
from .pool import several_files, start_early  # noqa: E402 - standard library only

one_malloc_arena()


def main() -> NoReturn:
    if several_files(sys.argv[1:]):
        start_early()  # the pool's fork server imports dlagg on another core while this process does
    try:
        from .cli import entry
    except (MemoryError, ImportError) as exc:
        if isinstance(exc, ImportError) and "failed to map segment" not in str(exc):
            raise
        # an address-space limit too small for the libraries themselves (a traceback otherwise)
        print(f"dlagg: error: {out_of_memory_loading()}", file=sys.stderr, flush=True)
        os._exit(1)
    entry()


if __name__ == "__main__":
    main()
