"""HTML: one self-contained page, ``<output_path>/<profile_name>_report.html``, with plots and tables.

Contract: ``write(reports, out_dir, info)`` gets the requested reports and the ones in ``needs``
(summary, kernel, op_type, tensor, expert_systems; ranks and collectives when there are several
ranks) and writes one page showing each: a section per report (``html_page.SECTIONS``; any other
report gets a generic section of sortable tables), in a fixed order (run, summary, before/after,
findings, iterations, timeline, ranks, op types, kernels, roofline, then the rest). The roofline
report is shown when it was asked for (``--ncu_report`` with ``--reports=all`` or ``roofline``), the
compare report with ``--baseline``.

Self-contained and offline: the page's style, its script, the charts' data and the Vega,
Vega-Lite and vega-embed libraries (``vl_convert.javascript_bundle()``) are inside it; it fetches
nothing. Building that JavaScript bundle takes vl-convert 2-3 s, so it is kept in the user's cache
folder (``options.cache_folder``: ``$DLAGG_CACHE_DIR``, else ``$XDG_CACHE_HOME/dlagg`` or ``~/.cache/dlagg``),
one file per vl-convert version; where
that folder cannot be written the bundle is built on every run (docs/html.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path

from ..limits import js_engine_fits, js_engine_refused
from ..options import cache_folder
from ..reports.base import Report, one_per_cause
from .base import RunInfo, Writer, atomic_write, writer
from .html_page import Page, body, escape, key_value_rows, render_sections
from .html_sections import ORDER

PAGE_SUFFIX = "report"
# Reports drawn first, then the others in registry order; the expert findings last, so that their
# links go to sections that exist.
FIRST = ("summary",)
LAST = ("expert_systems",)


def _natural(text: str) -> list[int | str]:
    """Sort key that puts rank2 before rank10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _bundle_path() -> Path:
    import vl_convert

    return cache_folder() / f"vega-embed-bundle-vl-convert-{getattr(vl_convert, '__version__', 'unknown')}.js"


def charts_refused() -> str | None:
    """The warning of a page written without its charts: the Vega libraries are not in the cache and the engine
    that builds them cannot start under this run's address-space limit (limits.js_engine_refused); else None."""
    if _bundle_path().is_file():
        return None
    return js_engine_refused("html: the page's charts are not drawn (its tables are complete)")


@functools.cache
def vega_bundle() -> str:
    """The Vega, Vega-Lite and vega-embed JavaScript (globals vega, vegaLite, vegaEmbed), from the
    user's cache when an earlier run built it; empty when `charts_refused` (the page then says so in place of
    each chart)."""
    import vl_convert

    path = _bundle_path()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    if not js_engine_fits():
        return ""
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # its stub calls the optional snippet required
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, bundle)
    except OSError:  # no writable cache: built again next time, nothing lost
        pass
    return bundle


def bundle_notice() -> str:
    """Which libraries the page carries, and their licences (the bundle itself has no notices)."""
    import vl_convert

    return (f"/* Vega {vl_convert.get_vega_version()}, Vega-Lite {vl_convert.get_vegalite_versions()[-1]} and "
            f"vega-embed {vl_convert.get_vega_embed_version()} with their dependencies, bundled by vl-convert "
            f"{getattr(vl_convert, '__version__', '')}. Vega, Vega-Lite, vega-embed: BSD-3-Clause, Copyright (c) "
            "the University of Washington Interactive Data Lab; d3 modules: ISC, Copyright Mike Bostock. */\n")


def asset(name: str) -> str:
    return resources.files(__package__).joinpath("html_assets").joinpath(name).read_text(encoding="utf-8")


def report_order(reports: Sequence[Report]) -> list[str]:
    names = [r.name for r in reports]
    middle = [n for n in names if n not in FIRST and n not in LAST]
    return [*(n for n in FIRST if n in names), *middle, *(n for n in LAST if n in names)]


