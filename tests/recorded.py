"""Independent facts about the nsys-2022.4 recordings: their `nsys stats` oracles and plain SQL.

Nothing here imports dlagg: expected values in the tests come from these functions, the
fixtures' meta.json, or hand-built exports, never from dlagg's own output.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd

from .conftest import recording, recording_dir

KEY_NODE = "train_step"  # the key node of every nsys-2022.4 recording (fixtures/README.md)
RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (ENUM_NSYS_EVENT_TYPE)
# Tables whose rows are events in dlagg's sense (docs/reports.md: iteration 0 starts at the earliest).
EVENT_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API")
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def meta(name: str) -> dict:
    return json.loads((recording_dir(name) / "meta.json").read_text())


def oracle(name: str, report: str) -> pd.DataFrame:
    """An `nsys stats` CSV of the recording, text kept as written ("None" stays "None")."""
    folder = recording_dir(name)
    path = folder / f"{name}_{report}.csv"
    if not path.exists():
        path = folder / f"{name}_{report}.csv.gz"
    return pd.read_csv(path, keep_default_na=False)


def sql(name: str, query: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(f"file:{recording(name)}?mode=ro&immutable=1", uri=True) as conn:
        rows = conn.execute(query, params).fetchall()
    conn.close()
    return rows


def sql_frame(name: str, query: str) -> pd.DataFrame:
    with sqlite3.connect(f"file:{recording(name)}?mode=ro&immutable=1", uri=True) as conn:
        frame = pd.read_sql_query(query, conn)
    conn.close()
    return frame


def short_names(name: str) -> dict[str, str]:
    """Kernel demangled name -> short name (the kernel's identity in DLProf's reports), from the export."""
    return dict(sql(name, """SELECT DISTINCT d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
                             JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName"""))


def tables(name: str) -> set[str]:
    return {t for (t,) in sql(name, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def named_ranges(name: str, text: str) -> np.ndarray:
    """(start, end) of every range named `text`, by end."""
    rows = sql(name, f"""SELECT e.start, e."end" FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                         WHERE COALESCE(e.text, s.value) = ? AND e.eventType IN {RANGE_TYPES} ORDER BY e."end" """,
               (text,))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def key_ends(name: str) -> np.ndarray:
    """End times of the key node's instances, in order (all on one thread in these recordings)."""
    threads = sql(name, f"""SELECT DISTINCT e.globalTid FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                            WHERE COALESCE(e.text, s.value) = ? AND e.eventType IN {RANGE_TYPES}""", (KEY_NODE,))
    assert len(threads) == 1, "premise: one thread carries the key node"
    return named_ranges(name, KEY_NODE)[:, 1]


def profile_start(name: str) -> int:
    """The earliest event: first start over the CUDA/OS runtime tables and the NVTX ranges."""
    present = tables(name)
    starts = [sql(name, f'SELECT MIN(start) FROM "{t}"')[0][0] for t in EVENT_TABLES if t in present]
    starts.append(sql(name, f"SELECT MIN(start) FROM NVTX_EVENTS WHERE eventType IN {RANGE_TYPES}")[0][0])
    return min(s for s in starts if s is not None)


def windows(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Iteration windows: (end of key instance i-1, end of key instance i], the first from the profile start."""
    ends = key_ends(name)
    return np.r_[profile_start(name), ends[:-1]], ends


def launched_work(name: str) -> np.ndarray:
    """(launch time, end) of every kernel, memcpy and memset: the launch time is the start of the CUDA call
    with its correlation id in its process (the earliest such call), else the work's own start."""
    present = tables(name)
    rows = []
    for t in GPU_TABLES:
        if t in present:
            rows += sql(name, f"""
                SELECT COALESCE((SELECT MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                                 WHERE r.correlationId = g.correlationId
                                   AND (r.globalTid & 0xFFFFFFFFFF000000) = g.globalPid), g.start), g."end"
                FROM "{t}" g""")
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def gpu_side_ends(name: str) -> np.ndarray:
    """Iteration ends with the GPU's work (docs/reports.md): iteration i ends at the later of train_step i's
    end and the end of the GPU work launched in its window (end of train_step i-1, end of train_step i],
    kept non-decreasing."""
    starts, ends = windows(name)
    work = launched_work(name)
    last = np.full(len(ends), np.iinfo(np.int64).min)
    for i, (lo, hi) in enumerate(zip(starts, ends, strict=True)):  # a few dozen iterations
        mine = work[((work[:, 0] > lo) | ((i == 0) & (work[:, 0] >= lo))) & (work[:, 0] <= hi)]
        if len(mine):
            last[i] = mine[:, 1].max()
    return np.maximum.accumulate(np.maximum(ends, last))


def calls_outside_every_range(name: str, before: int) -> dict[str, int]:
    """API name -> number of CUDA calls starting at or before `before` that no NVTX range of their thread
    encloses and no other call of their thread encloses (the outermost calls), read with SQL."""
    calls = sql_frame(name, """SELECT r.globalTid AS tid, r.start, r."end", s.value AS name
                               FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId""")
    ranges = sql_frame(name, f"""SELECT globalTid AS tid, start, "end" FROM NVTX_EVENTS
                                 WHERE eventType IN {RANGE_TYPES} AND "end" IS NOT NULL""")
    counts: dict[str, int] = {}
    for tid, mine in calls.groupby("tid"):  # a few threads
        mine = mine.sort_values(["start", "end"], ascending=[True, False])
        reach = np.maximum.accumulate(mine["end"].to_numpy())
        outer = np.r_[True, reach[:-1] < mine["end"].to_numpy()[1:]]
        blocks = merged(ranges.loc[ranges["tid"] == tid, ["start", "end"]].to_numpy(dtype=np.int64))
        start, end = mine["start"].to_numpy(), mine["end"].to_numpy()
        k = np.searchsorted(blocks[:, 0], start, side="right") - 1 if len(blocks) else np.full(len(mine), -1)
        inside = (k >= 0) & (end <= (blocks[np.maximum(k, 0), 1] if len(blocks) else 0))
        for api in mine["name"].to_numpy()[outer & ~inside & (start <= before)]:
            counts[api] = counts.get(api, 0) + 1
    return counts


def gpu_intervals(name: str) -> np.ndarray:
    """(start, end) of every kernel, memcpy and memset."""
    present = tables(name)
    rows = [r for t in GPU_TABLES if t in present for r in sql(name, f'SELECT start, "end" FROM "{t}"')]
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def merged(intervals: np.ndarray) -> np.ndarray:
    """Union of half-open intervals as sorted disjoint blocks."""
    if len(intervals) == 0:
        return intervals.reshape(0, 2)
    iv = intervals[np.argsort(intervals[:, 0], kind="stable")]
    reach = np.maximum.accumulate(iv[:, 1])
    new = np.r_[True, iv[1:, 0] > reach[:-1]]
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(iv) - 1]
    return np.column_stack((iv[new, 0], reach[last]))


def covered(intervals: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window [lo, hi): length of the intervals' union inside it."""
    blocks = merged(intervals)
    if len(blocks) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    overlap = np.minimum(blocks[None, :, 1], hi[:, None]) - np.maximum(blocks[None, :, 0], lo[:, None])
    return np.clip(overlap, 0, None).sum(axis=1)
