"""``dask worker --preload dlagg.dask_preload``: a Dask worker that reduces dlagg's ranks as fast as dlagg's own
worker processes (tuning.tune_dask_worker: pandas' text kept in Python strings, glibc's heap thresholds as glibc
adapts them). It changes those in the worker's process, for every task the worker runs: preload it on workers
started for dlagg."""

from __future__ import annotations

from typing import Any

from .ranks.tuning import tune_dask_worker


def dask_setup(worker: Any) -> None:
    """Called by Dask once the worker starts (``--preload``)."""
    tune_dask_worker()
