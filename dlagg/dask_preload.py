"""``dask worker --preload dlagg.dask_preload``: a Dask worker that reduces dlagg's ranks as fast as dlagg's own
worker processes, by keeping the text pandas infers as Python objects (pandas_text.py). It changes that one pandas
option in the worker's process, for every task the worker runs: preload it on workers started for dlagg."""

from __future__ import annotations

from typing import Any

from .pandas_text import keep_text_as_objects


def dask_setup(worker: Any) -> None:
    """Called by Dask once the worker starts (``--preload``)."""
    keep_text_as_objects()
