"""The HTML page and TensorBoard's dashboards in a real browser: headless Chromium over DevTools.

Checks that the page renders offline without a script error, that every chart drew, that its
tables sort, filter and download the report file's rows, that the roofline and before/after charts
show their figures on hover (and the roofline zooms); that TensorBoard's custom-scalars charts
draw at most MAX_LINES lines each and its text tables never break a word letter by letter. The
screenshots taken on the way are the ones docs/ and the README show: they are written to
``$DLAGG_SCREENSHOTS`` when set (``DLAGG_SCREENSHOTS=docs/screenshots python -m pytest
tests/test_browser.py`` refreshes them), else to a temporary folder.

Skipped, with the reason, where Chromium is not installed (Debian: ``apt-get install chromium``);
the multi-rank views read the bundled fixtures/nsys-2022.4-multi recording (conftest's ``multi``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlagg.options import Baseline, Options
from dlagg.pipeline import run
from dlagg.writers.tensorboard_writer import MAX_LINES

from .browser import Browser, Page, chromium_path
from .conftest import BUNDLED, RECORDINGS, ROOT, fixture_path, ncu_csv, recording
from .test_tensorboard_server import tensorboard

CHROMIUM = chromium_path()
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install "
                                 "chromium; or set DLAGG_CHROMIUM): the browser tests need it")]
ITER_START = 2  # the first two iterations are warm-up: the pictures show the aggregated range apart
MAX_PNG_BYTES = 400_000  # keeps the README and docs light
RENDER_TIMEOUT_S = 90
# Every section of these reports draws at least one chart on the page.
CHART_SECTIONS = {"summary", "findings", "iterations", "timeline", "op-types", "kernels"}
SECTIONS_JS = """Array.from(document.querySelectorAll('section')).map(s => {
  const r = s.getBoundingClientRect();
  const table = s.querySelector('.table-box');
  return {id: s.id, x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height,
          charts: Number(s.dataset.charts), tablesTop: table ? table.getBoundingClientRect().top + scrollY : null};
})"""
# Where (in the viewport) a chart draws the first mark whose datum has `field`: the chart scrolled into
# view, its Vega scenegraph walked (group offsets added up) to the mark's centre; and, while the mouse
# moves, the item under it (window.dlagg.hovered: its datum, or null).
MARK_JS = """(function (id, field) {
  const view = window.dlagg.views[id];
  function walk(mark, ox, oy) {
    for (const item of mark.items || []) {
      if (mark.marktype === 'group') {
        for (const child of item.items || []) {
          const found = walk(child, ox + (item.x || 0), oy + (item.y || 0));
          if (found) return found;
        }
      } else if (item.datum && item.datum[field] !== undefined && item.datum[field] !== null && item.bounds) {
        return {x: ox + (item.bounds.x1 + item.bounds.x2) / 2, y: oy + (item.bounds.y1 + item.bounds.y2) / 2};
      }
    }
    return null;
  }
  document.getElementById(id).scrollIntoView({block: 'center'});
  window.dlagg.hovered = null;
  view.addEventListener('pointermove', function (event, item) {
    window.dlagg.hovered = item && item.datum ? JSON.parse(JSON.stringify(item.datum)) : null;
  });
  const found = walk(view.scenegraph().root, 0, 0);
  if (!found) return null;
  const canvas = view.container().querySelector('canvas').getBoundingClientRect();
  const origin = view.origin(), padding = view.padding();
  return {x: canvas.left + padding.left + origin[0] + found.x, y: canvas.top + padding.top + origin[1] + found.y};
})"""
TOOLTIP_JS = """(() => { const t = document.getElementById('vg-tooltip-element');
  return t && t.classList.contains('visible') ? t.textContent : ''; })()"""
# Elements inside TensorBoard's web components (shadow roots), found from the document.
DEEP_JS = """function deepAll(root, selector) {
  const found = Array.from(root.querySelectorAll(selector));
  for (const element of root.querySelectorAll('*')) {
    if (element.shadowRoot) found.push(...deepAll(element.shadowRoot, selector));
  }
  return found;
}"""
# A table cell broken inside a word has more lines than words: lines are the distinct tops (more than
# 4 px apart) of its text's line boxes.
WRAPPED_CELLS_JS = DEEP_JS + """
(() => {
  const bad = [];
  let cells = 0;
  for (const cell of deepAll(document, 'td, th')) {
    const text = cell.textContent.trim();
    if (!text || !cell.getClientRects().length) continue;
    cells += 1;
    const tops = [];
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const r of range.getClientRects()) if (r.width > 0) tops.push(r.top);
    }
    tops.sort((a, b) => a - b);
    const lines = tops.filter((t, k) => k === 0 || t - tops[k - 1] > 4).length;
    const words = text.split(/\\s+/).length;
    if (lines > words) bad.push([text.slice(0, 60), lines, words]);
  }
  return {cells: cells, bad: bad.slice(0, 20)};
})()"""


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    target = os.environ.get("DLAGG_SCREENSHOTS")
    return (ROOT / target if not Path(target).is_absolute() else Path(target)) if target else \
        tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with Browser(CHROMIUM) as started:
        yield started


@pytest.fixture(scope="module")
def amp_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html")
    run(Options(nsys_database=recording("resnet_amp"), reports=("all",), formats=("csv", "html"), output_path=out,
                iter_start=ITER_START, suppress_tb_files=True, verbosity="quiet"))
    return out


@pytest.fixture(scope="module")
def roofline_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html_roofline")
    run(Options(nsys_database=recording("resnet_amp"), ncu_report=ncu_csv("resnet_amp"), reports=("all",),
                formats=("html",), output_path=out, iter_start=ITER_START, suppress_tb_files=True, verbosity="quiet"))
    return out


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html_compare")
    run(Options(nsys_database=recording("resnet_amp"), baseline=Baseline(recording("resnet_fp32")), reports=("all",),
                formats=("html",), output_path=out, iter_start=ITER_START, suppress_tb_files=True, verbosity="quiet"))
    return out


def open_page(page: Page, path: Path) -> dict:
    page.navigate(path.as_uri())
    page.wait_for("window.dlagg && window.dlagg.ready", timeout=RENDER_TIMEOUT_S)
    return page.evaluate("JSON.parse(JSON.stringify({errors: window.dlagg.errors, charts: window.dlagg.charts}))")


def hover(page: Page, chart: str, field: str) -> tuple[dict, str]:
    """Moves the mouse onto a mark of the chart whose datum has `field` (the first such mark, or one within
    a few pixels of it, where marks are small): (the datum under the mouse, the tooltip's text)."""
    at = page.evaluate(f"{MARK_JS}('{chart}', '{field}')")
    assert at, (chart, field)
    nearby = sorted(((dx, dy) for dx in range(-8, 9, 2) for dy in range(-8, 9, 2)), key=lambda d: abs(d[0]) + abs(d[1]))
    for dx, dy in nearby:  # a few dozen positions at most
        page.call("Input.dispatchMouseEvent", type="mouseMoved", x=at["x"] + dx, y=at["y"] + dy)
        datum = page.evaluate("window.dlagg.hovered")
        if datum and datum.get(field) is not None:
            return datum, str(page.wait_for(TOOLTIP_JS, timeout=10))
    raise AssertionError(f"no mark with {field} under the mouse near {at} in {chart}")


def section_charts(page: Page, section: str) -> list[str]:
    return page.evaluate(f"Array.from(document.querySelectorAll('#{section} [data-chart]')).map(c => c.id)")


def shoot(page: Page, path: Path, clip: dict | None = None) -> None:
    size = page.screenshot(path, clip)
    assert 2_000 < size <= MAX_PNG_BYTES, (path, size)


def shoot_sections(page: Page, shots: Path, prefix: str, only: set[str] | None = None) -> list[str]:
    """A PNG per section: its charts, cards and text down to its first table (the first 700 px of a
    section that starts with a table)."""
    taken = []
    for section in page.evaluate(SECTIONS_JS):  # a dozen sections
        if only is not None and section["id"] not in only:
            continue
        top = section["tablesTop"]
        bottom = top if top and top - section["y"] > 120 else section["y"] + min(section["height"], 700)
        clip = {"x": section["x"], "y": section["y"], "width": section["width"], "height": bottom - section["y"]}
        shoot(page, shots / f"{prefix}_{section['id']}.png", clip)
        taken.append(section["id"])
    return taken


def test_html_page_renders_offline_with_every_chart(browser: Browser, amp_page: Path, shots: Path) -> None:
    page = browser.page()
    try:
        status = open_page(page, amp_page / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        assert status["charts"] and set(status["charts"].values()) == {"rendered"}
        drawn = page.evaluate("Array.from(document.querySelectorAll('[data-chart]')).map(c => {"
                              "const k = c.querySelector('canvas, svg'); return k ? [k.width || k.clientWidth, "
                              "k.height || k.clientHeight] : [0, 0]})")
        assert all(w > 100 and h > 30 for w, h in drawn), drawn
        sections = {s["id"]: s for s in page.evaluate(SECTIONS_JS)}
        assert CHART_SECTIONS <= {name for name, s in sections.items() if s["charts"] > 0}
        assert {"run", "launches", "detail", "tensor", "group_node"} <= set(sections)  # generic sections too
        # Offline: nothing but the file itself was requested (the page holds its libraries and data).
        assert [u for u in page.requests() if not u.startswith(("file:", "data:", "blob:"))] == []
        taken = shoot_sections(page, shots, "html")
        assert set(sections) <= set(taken)
    finally:
        page.close()


def test_html_tables_sort_filter_and_download_the_report_rows(browser: Browser, amp_page: Path) -> None:
    page = browser.page()
    try:
        open_page(page, amp_page / "dlagg_report.html")
        box = page.evaluate("Array.from(document.querySelectorAll('#kernels [data-table]'))[0].id")
        # The download button hands this CSV text to the browser: capture the Blob it makes.
        downloaded = page.evaluate(
            f"""(async () => {{
                  let blob = null;
                  const make = URL.createObjectURL;
                  URL.createObjectURL = b => {{ blob = b; return make.call(URL, b); }};
                  document.querySelector('#{box}').parentElement.querySelector('button').click();
                  URL.createObjectURL = make;
                  return await blob.text();
                }})()""", await_promise=True)
        report = (amp_page / "dlagg_kernel.csv").read_text()
        title, rows = report.split("\n", 1)
        assert title == "Kernel Report" and downloaded == rows  # exactly the report file's header and rows
        # Sort by total GPU time (descending first for numbers), then filter by text.
        column = page.evaluate(f"Array.from(document.querySelectorAll('#{box} th')).findIndex("
                               "th => th.textContent === 'Total GPU Time (ns)')")
        page.evaluate(f"document.querySelectorAll('#{box} th')[{column}].click()")
        shown = page.evaluate(f"Array.from(document.querySelectorAll('#{box} tbody tr')).map("
                              f"tr => tr.children[{column}].textContent.replaceAll(',', ''))")
        totals = sorted((int(v) for v in shown), reverse=True)
        assert [int(v) for v in shown] == totals and len(shown) == len(rows.strip().splitlines()) - 1
        filtered = page.evaluate(
            f"""(() => {{ const input = document.querySelector('#{box}').parentElement.querySelector('input');
                 input.value = 'gemm'; input.dispatchEvent(new Event('input'));
                 return Array.from(document.querySelectorAll('#{box} tbody tr')).map(tr => tr.textContent); }})()""")
        expected = [line for line in rows.strip().splitlines()[1:] if "gemm" in line.lower()]
        assert len(filtered) == len(expected) > 0 and all("gemm" in row.lower() for row in filtered)
    finally:
        page.close()


def test_html_page_of_every_bundled_recording(browser: Browser, tmp_path: Path) -> None:
    """Profiles without kernels, without ops, with CUDA graphs, copies, a data loader: no script error."""
    names = [n for n in RECORDINGS if (BUNDLED / "nsys-2022.4" / n / f"{n}.sqlite").exists()]
    assert len(names) >= 6
    page = browser.page()
    try:
        for name in names:  # a few recordings
            run(Options(nsys_database=recording(name), reports=("all",), formats=("html",),
                        output_path=tmp_path / name, suppress_tb_files=True, verbosity="quiet"))
            status = open_page(page, tmp_path / name / "dlagg_report.html")
            assert status["errors"] == [] and page.errors() == [], name
            assert status["charts"] and set(status["charts"].values()) == {"rendered"}, name
    finally:
        page.close()


def test_html_roofline_draws_the_report_picture_with_figures_on_hover_and_zoom(browser: Browser, roofline_page: Path,
                                                                              shots: Path) -> None:
    page = browser.page()
    try:
        status = open_page(page, roofline_page / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        assert set(status["charts"].values()) == {"rendered"}
        kernels, op_types, bars = section_charts(page, "roofline")
        for chart in (kernels, op_types):
            datum, tip = hover(page, chart, "ai")  # a dot: its name, intensity and FLOP/s
            assert datum["name"] in tip and "arithmetic intensity (FLOP/byte)" in tip and "achieved FLOP/s" in tip
            view = f"window.dlagg.views['{chart}']"
            assert page.evaluate(f"{view}.signal('roofline_zoom_ai') || null") is None
            page.call("Input.dispatchMouseEvent", type="mouseWheel", x=700, y=400, deltaX=0, deltaY=-400)
            page.wait_for(f"{view}.signal('roofline_zoom_ai')", timeout=10)  # the wheel zoomed in
        datum, tip = hover(page, bars, "pct")
        assert datum["name"] in tip and "% of ceiling" in tip
        page.navigate((roofline_page / "dlagg_report.html").as_uri())  # the screenshot unzoomed
        page.wait_for("window.dlagg && window.dlagg.ready", timeout=RENDER_TIMEOUT_S)
        assert [u for u in page.requests() if not u.startswith(("file:", "data:", "blob:"))] == []
        assert shoot_sections(page, shots, "html", only={"roofline"}) == ["roofline"]
    finally:
        page.close()


def test_html_before_and_after(browser: Browser, compare_page: Path, shots: Path) -> None:
    page = browser.page()
    try:
        status = open_page(page, compare_page / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        assert set(status["charts"].values()) == {"rendered"}
        samples, changes = section_charts(page, "compare")
        datum, tip = hover(page, samples, "it")  # an iteration's dot
        assert tip.startswith(f"side{datum['side']}iteration{datum['it']}") and "iteration time (ms)" in tip
        datum, tip = hover(page, samples, "lo")  # the ratio's interval
        assert f"CI low{datum['lo']:.4f}" in tip and "verdictslower" in tip
        datum, tip = hover(page, changes, "before")  # an op type's change
        assert tip.startswith(f"op type{datum['name']}") and "change (ms)" in tip
        assert page.evaluate("document.querySelector('#compare .verdict-head').textContent") == "Slower"
        assert [u for u in page.requests() if not u.startswith(("file:", "data:", "blob:"))] == []
        page.evaluate("window.scrollTo(0, 0)")
        assert shoot_sections(page, shots, "html", only={"compare"}) == ["compare"]
    finally:
        page.close()


# The cells of the compare section's Verdict table (figure name, value) and the visible area of its scroll box.
VERDICT_CELLS_JS = """(() => {
  const box = Array.from(document.querySelectorAll('#compare .table-box'))
    .find(b => b.querySelector('.table-title').textContent === 'Verdict');
  box.scrollIntoView({block: 'start'});
  const scroll = box.querySelector('.scroll');
  const area = scroll.getBoundingClientRect();
  return {scrollLeft: scroll.scrollLeft, right: Math.min(area.right, window.innerWidth), left: area.left,
          overflow: scroll.scrollWidth - scroll.clientWidth,
          cells: Array.from(box.querySelectorAll('tbody tr')).map(tr => Array.from(tr.cells).map(td => {
            const r = td.getBoundingClientRect();
            return {text: td.textContent, left: r.left, right: r.right};
          }))};
})()"""


def test_html_verdict_table_keeps_its_figures_in_view(browser: Browser, compare_page: Path) -> None:
    """The verdict's sentence, one cell on one line, pushed the Value column's figures off to the
    right of the table's box; every cell is now within the box and the window, without scrolling sideways."""
    page = browser.page()
    try:
        status = open_page(page, compare_page / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        found = page.evaluate(VERDICT_CELLS_JS)
        rows = found["cells"]
        assert len(rows) > 5 and any(len(value["text"]) > 120 for _, value in rows)  # the long sentence is there
        assert found["scrollLeft"] == 0 and found["overflow"] <= 1, found["overflow"]
        for figure, value in rows:
            for cell in (figure, value):
                assert found["left"] - 1 <= cell["left"] and cell["right"] <= found["right"] + 1, (figure["text"],
                                                                                                    cell, found)
    finally:
        page.close()


@pytest.mark.parametrize("current, baseline, window", [
    ("resnet_amp", "resnet_fp32", (2, 3)),  # two iterations a side: a ratio without an interval
    ("cuda_basic", "no_emit_nvtx", (None, None)),  # different programs: only more GPU time, no op on one side
])
def test_html_before_and_after_of_other_profiles(browser: Browser, tmp_path: Path, current: str, baseline: str,
                                                 window: tuple[int | None, int | None]) -> None:
    run(Options(nsys_database=recording(current), baseline=Baseline(recording(baseline)), reports=("compare",),
                formats=("html",), output_path=tmp_path, iter_start=window[0], iter_stop=window[1],
                suppress_tb_files=True, verbosity="quiet"))
    page = browser.page()
    try:
        status = open_page(page, tmp_path / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        assert set(status["charts"].values()) == {"rendered"}
        assert len(section_charts(page, "compare")) == 2
    finally:
        page.close()


def test_html_ranks_view(browser: Browser, tmp_path: Path, shots: Path) -> None:
    """The two-rank PyTorch profiler recording with a straggler (rank 1 sleeps 25 ms a step)."""
    straggler = fixture_path("kineto/ddp2_straggler/truth_rank1.json", "Kineto fixture ddp2_straggler").parent
    run(Options(nsys_database=str(straggler), reports=("all",), formats=("html",),
                output_path=tmp_path, suppress_tb_files=True, verbosity="quiet", workers=1))
    page = browser.page()
    try:
        status = open_page(page, tmp_path / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        assert set(status["charts"].values()) == {"rendered"}
        sections = {s["id"]: s for s in page.evaluate(SECTIONS_JS)}
        assert sections["ranks"]["charts"] >= 3 and sections["collectives"]["charts"] >= 1
        assert sections["iterations"]["charts"] == 2 and sections["timeline"]["charts"] == 2  # one per rank
        assert page.evaluate("document.querySelector('#ranks .callout').textContent").startswith("Straggler: rank")
        shoot_sections(page, shots, "html_multi", only={"ranks", "timeline"})
    finally:
        page.close()


def custom_scalar_lines(page: Page) -> list[int]:
    """Lines drawn by each custom-scalars chart (from its 'Matches' list: one entry per run and tag)."""
    return page.evaluate(DEEP_JS + """
      deepAll(document, 'tf-custom-scalar-multi-line-chart-card').map(card =>
        deepAll(card.shadowRoot || card, '.match-list-entry').length)""")


def wait_for_charts(page: Page, selector: str, least: int) -> None:
    page.wait_for(DEEP_JS + f"deepAll(document, '{selector}').length >= {least}", timeout=RENDER_TIMEOUT_S)
    page.settle()


def test_tensorboard_dashboards(browser: Browser, tmp_path: Path, shots: Path) -> None:
    profiles = ("resnet_fp32", "resnet_amp")  # side by side, as the README shows them
    for name in profiles:
        run(Options(nsys_database=recording(name), reports=("all",), output_path=tmp_path, profile_name=name,
                    iter_start=ITER_START, verbosity="quiet"))
    page = browser.page()
    try:
        with tensorboard(tmp_path / "event_files", tmp_path / "tensorboard.log", set(profiles)) as base:
            page.navigate(f"{base}/#custom_scalars&_smoothingWeight=0")
            wait_for_charts(page, "tf-custom-scalar-multi-line-chart-card", 4)
            lines = custom_scalar_lines(page)
            assert lines and max(lines) <= MAX_LINES, lines
            shoot(page, shots / "tensorboard_scalars.png")
            page.navigate(f"{base}/#text&tagFilter=kernel/Kernel Report/page 1 of")
            wait_for_charts(page, "tf-text-loader", 2)
            wrapped = page.evaluate(WRAPPED_CELLS_JS)
            assert wrapped["cells"] > 100 and wrapped["bad"] == [], wrapped
            shoot(page, shots / "tensorboard_text.png")
            page.navigate(f"{base}/#text&tagFilter=.")  # every table of every report
            wait_for_charts(page, "tf-text-loader", 10)
            wrapped = page.evaluate(WRAPPED_CELLS_JS)
            assert wrapped["bad"] == [], wrapped
    finally:
        page.close()


def test_tensorboard_ranks_view(browser: Browser, tmp_path: Path, shots: Path, multi) -> None:
    run(Options(nsys_database=str(multi("ddp2_gpt_per_rank")), reports=("summary", "ranks"), output_path=tmp_path,
                verbosity="quiet", workers=1))
    page = browser.page()
    try:
        with tensorboard(tmp_path / "event_files", tmp_path / "tensorboard.log", {"dlagg/rank0", "dlagg/rank1"}) \
                as base:
            page.navigate(f"{base}/#custom_scalars&_smoothingWeight=0")
            wait_for_charts(page, "tf-custom-scalar-multi-line-chart-card", 4)
            lines = custom_scalar_lines(page)
            assert lines and max(lines) <= MAX_LINES, lines
            titles = page.evaluate(DEEP_JS + "deepAll(document, 'tf-custom-scalar-multi-line-chart-card')"
                                   ".map(c => c.title)")
            assert titles[0] == "Iteration time (ms) per rank"
            shoot(page, shots / "tensorboard_ranks.png")
    finally:
        page.close()


def test_html_page_without_its_charting_libraries_says_so_in_place_of_each_chart(browser: Browser,
                                                                                 tmp_path: Path) -> None:
    """Under an address-space limit the charts' JavaScript engine cannot start under (docs/memory.md), the page is
    written without the Vega libraries: it opens with no script error, and each chart's box says it is not drawn."""
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1500 << 20, 1500 << 20))

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={recording('resnet_amp')}",
                           "--reports=all", "--formats=html", f"--output_path={out}"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, preexec_fn=limited,
                          env={**os.environ, "DLAGG_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0 and "reserves 64 GiB" in done.stderr, done.stderr
    page = browser.page()
    try:
        status = open_page(page, out / "dlagg_report.html")
        assert status["errors"] == [] and page.errors() == []
        assert status["charts"] and set(status["charts"].values()) == {"not drawn"}
        notes = page.evaluate("Array.from(document.querySelectorAll('[data-chart] .chart-error'))"
                              ".map(e => e.textContent)")
        assert len(notes) == len(status["charts"]) and all("not drawn" in n for n in notes)
    finally:
        page.close()
