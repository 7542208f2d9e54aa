"""The HTML page's sections for dlagg's reports: what each shows and its Vega-Lite charts.

Each function below is registered for one report with ``html_page.html_section`` and reads only
report figures. The summary report gives three sections (summary, iterations, timeline); the
expert findings link each finding to the sections that show its evidence (DETECTOR_SECTIONS), and
to the before/after comparison when the problem is new since the baseline or was there too. The
roofline and compare reports' sections are in html_roofline.py and html_compare.py.
Charts are Vega-Lite specs with their data inline; the tooltips carry the numbers, the tables
under the charts every row. Derived display values (ms from ns, a share of a whole) are computed
here from the figures; nothing is estimated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..reports.base import Report
from ..reports.figures import Table
from ..reports.summary import PARTITION
from .html_page import Card, Page, escape, html_section

NS_PER_MS = 1e6
# Section places on the page (sections of reports without one follow, in registry order).
ORDER = {"run": 0, "summary": 10, "compare": 15, "findings": 20, "iterations": 30, "timeline": 40, "ranks": 50,
         "collectives": 55, "op-types": 60, "kernels": 70, "roofline": 75, "launches": 80}

CLASS_TITLES = {
    "tc_kernel": "Tensor Core kernels",
    "kernel": "other kernels",
    "memory": "memory (copies, memsets)",
    "dataloader": "dataloader",
    "io": "file/socket I/O",
    "cpu": "CPU (CUDA API calls, op ranges)",
    "other": "other (nothing traced)",
}
CLASS_COLOURS = {
    "tc_kernel": "#2e7d32",
    "kernel": "#8bc34a",
    "memory": "#1f77b4",
    "dataloader": "#ff9800",
    "io": "#9467bd",
    "cpu": "#e15759",
    "other": "#c7c7c7",
}
# Where each expert-systems detector's evidence is drawn (the sections on the page are linked): the
# roofline shows how far the dominant kernels and the op types without Tensor Cores are from their ceilings.
DETECTOR_SECTIONS = {
    "key_node": ("iterations",),
    "iteration_variation": ("iterations",),
    "underutilized_gpu": ("iterations",),
    "input_pipeline": ("iterations",),
    "launch_bound": ("timeline",),
    "host_sync": ("timeline",),
    "pageable_copies": ("timeline",),
    "exposed_copies": ("timeline",),
    "amp": ("op-types", "roofline"),
    "dominant_kernels": ("kernels", "roofline"),
    "straggler": ("ranks",),
    "communication": ("ranks",),
}
COMPARE_ANCHOR = "compare"
SEVERITY_COLOURS = {"high": "#d62728", "medium": "#ff9800", "low": "#9e9e9e"}
# Op types and kernels drawn as bars (all are in the tables under the charts).
TOP_OP_TYPES = 25
TOP_KERNELS = 20
# Timeline colours: op types with most kernel time in the iteration get their own colour.
OP_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
OTHER_OPS, NO_OP, NVTX_RANGE = "other op types", "kernels of no known op", "NVTX range"
FIXED_COLOURS = {OTHER_OPS: "#bab0ac", NO_OP: "#79706e", "memcpy": "#17becf", "memset": "#bcbd22",
                 NVTX_RANGE: "#c6dbef"}
LABEL_CHARS = 60  # kernel and op names on chart axes; the full name is in the tooltip and the table
WIDE, NARROW = 1000, 180  # chart widths (px)
VEGA_CONFIG = {"view": {"stroke": None}, "axis": {"labelFontSize": 11, "titleFontSize": 12},
               "legend": {"labelFontSize": 11, "titleFontSize": 12, "labelLimit": 320}}


def duration(ns: float) -> str:
    """A time for people: 15.8 ms, 1.24 s, 45.6 us."""
    if not math.isfinite(ns):
        return "n/a"
    if abs(ns) >= 10e9:
        return f"{ns / 1e9:,.1f} s"
    if abs(ns) >= 1e6:
        value = ns / 1e6
        return f"{value:,.{0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2}f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:,.1f} us"
    return f"{ns:,.0f} ns"


def percent(value: object) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.1f} %"


def short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def spec(**parts: object) -> dict:
    """A Vega-Lite spec with the page's shared look."""
    return {"config": VEGA_CONFIG, **parts}


def ms_values(values: np.ndarray) -> list[float | None]:
    """ns -> ms rounded to 0.1 us (JSON text stays short), missing values as null."""
    out = np.round(np.asarray(values, dtype=np.float64) / NS_PER_MS, 4)
    return [None if not math.isfinite(v) else float(v) for v in out.tolist()]


def of_rank(frame: pd.DataFrame, rank: int | None) -> pd.DataFrame:
    return frame if rank is None or "rank" not in frame else frame[frame["rank"].to_numpy() == rank]


