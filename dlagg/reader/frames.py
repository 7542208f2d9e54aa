"""Frames and columns that the SQLite readers (the nsys export's, ``reader/nsys.py``, and the nvprof database's,
``reader/nvprof.py``) build alike."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .schema import Table


def empty_frame(table: Table) -> pd.DataFrame:
    """`table`'s declared columns, with their dtypes and no row."""
    return pd.DataFrame({c.name: np.empty(0, dtype=c.dtype) for c in table.columns})


def time_range(frames: dict[str, pd.DataFrame]) -> tuple[int, int]:
    """The profile's (start, end): its first event's start, and the last end or start of any event."""
    starts = [f["start"].min() for f in frames.values() if len(f)]
    ends = [f["end"].max() for f in frames.values() if len(f)]  # NULL ends read as -1: harmless here
    if not starts:
        return 0, 0
    return int(min(starts)), int(max(max(ends), max(starts)))


__all__ = ["empty_frame", "time_range"]
