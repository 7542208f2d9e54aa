"""The hierarchical roofline picture as a Vega-Lite spec, and its PNG.

Contract: ``chart_spec(table, ceilings, label=..., title=...) -> dict`` (a Vega-Lite v5 spec with
its data inlined), ``render_png(spec) -> bytes``. `table` is a ``model.kernel_table`` or
``model.op_type_table`` frame: one dot per row and memory level, at (arithmetic intensity at that
level, achieved FLOP/s), sized by the row's share of GPU time; the rows with the most GPU time
are labelled. Lines: one diagonal per memory level (bandwidth x intensity) and one horizontal
roof per compute pipe (FP64, FP32, FP16 SIMT and the tensor types the work used; FP16 tensor
when none was used, to show what Tensor Cores would allow), at the median of the per-kernel
ceilings (or the peaks file's values).

PNG rendering uses ``vl-convert-python`` (Vega's own renderer compiled in, no browser), imported
only when a PNG is asked for; the same spec can be embedded in an HTML page with vega-embed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import OutputError
from .measure import Ceilings
from .metrics import CEILINGS, MEMORY_LEVELS

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
LEVEL_COLOURS = {"DRAM": "#d62728", "L2": "#2ca02c", "L1": "#1f77b4"}
ROOF_COLOUR = "#444444"
SIMT_ROOFS = ("FP64", "FP32", "FP16")
WIDTH, HEIGHT = 860, 520
LABEL_BELOW = 0.45  # factor on FLOP/s: about 20 px lower on the default height


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _roofs(table: pd.DataFrame, typical: dict[str, float]) -> list[str]:
    used = {p for label in table.get("Tensor Precision", pd.Series(dtype=object)).fillna("") if label
            for p in str(label).split("+")}
    tensor = [f"Tensor {p}" for p in sorted(used)] or ["Tensor FP16"]
    return [r for r in (*tensor, *SIMT_ROOFS) if r in typical]


def _points(table: pd.DataFrame, label: str, levels: Iterable[str]) -> tuple[list[dict], pd.DataFrame]:
    flops = table["Achieved FLOP/s"].to_numpy(dtype=np.float64)
    drawable = table[np.isfinite(flops) & (flops > 0)]
    points = []
    for level in levels:  # three levels, not events
        ai = drawable[f"AI {level} (FLOP/B)"].to_numpy(dtype=np.float64)
        ok = np.isfinite(ai) & (ai > 0)
        part = drawable[ok]
        points += [{"name": str(n), "level": level, "ai": float(a), "flops": float(f), "share": float(s),
                    "bound": str(b), "pct": None if pd.isna(p) else round(float(p), 1)}
                   for n, a, f, s, b, p in zip(part[label], ai[ok], part["Achieved FLOP/s"],
                                               part["% of GPU Time"].fillna(0.0), part["Bound"],
                                               part["% of Ceiling"], strict=True)]
    return points, drawable


@dataclass(frozen=True)
class _Extent:
    """The chart's axes: log scales wide enough for every dot, ceiling and ridge point."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    top_roof: float  # the highest compute roof (where the memory diagonals stop)

    @classmethod
    def of(cls, points: list[dict], typical: dict[str, float], roofs: list[str], levels: tuple[str, ...]) -> _Extent:
        ais = [p["ai"] for p in points] or [1.0]
        rates = [p["flops"] for p in points] or [typical.get(roofs[0], 1e12) if roofs else 1e12]
        top_roof = max((typical[r] for r in roofs), default=max(rates))
        ridges = [top_roof / typical[lv] for lv in levels] + [typical[r] / typical[lv] for r in roofs for lv in levels]
        x_lo = 10 ** math.floor(math.log10(min(ais + ridges) / 3))
        x_hi = 10 ** math.ceil(math.log10(max(ais + ridges) * 3))
        return cls(x_lo, x_hi, 10 ** math.floor(math.log10(min(rates) / 3)), 10 ** math.ceil(math.log10(top_roof * 2)),
                   top_roof)

    def axes(self) -> tuple[dict, dict]:
        x = {"field": "x", "type": "quantitative",
             "scale": {"type": "log", "domain": [self.x_lo, self.x_hi], "clamp": True},
             "axis": {"title": "Arithmetic intensity (FLOP/byte)", "format": "~g",
                      "values": _decades(self.x_lo, self.x_hi)}}
        y = {"field": "y", "type": "quantitative",
             "scale": {"type": "log", "domain": [self.y_lo, self.y_hi], "clamp": True},
             "axis": {"title": "Performance (FLOP/s)", "format": "~s", "values": _decades(self.y_lo, self.y_hi)}}
        return x, y


