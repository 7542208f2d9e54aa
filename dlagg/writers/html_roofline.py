"""The HTML page's roofline section (report ``roofline``, ``--ncu_report``; docs/roofline.md).

What it shows: the step's key figures as cards (kernels profiled and matched, achieved FLOP/s, the
summary's model FLOPs utilization when the run has it, the bounds that hold most GPU time); the
hierarchical roofline per kernel and per op type, drawn in the page by Vega-Lite from the specs the
report's PNGs were drawn from (``report.images[i].spec``) with pan and zoom and every figure of a
dot in its tooltip; the op types' share of GPU time and of their binding ceiling as bars; then the
report's tables (kernels first). The specs are the report's own: this module only makes them
interactive (``interactive``), it draws no roofline of its own, so the page and the PNGs agree.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd

from ..reports.base import Report
from .html_page import Card, Page, html_section
from .html_sections import NARROW, ORDER, bar_panels, duration, percent

# Colours of the binding ceilings in the op-type bars: memory levels as the roofline picture draws
# them, compute pipes in two dark tones (tensor, SIMT).
BOUND_COLOURS = {"DRAM": "#d62728", "L2": "#2ca02c", "L1": "#1f77b4"}
TENSOR_COLOUR, SIMT_COLOUR, NO_BOUND = "#6a3d9a", "#8c564b", "no bound (no work counted)"
NO_BOUND_COLOUR = "#c7c7c7"
TOP_OP_TYPES = 25  # op types drawn as bars; every one is in the table
TOP_BOUNDS = 3  # bounds named on the card
# Added to the report's spec for the page: pan (drag) and zoom (wheel) on both log axes.
ZOOM = {"name": "roofline_zoom", "select": {"type": "interval", "encodings": ["x", "y"]}, "bind": "scales"}
DOT_NUMBERS = [{"field": "ai", "title": "arithmetic intensity (FLOP/byte)", "format": ",.4~g"},
               {"field": "flops", "title": "achieved FLOP/s", "format": ".4~s"}]


def interactive(spec: dict) -> dict:
    """The report's roofline spec made for the page: its ``$schema`` (a web address, which the page
    never names) dropped, pan and zoom on the plot, the dot's intensity and FLOP/s in its tooltip, and
    every layer clipped to the plot so that zoomed-out marks stay inside it."""
    out = copy.deepcopy(spec)
    out.pop("$schema", None)
    for view in out.get("vconcat", [out]):  # the plot and its numbered list
        layers = view.get("layer")
        if not layers:
            continue
        for layer in layers:  # a handful of layers
            mark = layer["mark"] if isinstance(layer["mark"], dict) else {"type": layer["mark"]}
            layer["mark"] = dict(mark, clip=True)
            if mark["type"] == "point":
                encoding = layer["encoding"]
                encoding["tooltip"] = [*encoding.get("tooltip", []), *DOT_NUMBERS]
                layer["params"] = [ZOOM]
    return out


def _number(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return number


def bound_shares(kernels: pd.DataFrame) -> pd.Series:
    """Bound -> % of the step's GPU time of the kernels it binds, largest first."""
    if kernels.empty:
        return pd.Series(dtype=np.float64)
    bound = kernels["bound"].astype(object).where(kernels["bound"].notna(), "").astype(str)
    shares = kernels["gpu_time_pct"].astype("Float64").fillna(0.0).astype(np.float64)
    return shares.groupby(bound.replace("", NO_BOUND).to_numpy()).sum().sort_values(ascending=False, kind="stable")


def roofline_cards(report: Report, page: Page) -> list[Card]:
    step = report.table("step").values
    kernels = report.table("kernels").frame
    matched = step.get("matched")
    cards = [Card("Kernels profiled", f"{int(step['kernels']):,}",
                  f"{int(matched):,} matched to nsys kernels in {int(step.get('steps') or 0)} iteration(s)"
                  if matched is not None else "no nsys export: rates from ncu's replay times")]
    flop_per_s, flops = _number(step.get("achieved_flop_per_s")), _number(step.get("flops"))
    if math.isfinite(flop_per_s):
        cards.append(Card("Achieved over the kernel time", f"{flop_per_s / 1e12:,.1f} TFLOP/s",
                          f"{flops / 1e9:,.1f} GFLOP in {duration(_number(step.get('rate_time_ns')))} of kernels "
                          "(one step)"))
    summary = page.report("summary")
    values = summary.table("summary").values if summary is not None else {}
    mfu = _number(values.get("mfu_pct"))
    if math.isfinite(mfu):
        cards.append(Card("Model FLOPs utilization", percent(mfu),
                          f"{_number(values.get('achieved_tflop_per_s')):,.2f} of "
                          f"{_number(values.get('peak_tflop_per_s')):,.1f} TFLOP/s ({values.get('peak')}) over the "
                          "mean iteration"))
    shares = bound_shares(kernels)
    if len(shares):
        cards.append(Card("Most GPU time bound by", str(shares.index[0]),
                          ", ".join(f"{b} {v:.0f} %" for b, v in shares.head(TOP_BOUNDS).items()) + " of GPU time"))
    return cards


