"""The HTML page's before/after section (report ``compare``, ``--baseline``; docs/compare.md).

What it shows: the verdict's paragraph; the key figures as cards (iteration time before and after,
their ratio with its confidence interval, the ops' GPU time per iteration, problems gone and new);
the iteration times of both profiles (every aggregated iteration, its box and mean) beside the
ratio with its interval; the change of each op type's GPU time per iteration as diverging bars;
the problems gone, new and still there, the new ones linked to their finding on this page; then
the report's tables (the compare table first).

Everything comes from the compare report's tables, read by their stable keys (row keys such as
``op_type:conv2d``, ``op_type_total`` and ``finding:amp``; field keys), never by display titles.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..reports.base import Report
from ..reports.figures import Table
from .html_page import Card, Page, escape, html_section
from .html_sections import COMPARE_ANCHOR, ORDER, WIDE, duration, found_in, ms_values, spec

SIDES = ("baseline", "current")
SIDE_COLOURS = ("#9c9c9c", "#4e79a7")
CHANGE_COLOURS = {"slower": "#d62728", "faster": "#2e7d32", "no significant change": "#6b6b6b"}
MORE, LESS = "more GPU time", "less GPU time"
DELTA_COLOURS = {MORE: "#d62728", LESS: "#2e7d32"}
TOP_OP_TYPES = 25  # op types drawn as bars, by largest change; every one is in the table
LABEL_ROOM = 0.14  # share of the bars' range added beyond them for the labels
OP_TYPE_PREFIX, OP_TYPE_TOTAL, FINDING_PREFIX = "op_type:", "op_type_total", "finding:"
NO_CHANGE = "no change (ratio 1)"


def table_of(report: Report, key: str) -> Table | None:
    return next((t for t in report.tables if t.key == key), None)


def number(value: object) -> float:
    """A figure as a float (NaN when missing, a bool or not a number)."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def signed(ns: float) -> str:
    return ("+" if ns > 0 else "") + duration(ns)


def detectors(text: object) -> list[str]:
    """The verdict's comma list of detector names."""
    return [d.strip() for d in str(text or "").split(",") if d.strip()]


def rows_with(frame: pd.DataFrame, prefix: str) -> pd.DataFrame:
    return frame[frame["key"].astype(str).str.startswith(prefix).to_numpy()]


# --- the verdict and key figures -----------------------------------------------------------------

def verdict_html(values: dict) -> str:
    change = str(values.get("change") or "")
    kind = {"slower": "slower", "faster": "faster"}.get(change, "same")
    return (f'<div class="verdict {kind}"><div class="verdict-head">{escape(change.capitalize() or "No verdict")}'
            f'</div><p>{escape(values.get("text") or "")}</p></div>')


def compare_cards(values: dict, frame: pd.DataFrame, profiles: pd.DataFrame) -> list[Card]:
    counts = dict(zip(profiles["side"].astype(str), profiles["aggregated_iterations"], strict=True))
    before, after = number(values.get("baseline_iteration_time_ns")), number(values.get("current_iteration_time_ns"))
    ratio, low, high = (number(values.get(k)) for k in ("ratio", "ratio_ci_low", "ratio_ci_high"))
    confidence = number(values.get("confidence_pct"))
    cards = [Card("Iteration time", f"{duration(before)} → {duration(after)}",
                  f"mean of {counts.get('baseline', 0)} and {counts.get('current', 0)} aggregated iterations")]
    if math.isfinite(ratio):
        cards.append(Card("Ratio (current / baseline)", f"{ratio:.3f}",
                          f"{confidence:.0f} % CI {low:.3f} to {high:.3f}: {values.get('change')}"
                          if math.isfinite(low) else "no confidence interval: too few iterations on a side"))
    total = frame[frame["key"].astype(str).to_numpy() == OP_TYPE_TOTAL]
    if len(total):
        b, c = number(total["baseline"].iloc[0]), number(total["current"].iloc[0])
        if math.isfinite(b) and math.isfinite(c):
            cards.append(Card("Op GPU time per iteration", f"{duration(b)} → {duration(c)}", f"{signed(c - b)}"))
    gone, new = detectors(values.get("problems_gone")), detectors(values.get("problems_new"))
    cards.append(Card("Problems", f"{len(gone)} gone, {len(new)} new", "expert-systems findings of the two profiles"))
    return cards


