"""Process-wide choices that make a rank faster to reduce, made only in processes that dlagg owns or is given.

- **pandas' text.** pandas 3 stores a column it builds from Python strings in Arrow and converts it again at every
  selection, ``take`` and ``to_numpy``; pandas 2 kept such text as Python objects. A rank's reports build many small
  frames with text columns (op names, kernel names, op keys): with Arrow text a rank takes about 1.2x as long
  (docs/design.md). The reports are the same bytes either way (tests/test_cli.py). pandas 3 deprecates the option
  and pandas 4 drops it: then there is nothing to choose.
- **glibc's heap** (log.py): one arena for every thread, and the thresholds glibc adapts to (`log.heap_as_adapted`)
  where the environment fixed them, as Dask's nanny does for its workers.
- **pyarrow's memory pool**: the system allocator.

The command line makes them for itself and its pool's workers (`tune_process`). A Dask worker belongs to its
cluster, which may run other work: dlagg leaves it as it finds it and says what in it slows a rank (`slow_setup`,
run on every worker), and workers started for dlagg with ``dask worker --preload dlagg.dask_preload`` get
`tune_dask_worker`. On the 16-rank benchmark's ranks (benchmarks/bench_dask.py), a rank took Dask's workers as found
1.33x as long as preloaded ones (0.720 s against 0.540 s, the medians of 80 ranks).
"""

from __future__ import annotations

import os
import warnings

from .log import heap_as_adapted, one_malloc_arena

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
    keep_text_as_objects()


def tune_dask_worker() -> None:
    """A Dask worker started for dlagg, set up to reduce a rank as fast as dlagg's own processes: text kept as
    Python objects, and glibc's heap thresholds at the values it adapts to where the environment fixed them (Dask's
    nanny sets MALLOC_TRIM_THRESHOLD_=65536). Not one arena: a worker may run tasks on several threads."""
    global _heap_adapted
    keep_text_as_objects()
    if any(name in os.environ for name in HEAP_FIXED_BY):
        _heap_adapted = heap_as_adapted()


def keep_text_as_objects() -> None:
    """Keep the text pandas infers in this process as Python objects, as pandas 2 keeps it."""
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3's deprecation of the option
        try:
            pd.set_option("future.infer_string", False)
        except (pd.errors.OptionError, KeyError):  # pandas 4: no such option
            pass


def keeps_arrow_text() -> bool:
    """Whether pandas keeps the text it infers in this process in Arrow (and the choice is still there to make)."""
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return bool(pd.get_option("future.infer_string"))
        except (pd.errors.OptionError, KeyError):
            return False


def slow_setup() -> tuple[str, ...]:
    """What in this process makes a rank slower to reduce than in dlagg's own processes, each as a phrase."""
    found = []
    if keeps_arrow_text():
        found.append("keep the text pandas infers in Arrow")
    fixed = [f"{name}={os.environ[name]}" for name in HEAP_FIXED_BY if name in os.environ]
    if fixed and not _heap_adapted:
        found.append(f"run with glibc's adaptive heap thresholds turned off ({', '.join(fixed)}: large arrays "
                     "mapped and unmapped one by one, their pages zeroed each time)")
    return tuple(found)
