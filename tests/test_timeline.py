"""The summary's GPU timeline figures against SQL on the export: the iteration chosen, the GPU work it
launched, the NVTX ranges around it and their nesting, and the bounds on its size."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.context import RankContext
from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.reports import build_reports
from dlagg.timeline.iterations import detect_iterations

from .conftest import recording

RANGE_TYPES = (59, 60, 70, 71)  # NVTX push/pop and start/end ranges


def sql(path: Path, query: str) -> pd.DataFrame:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return pd.read_sql_query(query, db)


def summary_tables(path: Path, **options) -> tuple[pd.Series, pd.DataFrame]:
    profile = load_profile(path)
    iterations = detect_iterations(profile, None, options.get("iter_start"), options.get("iter_stop"))
    built = build_reports(RankContext(profile, iterations, Options(nsys_database=path, **options)), ["summary"])
    summary = built["summary"]
    return summary.table("timeline_iteration").frame.iloc[0], summary.table("timeline").frame


def windows(path: Path) -> pd.DataFrame:
    """Iteration windows from the train_step ranges: iteration i is (end of i-1, end of i]."""
    ends = sql(path, "SELECT n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                     "WHERE coalesce(n.text, s.value) = 'train_step' ORDER BY n.end")["end"].to_numpy()
    first = sql(path, "SELECT min(start) AS s FROM (SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                      "SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION ALL SELECT start FROM NVTX_EVENTS)")
    starts = np.r_[int(first["s"].iloc[0]), ends[:-1]]
    return pd.DataFrame({"iteration": np.arange(len(ends)), "start": starts, "end": ends})


def launched(path: Path, start: int, end: int) -> pd.DataFrame:
    """Kernels, memcpys and memsets whose launching runtime call started in (start, end]."""
    parts = []
    for kind, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                        ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
        parts.append(sql(path, f"""
            SELECT '{kind}' AS kind, g.start - {start} AS offset, g.end - g.start AS duration, g.streamId AS stream
            FROM {table} g JOIN (SELECT correlationId, (globalTid >> 24) << 24 AS pid, min(start) AS api
                                 FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1, 2) r
              ON r.correlationId = g.correlationId AND r.pid = g.globalPid
            WHERE r.api > {start} AND r.api <= {end}"""))
    return pd.concat(parts, ignore_index=True)


def nested_levels(ranges: pd.DataFrame) -> np.ndarray:
    """For each range, how many other ranges of its thread enclose it (the same span: the earlier row)."""
    s, e, t = (ranges[c].to_numpy() for c in ("start", "end", "tid"))
    order = np.arange(len(s))
    encloses = ((s[:, None] <= s[None, :]) & (e[:, None] >= e[None, :]) & (t[:, None] == t[None, :])
                & ((s[:, None] != s[None, :]) | (e[:, None] != e[None, :]) | (order[:, None] < order[None, :])))
    np.fill_diagonal(encloses, False)
    return encloses.sum(axis=0)


@pytest.mark.parametrize("name", ["cuda_basic", "resnet_amp"])
def test_timeline_is_the_typical_iteration_with_everything_it_launched(name: str) -> None:
    path = recording(name)
    window, items = summary_tables(path)
    its = windows(path)
    duration = (its["end"] - its["start"]).to_numpy()
    chosen = int(np.argmin(np.abs(duration - np.median(duration))))
    assert window["iteration"] == chosen
    start, end = int(its["start"].iloc[chosen]), int(its["end"].iloc[chosen])
    assert (window["start_ns"], window["end_ns"], window["duration_ns"]) == (start, end, end - start)

    expected = launched(path, start, end)
    gpu = items[items["kind"] != "nvtx"]
    assert window["gpu_work"] == window["gpu_work_shown"] == len(expected) == len(gpu) > 0
    got = sorted(zip(gpu["kind"], gpu["start_offset_ns"].astype(int), gpu["duration_ns"].astype(int),
                     gpu["stream_id"].astype(int), strict=True))
    assert got == sorted(map(tuple, expected[["kind", "offset", "duration", "stream"]].itertuples(index=False)))
    assert (gpu["iteration"] == chosen).all()

    tids = sql(path, f"SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start > {start} "
                     f"AND start <= {end}")["globalTid"].to_numpy()
    ranges = sql(path, f"""
        SELECT n.start, n.end, n.globalTid AS tid, coalesce(n.text, s.value) AS name
        FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
        WHERE n.eventType IN {RANGE_TYPES} AND n.end >= n.start AND n.start < {end} AND n.end > {start}
        ORDER BY n.start, n.end DESC""")
    ranges = ranges[np.isin(ranges["tid"].to_numpy(), tids)]
    # emit_nvtx's per-call details ("aten::to, seq = 970, op_id = ..., sizes = ...") are not the range's name
    ranges["name"] = [re.split(r", (?:seq|op_id|sizes|input_op_ids) = ", n)[0] for n in ranges["name"]]
    nvtx = items[items["kind"] == "nvtx"]
    assert window["nvtx_ranges"] == window["nvtx_ranges_shown"] == len(ranges) == len(nvtx) > 0
    ours = sorted(zip(nvtx["start_offset_ns"].astype(int), nvtx["duration_ns"].astype(int), nvtx["name"],
                      nvtx["level"].astype(int), strict=True))
    theirs = sorted(zip(ranges["start"] - start, ranges["end"] - ranges["start"], ranges["name"],
                        nested_levels(ranges.reset_index(drop=True)), strict=True))
    assert ours == theirs
    step = nvtx[nvtx["name"] == "train_step"]
    assert len(step) == 1 and int(step["start_offset_ns"].iloc[0]) >= 0  # the step's range starts in its window


def test_timeline_keeps_the_longest_work_and_the_outermost_ranges(monkeypatch) -> None:
    path = recording("cuda_basic")
    _, full = summary_tables(path)
    monkeypatch.setattr("dlagg.reports.gpu_timeline.MAX_GPU_WORK", 3)
    monkeypatch.setattr("dlagg.reports.gpu_timeline.MAX_NVTX_RANGES", 2)
    window, items = summary_tables(path)
    gpu, nvtx = items[items["kind"] != "nvtx"], items[items["kind"] == "nvtx"]
    all_gpu, all_nvtx = full[full["kind"] != "nvtx"], full[full["kind"] == "nvtx"]
    assert (window["gpu_work"], window["gpu_work_shown"]) == (len(all_gpu), 3)
    assert (window["nvtx_ranges"], window["nvtx_ranges_shown"]) == (len(all_nvtx), 2)
    assert sorted(gpu["duration_ns"].astype(int)) == sorted(all_gpu["duration_ns"].astype(int))[-3:]
    outermost = all_nvtx.sort_values(["level", "duration_ns"], ascending=[True, False]).head(2)
    assert sorted(nvtx["name"]) == sorted(outermost["name"])
    assert nvtx["level"].max() <= outermost["level"].max()


def test_timeline_of_a_cpu_only_profile_has_ranges_only() -> None:
    window, items = summary_tables(recording("cpu_nvtx_numpy"))
    assert window["gpu_work"] == 0 and len(items) == window["nvtx_ranges"] > 0
    assert set(items["kind"]) == {"nvtx"}


def test_timeline_iteration_is_an_aggregated_one() -> None:
    window, items = summary_tables(recording("resnet_amp"), iter_start=10, iter_stop=12)
    assert 10 <= window["iteration"] <= 12
    assert (items["iteration"] == window["iteration"]).all()