def _ceiling_lines(extent: _Extent, typical: dict[str, float], roofs: list[str],
                   levels: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """(line points, their labels): a diagonal per memory level, a flat roof per compute ceiling."""
    lines, texts = [], []
    for level in levels:  # a few memory levels
        bandwidth = typical[level]
        start = max(extent.x_lo, extent.y_lo / bandwidth)
        lines += [{"ceiling": level, "x": start, "y": bandwidth * start},
                  {"ceiling": level, "x": extent.top_roof / bandwidth, "y": extent.top_roof}]
        texts.append({"text": f"{level} {_si(bandwidth, 'B/s')}", "x": start * 1.15, "y": bandwidth * start * 1.15,
                      "colour": LEVEL_COLOURS[level], "align": "left"})
    fastest = typical[levels[-1]] if levels else extent.top_roof / extent.x_lo
    for roof in roofs:  # a few compute roofs
        peak = typical[roof]
        lines += [{"ceiling": roof, "x": peak / fastest, "y": peak}, {"ceiling": roof, "x": extent.x_hi, "y": peak}]
        unit = CEILINGS[roof].unit.removesuffix("/s")
        texts.append({"text": f"{roof} {_si(peak, unit + '/s')}", "x": extent.x_hi / 1.5, "y": peak * 1.08,
                      "colour": ROOF_COLOUR, "align": "right"})
    return lines, texts


def _numbers(drawable: pd.DataFrame, points: list[dict], label: str, top: int) -> tuple[list[dict], list[dict]]:
    """(numbers drawn by the dots, the listing under the chart) of the `top` rows by GPU time."""
    ranked = drawable.sort_values("% of GPU Time", ascending=False, kind="stable").head(top)
    first_level: dict[str, dict] = {}
    for p in points:  # the leftmost level's dot carries the number
        first_level.setdefault(p["name"], p)
    numbered = [(i + 1, row) for i, (_, row) in enumerate(ranked.iterrows()) if str(row[label]) in first_level]
    # every other number below its dot: neighbours in a cluster (the GEMMs) stay readable
    labels = [{"text": str(i), "x": first_level[str(row[label])]["ai"],
               "y": first_level[str(row[label])]["flops"] * (1.0 if i % 2 else LABEL_BELOW)} for i, row in numbered]
    legend = [{"rank": i, "text": f"{i}  {_short(str(row[label]), 90)}: {row['% of GPU Time']:.1f} % of GPU time"
               + (f", {row['Bound']}-bound at {row['% of Ceiling']:.0f} % of its ceiling" if row["Bound"] else "")}
              for i, row in numbered]
    return labels, legend


def _layers(extent: _Extent, lines: list[dict], texts: list[dict], points: list[dict], labels: list[dict],
            roofs: list[str], levels: tuple[str, ...]) -> list[dict]:
    """The plot's layers: ceiling lines, their labels, the dots, the numbers."""
    x, y = extent.axes()
    line_colours = [LEVEL_COLOURS[lv] for lv in levels] + [ROOF_COLOUR] * len(roofs)
    colour_scale = {"domain": list(levels), "range": [LEVEL_COLOURS[lv] for lv in levels]}
    return [
        {"data": {"values": lines}, "mark": {"type": "line", "strokeWidth": 1.5, "clip": True},
         "encoding": {"x": x, "y": y, "detail": {"field": "ceiling"},
                      "color": {"field": "ceiling", "type": "nominal", "legend": None,
                                "scale": {"domain": [*levels, *roofs], "range": line_colours}},
                      "strokeDash": {"condition": {"test": f"indexof({list(levels)!r}, datum.ceiling) < 0",
                                                   "value": [6, 3]}, "value": [1, 0]}}},
        *({"data": {"values": [t for t in texts if t["align"] == align]},
           "mark": {"type": "text", "align": align, "baseline": "bottom", "fontSize": 11, "clip": True},
           "encoding": {"x": dict(x, field="x"), "y": dict(y, field="y"), "text": {"field": "text"},
                        "color": {"field": "colour", "type": "nominal", "scale": None}}}
          for align in ("left", "right")),
        {"data": {"values": points},
         "mark": {"type": "point", "filled": True, "opacity": 0.65, "stroke": "black", "strokeWidth": 0.3},
         "encoding": {"x": dict(x, field="ai"), "y": dict(y, field="flops"),
                      "color": {"field": "level", "type": "nominal", "scale": colour_scale,
                                "legend": {"title": "Intensity at"}},
                      "shape": {"field": "level", "type": "nominal", "scale": {"domain": list(levels)},
                                "legend": None},
                      "size": {"field": "share", "type": "quantitative", "scale": {"range": [12, 900]},
                               "legend": {"title": "% of GPU time"}},
                      "tooltip": [{"field": "name"}, {"field": "level"}, {"field": "bound", "title": "Bound"},
                                  {"field": "pct", "title": "% of Ceiling"},
                                  {"field": "share", "title": "% of GPU time", "format": ".1f"}]}},
        {"data": {"values": labels},
         "mark": {"type": "text", "align": "left", "dx": 7, "dy": -7, "fontSize": 12, "fontWeight": "bold"},
         "encoding": {"x": dict(x, field="x"), "y": dict(y, field="y"), "text": {"field": "text"}}},
    ]


def chart_spec(table: pd.DataFrame, ceilings: Ceilings, *, label: str = "Kernel Name", title: str = "Roofline",
               top: int = 8, levels: tuple[str, ...] = MEMORY_LEVELS) -> dict:
    """A Vega-Lite spec of the hierarchical roofline of `table`'s rows (see the module docstring)."""
    typical = ceilings.typical()
    levels = tuple(level for level in levels if level in typical)
    roofs = _roofs(table, typical)
    points, drawable = _points(table, label, levels)
    left_out = len(table) - len(drawable)
    left_time = float(table["% of GPU Time"].fillna(0).sum() - drawable["% of GPU Time"].fillna(0).sum())
    extent = _Extent.of(points, typical, roofs, levels)
    lines, texts = _ceiling_lines(extent, typical, roofs, levels)
    labels, legend = _numbers(drawable, points, label, top)
    sources = sorted({ceilings.sources.get(r, "").split(":")[0] for r in (*levels, *roofs)} - {""})
    subtitle = [f"One dot per {label.lower()} and memory level, sized by its share of GPU time; "
                f"ceilings: {', '.join(sources) or 'none known'} (median over kernels)"]
    if left_out:
        subtitle.append(f"{left_out} row(s) without FLOPs not drawn ({left_time:.1f} % of GPU time)")
    plot = {"width": WIDTH, "height": HEIGHT, "layer": _layers(extent, lines, texts, points, labels, roofs, levels),
            "resolve": {"scale": {"color": "independent", "size": "independent", "shape": "independent"}}}
    listing = {"width": WIDTH, "height": 16 * max(len(legend), 1), "data": {"values": legend},
               "mark": {"type": "text", "align": "left", "fontSize": 11},
               "encoding": {"y": {"field": "rank", "type": "ordinal", "axis": None}, "x": {"value": 0},
                            "text": {"field": "text"}}}
    return {
        "$schema": SCHEMA,
        "title": {"text": title, "subtitle": subtitle, "anchor": "start"},
        "background": "white",
        "vconcat": [plot, listing] if legend else [plot],
        "config": {"legend": {"orient": "right"}, "view": {"stroke": None}},
    }


def _decades(lo: float, hi: float) -> list[float]:
    """Ticks and grid lines at the powers of ten only (log axes otherwise grid every minor tick)."""
    return [10.0 ** e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]


def _short(name: str, width: int = 34) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def render_png(spec: dict, scale: float = 1.5) -> bytes:
    """The spec as PNG bytes (vl-convert-python, no browser)."""
    try:
        import vl_convert
    except ImportError:
        raise OutputError("the roofline PNG needs the vl-convert-python package: pip install vl-convert-python") \
            from None
    return vl_convert.vegalite_to_png(spec, scale=scale)