# --- iteration times and the ratio ---------------------------------------------------------------

def side_labels(profiles: pd.DataFrame) -> dict[str, str]:
    """Side -> its label on the charts: 'baseline: before.sqlite'."""
    sources = dict(zip(profiles["side"].astype(str), profiles["source"].astype(str), strict=True))
    return {side: f"{side}: {sources[side]}" if sources.get(side) else side for side in SIDES}


def samples_spec(samples: pd.DataFrame, values: dict, labels: dict[str, str]) -> dict:
    """Every aggregated iteration's time per side (a dot each, the box of their quartiles and range,
    the mean as a black tick) beside the ratio of the means with its confidence interval."""
    shown = [labels[s] for s in SIDES]
    data = [{"side": labels[str(s)], "it": int(i), "ranks": int(r), "ms": m}
            for s, i, r, m in zip(samples["side"], samples["iteration"], samples["ranks"],
                                  ms_values(samples["iteration_time_ns"].to_numpy()), strict=True)]
    means = [{"side": labels[s], "ms": ms_values(np.array([number(values.get(f"{s}_iteration_time_ns"))]))[0]}
             for s in SIDES]
    y = {"field": "side", "type": "nominal", "title": None, "sort": shown, "axis": {"labelLimit": 260}}
    x = {"field": "ms", "type": "quantitative", "title": "iteration time (ms)", "scale": {"zero": False}}
    colour = {"field": "side", "type": "nominal", "legend": None,
              "scale": {"domain": shown, "range": list(SIDE_COLOURS)}}
    times = {"width": 560, "height": {"step": 70}, "layer": [
        {"data": {"values": data}, "mark": {"type": "boxplot", "extent": "min-max", "size": 40, "opacity": 0.35},
         "encoding": {"y": y, "x": x, "color": colour}},
        {"data": {"values": data}, "mark": {"type": "circle", "size": 50, "opacity": 0.85, "stroke": "white",
                                            "strokeWidth": 0.5},
         "encoding": {"y": y, "x": x, "color": colour,
                      "tooltip": [{"field": "side"}, {"field": "it", "title": "iteration"},
                                  {"field": "ms", "title": "iteration time (ms)", "format": ",.3f"},
                                  {"field": "ranks", "title": "ranks (time: their mean)"}]}},
        {"data": {"values": means}, "mark": {"type": "tick", "thickness": 3, "size": 46, "color": "black"},
         "encoding": {"y": y, "x": x, "tooltip": [{"field": "side"},
                                                  {"field": "ms", "title": "mean (ms)", "format": ",.3f"}]}},
    ]}
    return spec(hconcat=[times, ratio_view(values)], resolve={"scale": {"color": "independent"}},
                description="iteration times before and after")


def ratio_view(values: dict) -> dict:
    ratio, low, high = (number(values.get(k)) for k in ("ratio", "ratio_ci_low", "ratio_ci_high"))
    change = str(values.get("change") or "")
    ends = [v for v in (ratio, low, high, 1.0) if math.isfinite(v)]
    pad = max(0.01, 0.15 * (max(ends) - min(ends)))
    x = {"field": "x", "type": "quantitative", "title": "ratio of the mean iteration times (current / baseline)",
         "scale": {"domain": [round(min(ends) - pad, 4), round(max(ends) + pad, 4)], "zero": False}}
    confidence = number(values.get("confidence_pct"))
    interval = (f"{confidence:.0f} % CI {low:.3f} to {high:.3f}" if math.isfinite(low)
                else "no confidence interval (too few iterations)")
    point = [{"x": round(ratio, 6), "lo": None if not math.isfinite(low) else round(low, 6),
              "hi": None if not math.isfinite(high) else round(high, 6), "change": change,
              "label": f"{ratio:.3f}: {change}" if math.isfinite(ratio) else "no ratio", "interval": interval}] \
        if math.isfinite(ratio) else []
    colour = CHANGE_COLOURS.get(change, "#6b6b6b")
    tooltip = [{"field": "x", "title": "ratio", "format": ".4f"}, {"field": "lo", "title": "CI low", "format": ".4f"},
               {"field": "hi", "title": "CI high", "format": ".4f"}, {"field": "change", "title": "verdict"}]
    return {"width": 300, "height": 70, "layer": [
        {"data": {"values": [{"x": 1.0, "label": NO_CHANGE}]}, "mark": {"type": "rule", "strokeDash": [4, 3],
                                                                        "color": "#555"},
         "encoding": {"x": x, "tooltip": [{"field": "label", "title": "line"}]}},
        {"data": {"values": [p for p in point if p["lo"] is not None]},
         "mark": {"type": "rule", "strokeWidth": 3, "color": colour},
         "encoding": {"x": dict(x, field="lo"), "x2": {"field": "hi"}, "y": {"value": 35}, "tooltip": tooltip}},
        {"data": {"values": point}, "mark": {"type": "point", "filled": True, "size": 120, "color": colour},
         "encoding": {"x": x, "y": {"value": 35}, "tooltip": tooltip}},
        {"data": {"values": point}, "mark": {"type": "text", "dy": -16, "fontWeight": "bold", "color": colour},
         "encoding": {"x": x, "y": {"value": 35}, "text": {"field": "label"}}},
        {"data": {"values": point}, "mark": {"type": "text", "dy": 18, "color": "#555"},
         "encoding": {"x": x, "y": {"value": 35}, "text": {"field": "interval"}}},
    ]}