def ranks_of(table: Table) -> list[int | None]:
    """The ranks a per-rank table holds ([None]: one rank's table, without a rank column)."""
    frame = table.frame
    return [int(r) for r in pd.unique(frame["rank"])] if "rank" in frame else [None]


def rank_title(rank: int | None) -> str:
    return "" if rank is None else f"rank {rank}: "


# --- summary: key figures, time partition, run tables --------------------------------------------

@html_section("summary")
def summary_section(report: Report, page: Page) -> None:
    """The summary's key figures and partition, then the per-iteration and timeline sections."""
    values = report.table("summary").values
    timing = report.table("iterations_summary").values
    kernels = report.table("all_kernels").frame.set_index("kernels")
    part = page.section("summary", "Summary", order=ORDER["summary"])
    tc = values.get("tc_kernel_utilization_pct")
    if not values.get("tc_eligible_kernel_time_ns", 1):  # 0.0 by definition (summary warning): not a measure
        tc = None
    ranks = ranks_of(report.table("iterations"))
    per_gpu = "" if ranks == [None] else f", mean over {len(ranks)} ranks"
    part.cards([
        Card("Iteration time", duration(float(timing["iteration_time_avg_ns"])),
             f"mean ± {duration(float(timing['iteration_time_std_ns']))} "
             f"over {timing['aggregated_iterations']} iterations"),
        Card("GPU utilization", percent(values["gpu_utilization_pct"]), f"time a kernel runs{per_gpu}"),
        Card("Tensor Core kernel utilization", percent(tc),
             "of the kernel time of Tensor-Core-eligible ops" if tc is not None else "no Tensor-Core-eligible op ran"),
        Card("Wall clock", duration(float(values["wall_clock_ns"])),
             f"iterations {timing['start_iteration']}–{timing['stop_iteration']} of {timing['total_iterations']} "
             f"(key node {timing['key_node']})"),
        Card("GPU time of kernels and copies", duration(float(kernels.loc["All kernels", "gpu_time_ns"])),
             f"{int(kernels.loc['All kernels', 'distinct_kernels']):,} distinct kernels (short names) and memory "
             "calls, "
             f"{int(kernels.loc['Kernels using TC', 'distinct_kernels']):,} on Tensor Cores"),
    ])
    part.chart(partition_spec(values), "Where the wall-clock time of the aggregated iterations goes: each instant "
               "counted once, in the first class active then (the summary's Duration % figures).")
    for key in ("summary", "iterations_summary", "all_kernels", "all_ops", "system"):
        part.table(report.table(key), report)
    iterations_section(report, page)
    timeline_section(report, page)


def partition_spec(values: dict[str, Any]) -> dict:
    rows, left = [], 0.0
    for k, name in enumerate(PARTITION):  # seven classes
        share = float(values[f"{name}_duration_pct"])
        rows.append({"cls": CLASS_TITLES[name], "pct": round(share, 2), "k": k, "mid": round(left + share / 2, 2),
                     "label": f"{share:.1f} %" if share >= 4 else ""})
        left += share
    colour = class_colour()
    return spec(width=WIDE, height=46, data={"values": rows}, layer=[
        {"mark": {"type": "bar", "height": 34},
         "encoding": {"x": {"field": "pct", "type": "quantitative", "stack": "zero", "scale": {"domain": [0, 100]},
                            "title": "% of the wall clock"},
                      "color": colour, "order": {"field": "k"},
                      "tooltip": [{"field": "cls", "title": "class"},
                                  {"field": "pct", "title": "%", "format": ".1f"}]}},
        {"mark": {"type": "text", "color": "white", "fontWeight": "bold"},
         "encoding": {"x": {"field": "mid", "type": "quantitative"}, "text": {"field": "label"}}},
    ])


def class_colour() -> dict:
    return {"field": "cls", "type": "nominal", "title": None,
            "scale": {"domain": [CLASS_TITLES[n] for n in PARTITION], "range": [CLASS_COLOURS[n] for n in PARTITION]},
            "legend": {"orient": "bottom", "columns": 4}}


# --- per-iteration time partition ----------------------------------------------------------------

def iterations_section(report: Report, page: Page) -> None:
    table = report.table("iterations")
    part = page.section("iterations", "Iterations", order=ORDER["iterations"],
                        intro="Where each iteration's time goes, every iteration of the profile; the shaded band "
                              "marks the aggregated iterations (--iter_start to --iter_stop), the ones every "
                              "report describes.")
    for rank in ranks_of(table):  # ranks, not events
        frame = of_rank(table.frame, rank)
        part.chart(iteration_spec(frame), f"{rank_title(rank)}time per iteration by class (ms); hover for the figures")
    part.table(table, report, caption="Time partition of every iteration")


