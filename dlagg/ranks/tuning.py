"""Process-wide choices that make a rank faster to reduce, made only in processes that dlagg owns or is given.

- **pandas' text.** pandas 3 keeps a column it builds from Python strings in Arrow (its str dtype's default
  storage), and converts it again at every selection, ``take`` and ``to_numpy``. A rank's reports build many small
  frames with text columns (op names, kernel names, op keys): with Arrow text a rank takes about 1.2x as long as
  with the str dtype's "python" storage, which keeps Python strings (`keep_text_in_python`; as fast as pandas 2's
  object columns; docs/design.md). The reports are the same bytes either way (tests/test_cli.py).
- **glibc's heap** (log.py): one arena for every thread, and the thresholds glibc adapts to (`log.heap_as_adapted`)
  where the environment fixed them, as Dask's nanny does for its workers.
- **pyarrow's memory pool**: the system allocator.

The command line makes them for itself and its pool's workers (`tune_process`). A Dask worker belongs to its
cluster, which may run other work: dlagg leaves it as it finds it and says what in it slows a rank (`slow_setup`,
run on every worker), and workers started for dlagg with ``dask worker --preload dlagg.dask_preload`` get
`tune_dask_worker`. On the 16-rank benchmark's ranks (benchmarks/bench_dask.py), a rank took Dask's workers as found
1.25-1.5x as long as preloaded ones (the medians of 80 ranks, in three runs).
"""

from __future__ import annotations

import os

from ..log import heap_as_adapted, one_malloc_arena

# glibc's environment variables that fix a heap threshold, which turns its adaptive thresholds off (mallopt(3)).
HEAP_FIXED_BY = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_heap_adapted = False  # tune_dask_worker set the adaptive thresholds' values in this process


def tune_process() -> None:
    """Process-wide allocator and pandas choices, made by the command-line tool (a library must leave them alone).

    pyarrow's default pool (mimalloc) keeps the pages it frees for itself: the system allocator
    gave a peak 60-150 MB lower on transformer_amp_large and a faster read. (This sets the pool of
    pyarrow's Python calls; Arrow's C++ code takes its own from ARROW_DEFAULT_MEMORY_POOL, which
    ``python -m dlagg`` and the ``dlagg`` command set before pyarrow loads: dlagg/__main__.py.) glibc gives each thread
    that allocates its own arena, and what one thread frees the others cannot reuse: one arena for
    the reader and writer threads too lowered the peak by another 10 MB at no measurable cost
    (docs/design.md).
    """
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    one_malloc_arena()
    keep_text_in_python()


def tune_dask_worker() -> None:
    """A Dask worker started for dlagg, set up to reduce a rank as fast as dlagg's own processes: text kept in
    Python strings, and glibc's heap thresholds at the values it adapts to where the environment fixed them (Dask's
    nanny sets MALLOC_TRIM_THRESHOLD_=65536). Not one arena: a worker may run tasks on several threads."""
    global _heap_adapted
    keep_text_in_python()
    if any(name in os.environ for name in HEAP_FIXED_BY):
        _heap_adapted = heap_as_adapted()


def keep_text_in_python() -> None:
    """Keep the text pandas infers in this process in Python strings (pandas' "python" string storage), where pandas 3
    keeps it in Arrow by default. pandas 2 infers no text dtype: its text stays Python objects either way."""
    import pandas as pd

    try:
        pd.set_option("mode.string_storage", "python")
    except (pd.errors.OptionError, KeyError, ValueError):  # a pandas without the choice
        pass


def inferred_text() -> str:
    """How pandas keeps the text it infers in this process: "pyarrow" or "python" (the storage of pandas 3's str dtype),
    or "object" (pandas 2, or pandas 3 with ``future.infer_string`` off)."""
    import pandas as pd

    dtype = pd.Series(["text"]).dtype
    return str(dtype.storage) if isinstance(dtype, pd.StringDtype) else "object"


def slow_setup() -> tuple[str, ...]:
    """What in this process makes a rank slower to reduce than in dlagg's own processes, each as a phrase."""
    found = []
    if inferred_text() == "pyarrow":
        found.append("keep the text pandas infers in Arrow")
    fixed = [f"{name}={os.environ[name]}" for name in HEAP_FIXED_BY if name in os.environ]
    if fixed and not _heap_adapted:
        found.append(f"run with glibc's adaptive heap thresholds turned off ({', '.join(fixed)}: large arrays "
                     "mapped and unmapped one by one, their pages zeroed each time)")
    return tuple(found)