# --- op types ------------------------------------------------------------------------------------

def op_type_delta_spec(op_types: pd.DataFrame) -> dict:
    """Diverging bars: the op types whose GPU time per iteration changed most, less time to the left."""
    delta = np.array([number(v) for v in op_types["delta"]], dtype=np.float64)
    moved = op_types[np.isfinite(delta) & (delta != 0)]
    moved_delta = delta[np.isfinite(delta) & (delta != 0)]
    order = np.argsort(-np.abs(moved_delta), kind="stable")[:TOP_OP_TYPES]
    top = moved.iloc[order]
    data = [{"name": str(n), "delta": d, "before": b, "after": a,
             "pct": None if not math.isfinite(number(p)) else round(number(p), 1), "note": str(o or ""),
             "change": MORE if number(dn) > 0 else LESS}
            for n, d, b, a, p, o, dn in zip(
                top["name"], ms_values(np.array([number(v) for v in top["delta"]])),
                ms_values(np.array([number(v) for v in top["baseline"]])),
                ms_values(np.array([number(v) for v in top["current"]])), top["delta_pct"], top["note"],
                top["delta"], strict=True)]
    order_names = [r["name"] for r in sorted(data, key=lambda r: r["delta"])]  # a few dozen op types
    # room beyond the longest bars for their labels
    lo, hi = min(0.0, *(r["delta"] for r in data)), max(0.0, *(r["delta"] for r in data))
    room = LABEL_ROOM * (hi - lo)
    x = {"field": "delta", "type": "quantitative", "title": "change of GPU time per iteration (ms, current − baseline)",
         "scale": {"domain": [lo - room if lo < 0 else 0.0, hi + room if hi > 0 else 0.0]}}
    return spec(width=WIDE - 420, height={"step": 20}, data={"values": data}, layer=[
        {"mark": {"type": "bar"},
         "encoding": {"y": {"field": "name", "type": "nominal", "sort": order_names, "title": None,
                            "axis": {"labelLimit": 360}},
                      "x": x,
                      "color": {"field": "change", "type": "nominal", "title": None,
                                "scale": {"domain": [LESS, MORE], "range": [DELTA_COLOURS[LESS], DELTA_COLOURS[MORE]]},
                                "legend": {"orient": "bottom"}},
                      "tooltip": [{"field": "name", "title": "op type"},
                                  {"field": "before", "title": "baseline (ms per iteration)", "format": ",.3f"},
                                  {"field": "after", "title": "current (ms per iteration)", "format": ",.3f"},
                                  {"field": "delta", "title": "change (ms)", "format": "+,.4~f"},
                                  {"field": "pct", "title": "change (%)", "format": "+.1f"},
                                  {"field": "note", "title": "note"}]}},
        # each bar's change written beyond its end
        *({"transform": [{"filter": f"datum.delta {test} 0"}],
           "mark": {"type": "text", "align": align, "dx": dx, "fontSize": 10, "color": "#333"},
           "encoding": {"y": {"field": "name", "type": "nominal", "sort": order_names}, "x": x,
                        "text": {"field": "delta", "format": "+,.4~f"}}}
          for test, align, dx in ((">", "left", 4), ("<", "right", -4))),
        {"data": {"values": [{"x": 0}]}, "mark": {"type": "rule", "color": "#333"},
         "encoding": {"x": {"field": "x", "type": "quantitative"}}},
    ])