def run_section(page: Page, info: RunInfo, warnings: Sequence[str]) -> None:
    first, last = info.iteration_window_ns
    part = page.section("run", "Run", order=ORDER["run"])
    part.html(key_value_rows([
        ("Profile", info.profile_name),
        ("Source", info.source),
        ("Nsight Systems version", info.nsys_version or "(not recorded in the export)"),
        ("GPUs" if len(info.ranks) == 1 else "Ranks", ", ".join(info.gpu_names) or "(none recorded)"),
        ("Key node", f"{info.key_node or '(not found)'}: {info.key_node_reason}"),
        ("Aggregated iterations", f"{info.iter_start} to {info.iter_stop} of {info.iterations_total} "
                                  f"({(last - first) / 1e6:,.3f} ms)"),
        ("Reports", ", ".join(info.reports)),
        ("dlagg version", info.dlagg_version),
    ]))
    if warnings:  # every one: the box is the run's stderr warnings, one per cause
        items = "".join(f"<li>{escape(w)}</li>" for w in warnings)
        part.html(f'<details class="warnings" open><summary>{len(warnings)} warning{"s" if len(warnings) > 1 else ""}'
                  f"</summary><ul>{items}</ul></details>")


def page_pieces(reports: Sequence[Report], info: RunInfo) -> Iterator[str]:
    """The page's text in pieces (the JavaScript bundle is the largest, about 0.9 MB)."""
    page = Page(reports, info)
    run_section(page, info, list(info.warnings) or one_per_cause(w for r in reports for w in r.warnings))
    render_sections(page, report_order(reports))
    title = f"dlagg report: {info.profile_name}"
    yield ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
           '<meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<meta name="generator" content="dlagg {escape(info.dlagg_version)}"><title>{escape(title)}</title>'
           f"<script>{asset('errors.js')}</script><style>{asset('page.css')}</style></head>\n<body>"
           f'<header><h1>{escape(title)}</h1><p class="sub">{escape(info.source)}</p></header><main>')
    yield from body(page)
    yield '</main>\n<script type="application/json" id="dlagg-data">'
    yield page.data_json()
    yield "</script>\n<script>"
    yield bundle_notice()
    yield vega_bundle()
    yield f"</script>\n<script>{asset('page.js')}</script>\n</body></html>\n"


@writer("html")
class HtmlWriter(Writer):
    """One self-contained HTML page with the reports' plots and tables."""

    per_report = False
    needs = ("summary", "kernel", "op_type", "tensor", "expert_systems", "ranks", "collectives")

    def targets(self, file_suffixes: Sequence[str], out_dir: Path, profile_name: str) -> list[Path]:
        return [out_dir / f"{profile_name}_{PAGE_SUFFIX}.html"]

    def write(self, reports: Sequence[Report], out_dir: Path, info: RunInfo,
              rows: Mapping[str, Sequence[Path]] | None = None,
              pieces: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
        path = out_dir / f"{info.profile_name}_{PAGE_SUFFIX}.html"
        atomic_write(path, page_pieces(reports, info))  # an OSError is named by the staging (output/staging.py)
        return [path]

    def how_to_open(self, written: Sequence[Path]) -> str | None:
        """The job's page (the one nearest the output folder: with --per_rank each rank's page is written in
        rank<N>/ below it, in whatever order the processes finish) and where the ranks' own pages are."""
        pages = [p for p in written if p.suffix == ".html"]
        if not pages:
            return None
        job = min(pages, key=lambda p: (len(p.parts), str(p)))
        line = f"open {job} in a browser (works offline)"
        ranks = sorted((p for p in pages if p != job), key=lambda p: (len(p.parts), _natural(str(p))))
        if not ranks:
            return line
        where = str(ranks[0].parent) if len(ranks) == 1 else f"{ranks[0].parent} to {ranks[-1].parent.name}"
        return f"{line}; each rank's own page: {ranks[0].name} in {where}"
