"""How pandas keeps the text it infers, in a process that reduces ranks.

pandas 3 stores a column it builds from Python strings in Arrow and converts it again at every selection, ``take``
and ``to_numpy``; pandas 2 kept such text as Python objects. A rank's reports build many small frames with text
columns (op names, kernel names, op keys), and with Arrow text a rank takes about 1.2x as long (on a Dask worker,
0.68 s against 0.575 s, the medians of 80 ranks: benchmarks/bench_dask.py; docs/design.md). The reports are the same
bytes either way (tests/test_cli.py).

The choice is process-wide, so dlagg makes it only for processes it owns: the command line and its pool's workers
(cli.tune_process). A Dask worker belongs to its cluster, which may run other work: dlagg leaves it alone, says when
it keeps Arrow text, and whoever starts workers for dlagg can make the same choice there with
``dask worker --preload dlagg.dask_preload``. pandas 3 deprecates the option and pandas 4 drops it: then both
functions here do nothing and find nothing to say.
"""

from __future__ import annotations

import warnings


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
