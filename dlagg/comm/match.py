"""Across ranks: clocks aligned, collectives matched, waits and late arrivals measured.

Contract: ``match_collectives(ranks) -> Matched`` with one `RankInput` per rank (its file, session
start and `RankComm`). Pure and small: only the ranks' collective tables are touched.

Clocks. Ranks in one file share its session clock. Each file counts from its own session start, so
files are first put on the first file's clock by ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, then
refined by the collectives: a collective completes together on every rank (NCCL's kernels end
within microseconds of each other), so a file's refinement is the median, over the collectives it
shares with the reference file, of (reference end - its end). Hosts' wall clocks can be
milliseconds apart; the refinement removes that. The residual spread of a collective is the spread
of its ends after alignment.

Figures of a matched collective (present on every rank): its true cost is its shortest duration
over ranks; a rank's wait is its duration minus that; a rank arrives when its kernel starts on the
GPU, and is late by its arrival minus the earliest rank's arrival; the last to arrive is the one
the others waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import stack_ranks
from .collectives import RankComm

KEY = ["iteration", "name", "stream", "k"]


@dataclass(frozen=True)
class RankInput:
    rank: int
    file: str  # the file's identity (its path): ranks of one file share a clock
    session_start_utc: int | None
    comm: RankComm


@dataclass(frozen=True)
class Matched:
    collectives: pd.DataFrame  # one row per (collective, rank): KEY, rank, nvtx, start, end (aligned), duration,
    #                            wait, lateness, last (bool), matched (bool: on every rank)
    offsets: dict[int, int]  # rank -> ns added to its timestamps to put them on the job clock
    residual: dict[int, float]  # rank -> median |aligned end - the collective's median end| (ns)
    unmatched: int  # collective instances not present on every rank
    warnings: tuple[str, ...]


def match_collectives(ranks: Sequence[RankInput]) -> Matched:
    table = (stack_ranks([r.comm.collectives for r in ranks], [r.rank for r in ranks]) if ranks
             else pd.DataFrame(columns=[*KEY, "rank"]))
    warnings: list[str] = []
    n_ranks = len(ranks)
    counts = table.groupby(KEY, sort=False)["rank"].transform("nunique") if len(table) else pd.Series(dtype=int)
    table["matched"] = (counts.to_numpy() == n_ranks) if len(table) else np.zeros(0, bool)
    unmatched = int((~table["matched"]).sum()) if len(table) else 0
    if unmatched and n_ranks > 1:
        warnings.append(f"collectives: {unmatched} communication kernel launch(es) have no counterpart on every rank "
                        "(ranks that launched a different number of collectives in an iteration); they are left out "
                        "of the wait figures")
    offsets, residual = _align(ranks, table, warnings)
    table["start"] = table["start"].to_numpy() + table["rank"].map(offsets).to_numpy()
    table["end"] = table["end"].to_numpy() + table["rank"].map(offsets).to_numpy()
    table["duration"] = table["end"] - table["start"]
    table["wait"] = np.zeros(len(table), dtype=np.int64)
    table["lateness"] = np.zeros(len(table), dtype=np.int64)
    table["last"] = np.zeros(len(table), dtype=bool)
    if n_ranks > 1 and table["matched"].any():
        m = table["matched"].to_numpy()
        grouped = table[m].groupby(KEY, sort=False)
        shortest = grouped["duration"].transform("min").to_numpy()
        earliest = grouped["start"].transform("min").to_numpy()
        table.loc[m, "wait"] = table.loc[m, "duration"].to_numpy() - shortest
        table.loc[m, "lateness"] = table.loc[m, "start"].to_numpy() - earliest
        # the last to arrive: the latest start (of equal starts, the highest rank), one per collective
        by_arrival = table[m].sort_values([*KEY, "start", "rank"], kind="stable")
        table.loc[by_arrival.groupby(KEY, sort=False).tail(1).index, "last"] = True
    table = table.sort_values([*KEY[:1], "start", "rank"], kind="stable").reset_index(drop=True)
    return Matched(table, offsets, residual, unmatched, tuple(warnings))


def _align(ranks: Sequence[RankInput], table: pd.DataFrame, warnings: list[str]) -> tuple[dict[int, int],
                                                                                            dict[int, float]]:
    """Per rank, the offset onto the first file's clock and the residual spread of its collectives."""
    files = list(dict.fromkeys(r.file for r in ranks))
    starts = {r.file: r.session_start_utc for r in ranks}
    reference = files[0]
    base: dict[str, int] = {}
    for f in files:  # files, not events
        start, reference_start = starts[f], starts[reference]
        if start is None or reference_start is None:
            base[f] = 0
            if f != reference:
                warnings.append(f"clocks: {f} does not record its session start time; its clock is aligned by "
                                "the collectives only" if len(table) else
                                f"clocks: {f} does not record its session start time and has no collectives to align "
                                "by; its times are taken as they are")
        else:
            base[f] = int(start) - int(reference_start)
    file_of = {r.rank: r.file for r in ranks}
    offsets = {r.rank: base[r.file] for r in ranks}
    if len(files) > 1 and len(table) and table["matched"].any():
        m = table[table["matched"].to_numpy()]
        ends = m.assign(end=m["end"].to_numpy() + m["rank"].map(offsets).to_numpy(), file=m["rank"].map(file_of))
        per_file = ends.groupby([*KEY, "file"], sort=False)["end"].median().unstack("file")
        if reference in per_file:  # per file: how much later its collectives end than the reference file's (median)
            later = per_file[reference].to_numpy()[:, None] - per_file.to_numpy()
            refine: dict[str, int] = {}
            for f, shift in zip(per_file.columns, later.T, strict=True):  # files, not events
                shift = shift[~np.isnan(shift)]
                if f != reference and len(shift):
                    refine[f] = int(np.round(np.median(shift)))
            for r in ranks:
                offsets[r.rank] += refine.get(r.file, 0)
    residual: dict[int, float] = {r.rank: 0.0 for r in ranks}
    if len(table) and table["matched"].any():
        m = table[table["matched"].to_numpy()]
        end = m["end"].to_numpy() + m["rank"].map(offsets).to_numpy()
        median = pd.Series(end).groupby([m[k].to_numpy() for k in KEY]).transform("median").to_numpy()
        spread = pd.Series(np.abs(end - median)).groupby(m["rank"].to_numpy()).median()
        residual.update({int(k): float(v) for k, v in spread.items()})
    return offsets, residual