def iteration_spec(frame: pd.DataFrame) -> dict:
    """Stacked bars (stacked here: rects from y0 to y1) per iteration, the aggregated range shaded."""
    iteration = frame["iteration"].to_numpy()
    aggregated = frame["aggregated"].to_numpy(dtype=bool)
    parts = np.stack([frame[f"{name}_ns"].to_numpy(dtype=np.float64) for name in PARTITION], axis=1) / NS_PER_MS
    tops = np.cumsum(parts, axis=1)
    total = ms_values(frame["duration_ns"].to_numpy())
    rows = [{"it": int(i), "agg": bool(a), "total": t, "cls": CLASS_TITLES[name], "ms": round(float(v), 4),
             "y0": round(float(top - v), 4), "y1": round(float(top), 4)}
            for i, a, t, values, ends in zip(iteration.tolist(), aggregated.tolist(), total, parts, tops, strict=True)
            for name, v, top in zip(PARTITION, values, ends, strict=True)]
    chosen = iteration[aggregated]
    lo, hi = (int(chosen.min()), int(chosen.max())) if len(chosen) else (0, -1)
    x_domain = [int(iteration.min()) - 0.5, int(iteration.max()) + 0.5] if len(iteration) else [0, 1]
    band = [{"a": lo - 0.5, "b": hi + 0.5, "label": f"aggregated: {lo}–{hi}"}] if hi >= lo else []
    x = {"field": "x0", "type": "quantitative", "title": "iteration",
         "scale": {"domain": x_domain, "nice": False, "zero": False}, "axis": {"format": "d", "tickMinStep": 1}}
    return spec(width=WIDE, height=260, layer=[
        {"data": {"values": band}, "mark": {"type": "rect", "color": "#e3ecfa"},
         "encoding": {"x": dict(x, field="a"), "x2": {"field": "b"}}},
        {"data": {"values": rows},
         "transform": [{"calculate": "datum.it - 0.42", "as": "x0"}, {"calculate": "datum.it + 0.42", "as": "x1"}],
         "mark": {"type": "rect"},
         "encoding": {"x": x, "x2": {"field": "x1"},
                      "y": {"field": "y0", "type": "quantitative", "title": "ms"}, "y2": {"field": "y1"},
                      "color": class_colour(),
                      "opacity": {"condition": {"test": "datum.agg", "value": 1}, "value": 0.4},
                      "tooltip": [{"field": "it", "title": "iteration"}, {"field": "cls", "title": "class"},
                                  {"field": "ms", "title": "ms", "format": ".3f"},
                                  {"field": "total", "title": "iteration time (ms)", "format": ".3f"},
                                  {"field": "agg", "title": "aggregated"}]}},
        {"data": {"values": band}, "mark": {"type": "text", "align": "left", "baseline": "top", "dx": 3, "dy": 3,
                                            "color": "#3c5a8a"},
         "encoding": {"x": dict(x, field="a"), "y": {"value": 0}, "text": {"field": "label"}}},
    ])


# --- GPU timeline of one iteration ----------------------------------------------------------------

def timeline_section(report: Report, page: Page) -> None:
    windows, items = report.table("timeline_iteration"), report.table("timeline").loaded()  # (rows in files: once)
    part = page.section("timeline", "GPU timeline", order=ORDER["timeline"],
                        intro="One typical iteration (the aggregated iteration closest to their median time): GPU "
                              "streams as lanes, kernels coloured by the op type that launched them, NVTX ranges "
                              "of the launching threads above (outermost first). Drag to pan, scroll to zoom, "
                              "hover for names and times.")
    top = top_op_types(items.frame)  # the same colours on every rank's timeline
    for rank in ranks_of(windows):  # ranks, not events
        window = of_rank(windows.frame, rank).iloc[0]
        rows = of_rank(items.frame, rank)
        kept = ""
        if window["gpu_work_shown"] < window["gpu_work"] or window["nvtx_ranges_shown"] < window["nvtx_ranges"]:
            kept = (f" (the longest {int(window['gpu_work_shown']):,} of {int(window['gpu_work']):,} GPU operations "
                    f"and {int(window['nvtx_ranges_shown']):,} of {int(window['nvtx_ranges']):,} NVTX ranges)")
        part.chart(timeline_spec(rows, int(window["duration_ns"]), top),
                   f"{rank_title(rank)}iteration {int(window['iteration'])}, {duration(float(window['duration_ns']))}"
                   f"{kept}")
    part.table(windows, report, caption="The iteration drawn")
    part.table(items, report, caption="Everything drawn: GPU work and NVTX ranges")