def bound_colour(bounds: list[str]) -> dict:
    colours = [BOUND_COLOURS.get(b, NO_BOUND_COLOUR if b == NO_BOUND else
                                 TENSOR_COLOUR if b.startswith("Tensor") else SIMT_COLOUR) for b in bounds]
    return {"field": "bound", "type": "nominal", "title": "binding ceiling",
            "scale": {"domain": bounds, "range": colours}, "legend": {"orient": "bottom"}}


def op_type_bars(frame: pd.DataFrame) -> dict:
    """The op types with most GPU time: share of GPU time, % of the binding ceiling, achieved TFLOP/s."""
    top = frame.sort_values("gpu_time_pct", ascending=False, kind="stable").head(TOP_OP_TYPES)
    bound = top["bound"].astype(object).where(top["bound"].notna(), "").astype(str).replace("", NO_BOUND)
    rows = [{"name": str(n), "share": _round(s, 2), "pct": _round(p, 2), "tflops": _round(f / 1e12, 4),
             "bound": str(b), "kernels": int(k), "ai": _round(a, 4)}
            for n, s, p, f, b, k, a in zip(top["op_type"], top["gpu_time_pct"], top["pct_of_ceiling"],
                                           top["achieved_flop_per_s"], bound, top["kernels"],
                                           top["ai_dram_flop_per_byte"], strict=True)]
    colour = bound_colour(list(dict.fromkeys(bound)))
    highest = max((r["pct"] for r in rows if r["pct"] is not None), default=0.0)
    tooltip = [{"field": "name", "title": "op type"}, {"field": "kernels", "title": "kernels"},
               {"field": "share", "title": "% of GPU time", "format": ".1f"}, {"field": "bound", "title": "bound"},
               {"field": "pct", "title": "% of ceiling", "format": ".1f"},
               {"field": "tflops", "title": "achieved TFLOP/s", "format": ",.3f"},
               {"field": "ai", "title": "AI DRAM (FLOP/B)", "format": ",.4~g"}]
    return bar_panels(rows, [r["name"] for r in rows], "roofline per op type", [
        {"width": 360, "x": {"field": "share", "type": "quantitative", "title": "% of GPU time"}, "color": colour},
        {"width": 300, "x": {"field": "pct", "type": "quantitative", "title": "% of its binding ceiling",
                             "scale": {"domain": [0, max(100.0, highest)]}}, "color": dict(colour, legend=None)},
        {"width": NARROW, "x": {"field": "tflops", "type": "quantitative", "title": "achieved TFLOP/s"},
         "color": {"value": "#4e79a7"}},
    ], tooltip)


def _round(value: object, digits: int) -> float | None:
    number = _number(value)
    return round(number, digits) if math.isfinite(number) else None


@html_section("roofline")
def roofline_section(report: Report, page: Page) -> None:
    part = page.section("roofline", "Roofline", order=ORDER["roofline"],
                        intro="How close each kernel and op type comes to the GPU's limits, from Nsight Compute's "
                              "counters of one training step (the roofline report). Log-log: arithmetic intensity "
                              "against achieved FLOP/s; one dot per kernel (or op type) and memory level, sized by "
                              "its share of GPU time, under one diagonal per memory level and one roof per compute "
                              "pipe. Drag to pan, scroll to zoom, double-click to reset; hover a dot for its "
                              "figures.")
    part.cards(roofline_cards(report, page))
    images = {image.key: image for image in report.images if image.spec}
    if "kernels" in images:
        part.chart(interactive(images["kernels"].spec),
                   "per kernel and launch shape: the numbered dots (most GPU time) are listed under the chart; the "
                   "kernel table below has every row")
    else:
        part.note("The roofline report has no picture of its kernels (see the warnings above).")
    op_types = report.table("op_types")
    if "op_types" in images and not op_types.frame.empty:
        part.chart(interactive(images["op_types"].spec),
                   "per op type: each op type's kernels summed (their FLOPs, bytes and times), then the same formulas")
        part.chart(op_type_bars(op_types.frame),
                   f"the {min(TOP_OP_TYPES, len(op_types.frame))} op types with most GPU time of "
                   f"{len(op_types.frame)}: their share of GPU time, how close they come to their binding ceiling, "
                   "their FLOP rate; every op type is in the table")
    else:
        part.note("No op-type view: the ncu kernels have no ops (the roofline of an ncu report alone, without the "
                  "run's nsys export; see the warnings above).")
    for table in report.tables:  # kernels, op types, ceilings, the step, Tensor Core disagreements
        part.table(table, report)
