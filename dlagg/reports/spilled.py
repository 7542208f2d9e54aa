"""A table's rows kept in files instead of memory: the rows of a report's biggest tables (its ``spill``: one row
per kernel launch, the GPU timeline) of a rank reduced by a process of the local pool, so that the job's parent,
which merges every rank's reports, never holds them (docs/ranks.md).

Contract:

- ``Table.spill(path) -> Table`` (reports/figures.py): the table with its rows saved in the file `path` (a
  rank's process writes it, in the run's staging folder) and none in memory: its frame is empty (the columns
  and their types), its length is the rows'. ``spill(frame, path)`` saves them: pickled frames of at most
  BATCH_ROWS rows, one after the other, so that a part of the table is read without the rest.
- ``Spilled``: where the rows are (each batch: file, byte offset, rows, source number) and `finish`, what a
  merge does to the rows of each source when they are read (a rank column, a shift to the job's clock, Op IDs
  over the job): ``Spilled.read(first, stop)`` gives rows first..stop-1, finished.
- ``Table.frame`` of a spilled table reads every row (a writer that needs them all); ``Table.rows(first,
  stop)`` reads some (a part of a big table written by a pool process).

The files are the run's: they go with the staging folder when the run ends, after the writes.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

BATCH_ROWS = 65_536  # rows per pickled frame in a file (a part of a big table is read batch by batch)

Finish = Callable[[pd.DataFrame, int], pd.DataFrame]  # (rows of source k, k) -> the table's rows


@dataclass(frozen=True)
class Batch:
    path: str
    offset: int  # byte offset of its pickle in the file
    rows: int
    source: int  # which of the merged tables it belongs to (the `finish` argument)


@dataclass(frozen=True)
class Spilled:
    batches: tuple[Batch, ...]
    finish: Finish | None = None

    @property
    def count(self) -> int:
        return sum(b.rows for b in self.batches)

    def read(self, first: int, stop: int) -> list[pd.DataFrame]:
        """Rows first..stop-1, finished, as frames (one per batch they span)."""
        frames, at = [], 0
        for batch in self.batches:  # batches, not rows
            lo, hi = max(first - at, 0), min(stop - at, batch.rows)
            at += batch.rows
            if lo >= hi:
                continue
            try:
                with open(batch.path, "rb") as handle:
                    handle.seek(batch.offset)
                    frame = pickle.load(handle)
            except FileNotFoundError:
                raise RuntimeError(f"{batch.path}: the rows of this table were kept in the run's staging folder, "
                                   "which went when the run ended; read them from the written report") from None
            frame = frame.iloc[lo:hi] if (lo, hi) != (0, batch.rows) else frame
            frames.append(self.finish(frame, batch.source) if self.finish else frame)
        return frames


def stacked(spills: list[Spilled], finish: Finish) -> Spilled:
    """The rows of `spills` one after the other, as sources 0, 1, ... (a merge's tables); `finish` applied to each
    source's when read."""
    return Spilled(tuple(replace(b, source=k) for k, s in enumerate(spills) for b in s.batches), finish)


def spill(frame: pd.DataFrame, path: Path) -> Spilled:
    """The rows of `frame` saved in the file `path` (see the module docstring), and where they are."""
    batches = []
    with open(path, "wb") as handle:
        for first in range(0, len(frame), BATCH_ROWS):  # batches of rows
            part = frame.iloc[first:first + BATCH_ROWS]
            batches.append(Batch(str(path), handle.tell(), len(part), 0))
            pickle.dump(part, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return Spilled(tuple(batches))