def lane_labels(rows: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Lane of each row ('thread 885 · level 2', 'GPU 0 · stream 7') and the lanes in drawing order."""
    nvtx = rows["kind"].to_numpy(dtype=object) == "nvtx"
    thread = rows["thread_id"].to_numpy(dtype=np.float64, na_value=np.nan)
    level = rows["level"].to_numpy(dtype=np.float64, na_value=np.nan)
    device = rows["device_id"].to_numpy(dtype=np.float64, na_value=np.nan)
    stream = rows["stream_id"].to_numpy(dtype=np.float64, na_value=np.nan)
    keys = pd.DataFrame({
        "group": np.where(nvtx, 0, 1),
        "a": np.where(nvtx, thread, device),
        "b": np.where(nvtx, level, stream),
    })
    distinct = keys.drop_duplicates().sort_values(["group", "a", "b"], kind="stable")
    names = [f"thread {int(a)} · level {int(b)}" if g == 0 else f"GPU {int(a)} · stream {int(b)}"
             for g, a, b in distinct.itertuples(index=False)]  # lanes, not events
    lookup = pd.Series(names, index=pd.MultiIndex.from_frame(distinct))
    labels = lookup.reindex(pd.MultiIndex.from_frame(keys)).to_numpy(dtype=object)
    return labels, names


def top_op_types(rows: pd.DataFrame) -> list[str]:
    """The op types with most kernel time in the timeline rows (one colour each)."""
    op_type = rows["op_type"].to_numpy(dtype=object)
    kernels = (rows["kind"].to_numpy(dtype=object) == "kernel") & (op_type != "")
    by_type = pd.Series(rows["duration_ns"].to_numpy(dtype=np.float64)[kernels]).groupby(op_type[kernels]).sum()
    return list(by_type.sort_values(ascending=False, kind="stable").index[:len(OP_PALETTE)])


def timeline_spec(rows: pd.DataFrame, window_ns: int, top: list[str]) -> dict:
    kind = rows["kind"].to_numpy(dtype=object)
    op_type = rows["op_type"].to_numpy(dtype=object)
    is_kernel = kind == "kernel"
    gpu_ns = rows["duration_ns"].to_numpy(dtype=np.float64)
    group = np.where(kind == "nvtx", NVTX_RANGE, np.where(is_kernel, np.where(
        op_type == "", NO_OP, np.where(np.isin(op_type, top), op_type, OTHER_OPS)), kind))
    lanes, order = lane_labels(rows)
    lane_index = pd.Series(range(len(order)), index=order).reindex(lanes).to_numpy()
    start = ms_values(rows["start_offset_ns"].to_numpy())
    end = ms_values(rows["start_offset_ns"].to_numpy() + rows["duration_ns"].to_numpy())
    names = rows["name"].to_numpy(dtype=object)
    label_from = 0.04 * window_ns  # NVTX ranges this long get their name written in
    data = []
    for lane, s, e, n, g, o, k, d in zip(lane_index.tolist(), start, end, names, group, op_type, kind, gpu_ns,
                                         strict=True):  # a few thousand rows: the JSON the chart reads
        item = {"l": lane, "s": s, "e": e, "n": str(n), "g": str(g), "k": str(k), "d": round(d / 1e3, 2)}
        if o:
            item["o"] = str(o)
        if k == "nvtx" and d >= label_from:
            item["t"] = str(n)
        data.append(item)
    domain = [*top, OTHER_OPS, NO_OP, "memcpy", "memset", NVTX_RANGE]
    colours = [*OP_PALETTE[:len(top)], *(FIXED_COLOURS[g] for g in domain[len(top):])]
    present = set(group.tolist())
    keep = [k for k, g in enumerate(domain) if g in present]
    y = {"field": "l", "type": "ordinal", "title": None,
         "axis": {"labelLimit": 220, "labelExpr": f"{json.dumps(order, ensure_ascii=False)}[datum.value]"}}
    # The iteration and everything it launched: ranges that enclose it (an epoch) are cut at the edges.
    gpu = kind != "nvtx"
    offsets = rows["start_offset_ns"].to_numpy(dtype=np.float64)
    lo = min(0.0, float(offsets[gpu].min()) if gpu.any() else 0.0) / NS_PER_MS
    hi = max(float(window_ns), float((offsets + gpu_ns)[gpu].max()) if gpu.any() else 0.0) / NS_PER_MS
    x = {"field": "s", "type": "quantitative", "title": "ms since the iteration's start",
         "scale": {"domain": [round(lo, 4), round(hi, 4)], "nice": False, "zero": False}}
    return spec(width=WIDE, height={"step": 15}, data={"values": data}, layer=[
        {"params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}],
         "mark": {"type": "bar", "stroke": "white", "strokeWidth": 0.3, "clip": True},
         "encoding": {"y": y, "x": x, "x2": {"field": "e"},
                      "color": {"field": "g", "type": "nominal", "title": "colour",
                                "scale": {"domain": [domain[k] for k in keep], "range": [colours[k] for k in keep]},
                                "legend": {"orient": "bottom", "columns": 3}},
                      "tooltip": [{"field": "n", "title": "name"}, {"field": "k", "title": "kind"},
                                  {"field": "o", "title": "op type"}, {"field": "s", "title": "start (ms)",
                                                                       "format": ".3f"},
                                  {"field": "d", "title": "duration (us)", "format": ",.2f"}]}},
        {"transform": [{"filter": "datum.t"}, {"calculate": f"max(datum.s, {round(lo, 4)})", "as": "ls"}],
         "mark": {"type": "text", "align": "left", "dx": 3, "fontSize": 10, "limit": 160, "clip": True},
         "encoding": {"y": y, "x": dict(x, field="ls"), "text": {"field": "t"}}},
        {"data": {"values": [{"x": 0.0}, {"x": round(window_ns / NS_PER_MS, 4)}]},
         "mark": {"type": "rule", "strokeDash": [4, 3], "color": "#555", "clip": True},
         "encoding": {"x": {"field": "x", "type": "quantitative"}}},
    ])


# --- op types and kernels -------------------------------------------------------------------------

def bar_panels(rows: list[dict], order: Sequence[object], label: str, panels: list[dict], tooltip: list[dict]) -> dict:
    """Horizontal bar panels side by side, one row per item in `order` (same y in every panel)."""
    views = []
    for k, panel in enumerate(panels):  # three panels
        encoding = {"y": {"field": "name", "type": "nominal", "sort": order, "title": None,
                          "axis": {"labelLimit": 380} if k == 0 else None},
                    "x": panel["x"], "tooltip": tooltip}
        if "color" in panel:
            encoding["color"] = panel["color"]
        views.append({"width": panel["width"], "height": {"step": 17}, "mark": {"type": "bar"}, "encoding": encoding})
    return spec(data={"values": rows}, hconcat=views, resolve={"scale": {"color": "independent"}},
                description=label)


@html_section("op_type")
def op_type_section(report: Report, page: Page) -> None:
    table = report.main
    frame = table.frame
    part = page.section("op-types", "Op types", order=ORDER["op-types"],
                        intro="GPU time, calls and Tensor Core Kernel Utilization % of each op type over the "
                              "aggregated iterations (the op_type report; the utilization as in the summary, from "
                              "the tensor report: Tensor Core kernel time of the type's Tensor-Core-eligible ops "
                              "over their kernel time).")
    if frame.empty:
        part.note("No op is known in this profile (no NVTX op ranges): see the warnings above.")
    else:
        # the report lists types by name (DLProf's order): the chart shows those with most GPU time
        top = frame.sort_values("gpu_time_total_ns", ascending=False, kind="stable").head(TOP_OP_TYPES)
        share = tc_share_by_op_type(page.report("tensor"))
        rows = [{"name": str(n), "gpu_ms": g, "calls": int(c), "ops": int(o),
                 "tc": None if n not in share.index else round(float(share[n]), 1)}
                for n, g, c, o in zip(top["op_type"], ms_values(top["gpu_time_total_ns"].to_numpy()), top["calls"],
                                      top["ops"], strict=True)]
        order = [r["name"] for r in rows]
        tooltip = [{"field": "name", "title": "op type"},
                   {"field": "gpu_ms", "title": "GPU time (ms)", "format": ",.3f"},
                   {"field": "calls", "title": "calls", "format": ","}, {"field": "ops", "title": "ops"},
                   {"field": "tc", "title": "Tensor Core Kernel Utilization %", "format": ".1f"}]
        part.chart(bar_panels(rows, order, "op types", [
            {"width": 520, "x": {"field": "gpu_ms", "type": "quantitative", "title": "GPU time (ms)"},
             "color": {"value": "#4e79a7"}},
            {"width": NARROW, "x": {"field": "calls", "type": "quantitative", "title": "calls"},
             "color": {"value": "#9c755f"}},
            {"width": NARROW, "x": {"field": "tc", "type": "quantitative", "title": "TC Kernel Utilization %",
                                    "scale": {"domain": [0, 100]}}, "color": {"value": "#2e7d32"}},
        ], tooltip), f"the {len(rows)} op types with most GPU time of {len(frame)}; every one is in the table")
    part.table(table, report)


def tc_share_by_op_type(tensor: Report | None) -> pd.Series:
    """Op type -> Tensor Core kernel time / kernel time of its eligible ops (%), from the tensor report."""
    if tensor is None or tensor.main.frame.empty:
        return pd.Series(dtype=np.float64)
    frame = tensor.main.frame
    sums = frame.groupby("op_type", sort=False)[["tc_kernel_time_ns", "kernel_time_ns"]].sum()
    sums = sums[sums["kernel_time_ns"] > 0]
    return 100.0 * sums["tc_kernel_time_ns"] / sums["kernel_time_ns"]


@html_section("kernel")
def kernel_section(report: Report, page: Page) -> None:
    table = report.main
    frame = table.frame
    part = page.section("kernels", "Top kernels", order=ORDER["kernels"],
                        intro="The kernels with most GPU time over the aggregated iterations, summed over the ops "
                              "that launched them (the table has one row per kernel and op).")
    if not frame.empty:
        # a kernel is its short name (the report's rows: one per short name and op)
        grouped = frame.groupby("kernel_name", sort=False, observed=True).agg(
            long=("long_kernel_name", "first"), gpu=("gpu_time_total_ns", "sum"), calls=("calls", "sum"),
            tc=("uses_tc", "max"))
        grouped = grouped.sort_values("gpu", ascending=False, kind="stable").head(TOP_KERNELS)
        rows = [{"name": f"{k + 1}. {short(str(n), LABEL_CHARS - 4)}", "full": str(f), "gpu_ms": g, "calls": int(c),
                 "avg_us": round(float(t) / float(c) / 1e3, 2) if c else None,
                 "tc": "Tensor Core" if bool(u) else "not Tensor Core"}
                for k, (n, f, g, c, t, u) in enumerate(zip(grouped.index, grouped["long"],
                                                           ms_values(grouped["gpu"].to_numpy()), grouped["calls"],
                                                           grouped["gpu"], grouped["tc"], strict=True))]
        order = [r["name"] for r in rows]
        colour = {"field": "tc", "type": "nominal", "title": None,
                  "scale": {"domain": ["Tensor Core", "not Tensor Core"], "range": ["#2e7d32", "#8c8c8c"]},
                  "legend": {"orient": "bottom"}}
        tooltip = [{"field": "full", "title": "kernel"},
                   {"field": "gpu_ms", "title": "GPU time (ms)", "format": ",.3f"},
                   {"field": "calls", "title": "calls", "format": ","},
                   {"field": "avg_us", "title": "mean duration (us)", "format": ",.2f"},
                   {"field": "tc", "title": "uses"}]
        part.chart(bar_panels(rows, order, "kernels", [
            {"width": 460, "x": {"field": "gpu_ms", "type": "quantitative", "title": "GPU time (ms)"}, "color": colour},
            {"width": NARROW, "x": {"field": "calls", "type": "quantitative", "title": "calls"},
             "color": {"value": "#9c755f"}},
            {"width": NARROW, "x": {"field": "avg_us", "type": "quantitative", "title": "mean duration (us)"},
             "color": {"value": "#76b7b2"}},
        ], tooltip), f"the {len(rows)} kernels with most GPU time; every kernel is in the table")
    part.table(table, report)


# --- ranks -------------------------------------------------------------------------------------------

RANK_PARTS = (("compute_kernel_ns", "compute kernels", "#4e79a7"),
              ("exposed_comm_ns", "communication not hidden by compute", "#e15759"),
              ("other_gpu_ns", "copies and memsets only", "#17becf"),
              ("gpu_idle_ns", "GPU idle", "#c7c7c7"))


def straggler_rank(page: Page, ranks: pd.DataFrame) -> int | None:
    """The rank the straggler finding names: the one that arrived last most often (its rule)."""
    expert = page.report("expert_systems")
    if expert is None or ranks.empty or not (expert.main.frame["detector"] == "straggler").any():
        return None
    return int(ranks["rank"].to_numpy()[int(np.argmax(ranks["arrived_last"].to_numpy()))])


@html_section("ranks")
def ranks_section(report: Report, page: Page) -> None:
    table, per_iteration = report.main, report.table("iterations")
    frame = table.frame
    part = page.section("ranks", "Ranks", order=ORDER["ranks"],
                        intro="Each rank's mean iteration split by what its GPU does, its waits at the collectives "
                              "and how late it arrives there (the ranks report).")
    straggler = straggler_rank(page, frame)
    expert = page.report("expert_systems")
    if straggler is not None and expert is not None:
        at = int(np.flatnonzero(expert.main.frame["detector"].to_numpy(dtype=object) == "straggler")[0])
        finding = expert.main.frame.iloc[at]
        part.html(f'<div class="callout"><b>Straggler: rank {straggler}.</b> {escape(finding["problem"])}. '
                  f'<a href="#finding-{at + 1}">See the finding</a>.</div>')
    rows = []
    for row in frame.itertuples(index=False):  # ranks, not events
        other = max(0.0, float(row.iteration_time_ns) - float(row.compute_kernel_ns) - float(row.exposed_comm_ns)
                    - float(row.gpu_idle_ns))
        values = {"compute_kernel_ns": row.compute_kernel_ns, "exposed_comm_ns": row.exposed_comm_ns,
                  "other_gpu_ns": other, "gpu_idle_ns": row.gpu_idle_ns}
        label = f"rank {row.rank}" + (" (straggler)" if row.rank == straggler else "")
        for k, (key, title, _) in enumerate(RANK_PARTS):
            rows.append({"rank": label, "part": title, "k": k, "ms": ms_values(np.array([values[key]]))[0],
                         "total": ms_values(np.array([row.iteration_time_ns]))[0]})
    colour = {"field": "part", "type": "nominal", "title": None,
              "scale": {"domain": [t for _, t, _ in RANK_PARTS], "range": [c for _, _, c in RANK_PARTS]},
              "legend": {"orient": "bottom", "columns": 4}}
    part.chart(spec(width=WIDE - 200, height={"step": 28}, data={"values": rows}, mark={"type": "bar"}, encoding={
        "y": {"field": "rank", "type": "nominal", "title": None, "sort": None},
        "x": {"field": "ms", "type": "quantitative", "stack": "zero", "title": "ms per iteration (mean)"},
        "color": colour, "order": {"field": "k"},
        "tooltip": [{"field": "rank"}, {"field": "part", "title": "part"}, {"field": "ms", "format": ".3f"},
                    {"field": "total", "title": "iteration time (ms)", "format": ".3f"}]}),
        "mean iteration of each rank: compute kernels, communication no compute overlaps, copies, GPU idle")
    per_rank = per_iteration.frame
    if not per_rank.empty:
        data = [{"rank": f"rank {r}", "it": int(i), "wait": w, "late": lt}
                for r, i, w, lt in zip(per_rank["rank"], per_rank["iteration"],
                                       ms_values(per_rank["comm_wait_ns"].to_numpy()),
                                       ms_values(per_rank["launch_lateness_ns"].to_numpy()), strict=True)]
        for field, title in (("wait", "communication wait (ms)"), ("late", "launch lateness (ms)")):
            part.chart(spec(width=WIDE - 200, height=200, data={"values": data}, mark={"type": "bar"}, encoding={
                "x": {"field": "it", "type": "ordinal", "title": "iteration", "axis": {"labelAngle": 0}},
                "xOffset": {"field": "rank", "type": "nominal"},
                "y": {"field": field, "type": "quantitative", "title": title},
                "color": {"field": "rank", "type": "nominal", "title": None, "legend": {"orient": "bottom"}},
                "tooltip": [{"field": "rank"}, {"field": "it", "title": "iteration"},
                            {"field": field, "title": title, "format": ".3f"}]}),
                f"{title} per iteration and rank, summed over the iteration's collectives")
    part.table(table, report)
    part.table(per_iteration, report)


@html_section("collectives")
def collectives_section(report: Report, page: Page) -> None:
    table = report.main
    frame = table.frame
    part = page.section("collectives", "Collectives", order=ORDER["collectives"],
                        intro="Every collective of the aggregated iterations on every rank: how long each rank "
                              "waited for the others (its duration minus the shortest rank's).")
    if frame.empty:
        part.note("No communication kernel ran in the aggregated iterations.")
    else:
        sums = frame.groupby(["operation", "rank"], sort=True)["wait_ns"].sum().reset_index()
        data = [{"op": str(o), "rank": f"rank {r}", "wait": w}
                for o, r, w in zip(sums["operation"], sums["rank"], ms_values(sums["wait_ns"].to_numpy()), strict=True)]
        part.chart(spec(width=WIDE - 300, height={"step": 18}, data={"values": data}, mark={"type": "bar"}, encoding={
            "y": {"field": "op", "type": "nominal", "title": None}, "yOffset": {"field": "rank", "type": "nominal"},
            "x": {"field": "wait", "type": "quantitative", "title": "wait (ms, aggregated iterations)"},
            "color": {"field": "rank", "type": "nominal", "title": None, "legend": {"orient": "bottom"}},
            "tooltip": [{"field": "op", "title": "operation"}, {"field": "rank"},
                        {"field": "wait", "title": "wait (ms)", "format": ".3f"}]}),
            "total wait per operation and rank")
    part.table(table, report)


# --- iteration report: the launches of the iteration drawn ----------------------------------------

@html_section("iteration")
def iteration_report_section(report: Report, page: Page) -> None:
    table = report.main.loaded()  # (its rows may be in files: read once)
    frame = table.frame
    summary = page.report("summary")
    part = page.section("launches", "Kernel launches", order=ORDER["launches"])
    mask = pd.Series(np.zeros(len(frame), dtype=bool))
    chosen = []
    if summary is not None and not frame.empty:
        for window in summary.table("timeline_iteration").frame.itertuples(index=False):  # ranks, not events
            rank = getattr(window, "rank", None)
            hit = frame["iteration"].to_numpy() == window.iteration
            if rank is not None and "rank" in frame:
                hit &= frame["rank"].to_numpy() == rank
            mask |= hit
            chosen.append(f"{rank_title(rank)}iteration {window.iteration}")
    if not mask.any() and len(frame):  # no timeline: the first aggregated iteration's launches
        first = frame["iteration"].to_numpy()[0]
        mask = pd.Series(frame["iteration"].to_numpy() == first)
        chosen = [f"iteration {first}"]
    part.text(f"The iteration report has one row per kernel launch ({len(frame):,} rows); this page holds the "
              f"launches of the iteration the timeline draws ({', '.join(chosen) or 'none'}). Every launch is in "
              f"{page.info.profile_name}_{report.file_suffix}.csv (--formats=csv).")
    part.table(table, report, rows=mask, subset=f"the rows of {', '.join(chosen)}" if chosen else "")


# --- expert findings ---------------------------------------------------------------------------------

@html_section("expert_systems")
def expert_section(report: Report, page: Page) -> None:
    findings, detectors = report.main, report.table("detectors")
    frame = findings.frame
    summary = page.report("summary")
    typical = float(summary.table("iterations_summary").values["iteration_time_avg_ns"]) if summary else float("nan")
    part = page.section("findings", "Expert findings", order=ORDER["findings"],
                        intro="Problems found, ranked by the time at stake per iteration (findings may overlap: "
                              "their times do not add up). Each links to the part of this page that shows it.")
    if frame.empty:
        part.note("No problem found: every detector that could run stayed silent (see the detectors table).")
    else:
        stake = frame["time_at_stake_ns"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
        data = [{"name": f"{k + 1}. {short(str(p), 70)}", "problem": str(p), "ms": ms_values(np.array([s]))[0],
                 "severity": str(v) or "low"}
                for k, (p, s, v) in enumerate(zip(frame["problem"], stake, frame["severity"], strict=True))]
        part.chart(spec(width=WIDE - 500, height={"step": 22}, data={"values": data}, mark={"type": "bar"}, encoding={
            "y": {"field": "name", "type": "nominal", "sort": None, "title": None, "axis": {"labelLimit": 460}},
            "x": {"field": "ms", "type": "quantitative", "title": "time at stake per iteration (ms)"},
            "color": {"field": "severity", "type": "nominal", "title": "severity",
                      "scale": {"domain": list(SEVERITY_COLOURS), "range": list(SEVERITY_COLOURS.values())}},
            "tooltip": [{"field": "problem"}, {"field": "ms", "title": "ms per iteration", "format": ".3f"},
                        {"field": "severity"}]}), "time at stake per typical iteration")
        since = baseline_states(page)
        for k, row in enumerate(frame.itertuples(index=False)):  # one per finding
            part.html(finding_html(k, row, stake[k], typical, page, since.get(str(row.detector), "")))
    part.table(findings, report)
    part.table(detectors, report)


def found_in(value: object) -> bool:
    """A compare Findings row's Baseline or Current cell: the problem was found there (None: could not run)."""
    return isinstance(value, (bool, np.bool_)) and bool(value)


def baseline_states(page: Page) -> dict[str, str]:
    """Detector -> how its finding stands against the baseline, from the compare report (empty without
    one): new since the baseline, or found in the baseline too."""
    compare = page.report("compare")
    if compare is None or not page.has_section(COMPARE_ANCHOR):
        return {}
    verdict = next((t for t in compare.tables if t.key == "verdict"), None)
    new = str(verdict.values.get("problems_new") or "") if verdict is not None else ""
    states = {}
    rows = compare.main.frame
    found = rows[rows["key"].astype(str).str.startswith("finding:").to_numpy()]
    for key, before, after in zip(found["key"], found["baseline"], found["current"], strict=True):  # a dozen
        if found_in(before) and found_in(after):
            states[str(key).removeprefix("finding:")] = "found in the baseline too"
    states.update({d: "new since the baseline" for d in (p.strip() for p in new.split(",")) if d})
    return states


def finding_html(k: int, row: Any, stake: float, typical: float, page: Page, since: str = "") -> str:
    detector = str(row.detector)
    targets = [t for t in DETECTOR_SECTIONS.get(detector, ()) if page.has_section(t)]
    link = "".join(f' <a class="see" href="#{t}">see {escape(t.replace("-", " "))}</a>' for t in targets)
    if since:
        link += f' <a class="see" href="#{COMPARE_ANCHOR}">{escape(since)}: see before and after</a>'
    at_stake = ("time at stake not estimated" if not math.isfinite(stake) else
                f"{duration(stake)} per iteration" + (f" ({100 * stake / typical:.0f} % of the mean iteration)"
                                                     if math.isfinite(typical) and typical > 0 else ""))
    severity = str(row.severity) or "low"
    extra = "".join(f"<dt>{escape(title)}</dt><dd>{escape(value)}</dd>" for title, value in (
        ("Evidence", row.evidence), ("Estimate", row.estimate), ("Iterations", row.iterations), ("Ops", row.ops),
        ("Kernels", row.kernels), ("Ranks", getattr(row, "ranks", ""))) if value)
    return (f'<div class="finding" id="finding-{k + 1}" data-detector="{escape(detector)}"><div class="finding-head">'
            f'<span class="badge {escape(severity)}">{escape(severity)}</span> <b>{k + 1}. {escape(row.problem)}</b>'
            f"</div><p>{escape(at_stake)}{link}</p><p><b>Recommendation:</b> {escape(row.recommendation)}</p>"
            f"<details><summary>evidence and details</summary><dl>{extra}</dl></details></div>")