# --- findings ------------------------------------------------------------------------------------

def finding_anchors(page: Page) -> dict[str, str]:
    """Detector -> the anchor of its finding in this page's expert-findings section (drawn after this one:
    the page shows the expert_systems report whenever it has it)."""
    expert = page.report("expert_systems")
    if expert is None:
        return {}
    names = expert.main.frame["detector"].astype(str).tolist()
    return {name: f"finding-{k + 1}" for k, name in reversed(list(enumerate(names)))}  # the first finding of each


def findings_html(values: dict, frame: pd.DataFrame, page: Page) -> str:
    rows = rows_with(frame, FINDING_PREFIX)
    by_detector = {str(k).removeprefix(FINDING_PREFIX): r for k, r in zip(rows["key"], rows.itertuples(index=False),
                                                                            strict=True)}
    anchors = finding_anchors(page)
    gone, new = detectors(values.get("problems_gone")), detectors(values.get("problems_new"))
    still = [d for d, r in by_detector.items() if found_in(r.baseline) and found_in(r.current)]

    def item(detector: str, link: bool) -> str:
        row = by_detector.get(detector)
        name = str(row.name) if row is not None else detector
        problem = f": {escape(row.note)}" if row is not None and row.note else ""
        stake = number(row.delta) if row is not None else math.nan
        change = f" ({signed(stake)} at stake per iteration)" if math.isfinite(stake) else ""
        see = f' <a href="#{anchors[detector]}">see the finding</a>' if link and detector in anchors else ""
        return f"<li><b>{escape(name)}</b>{problem}{escape(change)}{see}</li>"

    columns = []
    for title, kind, items, link in (("Gone", "gone", gone, False), ("New", "new", new, True),
                                     ("Still there", "still", still, True)):
        listed = "".join(item(d, link) for d in items) or "<li>none</li>"
        columns.append(f'<div class="changes-{kind}"><h3>{title} ({len(items)})</h3><ul>{listed}</ul></div>')
    return '<div class="changes">' + "".join(columns) + "</div>"


# --- the section ---------------------------------------------------------------------------------

@html_section("compare")
def compare_section(report: Report, page: Page) -> None:
    table = report.main
    frame = table.frame
    verdict, profiles, samples = (table_of(report, k) for k in ("verdict", "profiles", "iterations"))
    values = verdict.values if verdict is not None else {}
    labels = side_labels(profiles.frame) if profiles is not None else {s: s for s in SIDES}
    part = page.section(COMPARE_ANCHOR, "Before and after", order=ORDER["compare"],
                        intro=f"This profile ({labels['current']}) against the baseline ({labels['baseline']}): the "
                              "verdict, the iteration times it is drawn from, which op types' GPU time changed, and "
                              "the problems gone and new (the compare report; per-iteration figures, so that "
                              "profiles of different lengths compare).")
    part.html(verdict_html(values))
    if profiles is not None:
        part.cards(compare_cards(values, frame, profiles.frame))
    if samples is not None and not samples.frame.empty:
        part.chart(samples_spec(samples.frame, values, labels),
                   "left: every aggregated iteration's time (a dot each; the box spans the quartiles, the whiskers "
                   "the range, the black tick is the mean); right: the ratio of the means with its bootstrap "
                   "confidence interval (the verdict: a change when the interval excludes 1)")
    else:
        part.note("No iteration times to draw: a profile has no aggregated iteration (see the warnings above).")
    op_types = rows_with(frame, OP_TYPE_PREFIX)
    changed = np.array([number(v) for v in op_types["delta"]], dtype=np.float64)
    if np.isfinite(changed).any() and (changed[np.isfinite(changed)] != 0).any():
        shown = min(TOP_OP_TYPES, int((np.isfinite(changed) & (changed != 0)).sum()))
        part.chart(op_type_delta_spec(op_types),
                   f"the {shown} op types whose GPU time per iteration changed most, of {len(op_types)}; every op "
                   "type is in the compare table (section Op Types)")
    else:
        part.note("No op type changed its GPU time, or a profile has no op figures (no NVTX op ranges).")
    part.html(findings_html(values, frame, page))
    for shown_table in report.tables:  # compare, verdict, profiles, iteration times
        part.table(shown_table, report)
