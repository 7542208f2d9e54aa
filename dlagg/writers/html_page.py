"""The HTML page's building blocks: sections of text, Vega-Lite charts and tables, and the registry
that says which section shows which report.

Contract (what a report's HTML section is, for reports added later):

    from dlagg.writers.html_page import Page, html_section

    @html_section("memory")                       # in a module of dlagg/writers/ (imported with the package)
    def memory(report: Report, page: Page) -> None:
        part = page.section("memory", "Memory")    # anchor, title; appears in the page's menu
        part.text("Device memory in use ...")
        part.chart(spec)                           # a Vega-Lite spec, data inline (no URL, no $schema)
        part.table(report.main, report)            # sortable, filterable, with its CSV download

A report without a registered section gets `generic_section`: each of its tables, sortable. A
section function may read the run's other reports (``page.reports``) and may add several sections
(``order`` places them; by default in the order they are added).

Tables are embedded as the CSV writer's text of their rows (``csv_writer.format_table``, the title
line left out), so a table's download is exactly the rows of the report file (or, for a table
that is not in the CSV, its rows formatted as the CSV would); the page's script parses that text
to show, sort and filter it. Cells are shown as the profile has them: where the CSV file defuses
formula-like text (``cells.defuse``), the table also carries the file's text for its download. A
table of more than MAX_TABLE_ROWS rows is embedded in part and says so, naming its report file.
Everything the page needs is inside it: the page never fetches anything (docs/html.md).
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ..reports.base import Report
from ..reports.figures import Table
from .base import RunInfo
from .cells import CSV_RAW, csv_style
from .csv_writer import format_table

# Rows of one table embedded in the page: enough for every report but the iteration report (one
# row per kernel launch), whose tables are shown in part; the page stays a few MB at most.
MAX_TABLE_ROWS = 10_000

SectionRenderer = Callable[[Report, "Page"], None]
SECTIONS: dict[str, SectionRenderer] = {}


def html_section(report_name: str) -> Callable[[SectionRenderer], SectionRenderer]:
    """Register the function that shows report `report_name` on the HTML page."""

    def register(fn: SectionRenderer) -> SectionRenderer:
        if report_name in SECTIONS:
            raise RuntimeError(f"duplicate HTML section for report {report_name!r}")
        SECTIONS[report_name] = fn
        return fn

    return register


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


_ANCHOR = re.compile(r"[^a-z0-9_-]+")


def anchor_name(text: str) -> str:
    return _ANCHOR.sub("-", text.lower()).strip("-") or "section"


@dataclass(frozen=True)
class Card:
    """A key figure shown large: label, value (already formatted) and a line under it."""

    label: str
    value: str
    detail: str = ""


@dataclass
class Section:
    """One part of the page: a heading and blocks (HTML pieces) in order."""

    anchor: str
    title: str
    order: float
    page: Page
    blocks: list[str] = field(default_factory=list)

    def html(self, markup: str) -> None:
        """Trusted markup (escape every value put in it with `escape`)."""
        self.blocks.append(markup)

    def text(self, text: str) -> None:
        self.blocks.append(f"<p>{escape(text)}</p>")

    def note(self, text: str) -> None:
        self.blocks.append(f'<p class="note">{escape(text)}</p>')

    def cards(self, cards: Sequence[Card]) -> None:
        items = "".join(f'<div class="card"><div class="label">{escape(c.label)}</div>'
                        f'<div class="value">{escape(c.value)}</div>'
                        + (f'<div class="detail">{escape(c.detail)}</div>' if c.detail else "") + "</div>"
                        for c in cards)
        self.blocks.append(f'<div class="cards">{items}</div>')

    def chart(self, spec: dict, caption: str = "") -> str:
        """A Vega-Lite spec drawn by the page's vega-embed; returns the chart's id."""
        chart_id = self.page.add_chart(spec)
        cap = f'<div class="caption">{escape(caption)}</div>' if caption else ""
        self.blocks.append(f'<figure class="chart-box"><div class="chart" id="{chart_id}" data-chart="{chart_id}">'
                           f"</div>{cap}</figure>")
        return chart_id

    def table(self, table: Table, report: Report, *, rows: pd.Series | None = None, caption: str = "",
              subset: str = "") -> str:
        """`table` as a sortable, filterable table with a CSV download; `rows` (a boolean mask)
        embeds only those rows, `subset` says which in one line. Returns the table's id."""
        return self.page.add_table(self, table, report, rows=rows, caption=caption, subset=subset)


# A cell that starts with a character cells.defuse looks at (negative numbers too: a cheap first look).
_MAY_DEFUSE = re.compile(r'(?:^|,)"?[=+\-@\t\r]', re.MULTILINE)


def _rows_text(text: str) -> str:
    """A table's CSV text without its title line (the page shows the title as the table's caption)."""
    return text.split("\n", 1)[1] if "\n" in text else ""


class Page:
    """The page being built: its sections, charts and tables, and the run's reports."""

    def __init__(self, reports: Sequence[Report], info: RunInfo) -> None:
        self.info = info
        self.reports: dict[str, Report] = {r.name: r for r in reports}
        self.sections: list[Section] = []
        self.charts: dict[str, dict] = {}
        self.tables: dict[str, dict] = {}
        self._anchors: set[str] = set()

    def report(self, name: str) -> Report | None:
        return self.reports.get(name)

    def section(self, anchor: str, title: str, *, order: float | None = None, intro: str = "") -> Section:
        anchor = anchor_name(anchor)
        base, k = anchor, 1
        while anchor in self._anchors:
            k += 1
            anchor = f"{base}-{k}"
        self._anchors.add(anchor)
        part = Section(anchor, title, float(len(self.sections) * 10 + 1000) if order is None else order, self)
        if intro:
            part.text(intro)
        self.sections.append(part)
        return part

    def has_section(self, anchor: str) -> bool:
        return anchor in self._anchors

    def add_chart(self, spec: dict) -> str:
        chart_id = f"chart-{len(self.charts) + 1}"
        self.charts[chart_id] = spec
        return chart_id

    def add_table(self, part: Section, table: Table, report: Report, *, rows: pd.Series | None, caption: str,
                  subset: str) -> str:
        table_id = f"table-{len(self.tables) + 1}"
        total = len(table)
        shown = table if rows is None else table.with_frame(table.frame[rows.to_numpy(dtype=bool)])
        extension = "csv" if table.csv else "json"
        file_name = f"{self.info.profile_name}_{report.file_suffix}.{extension}"
        notes = [n for n in (subset, table.note) if n]
        if len(shown) > MAX_TABLE_ROWS:
            notes.append(f"the first {MAX_TABLE_ROWS:,} of these {len(shown):,} rows are in this page; "
                         f"all of them are in {file_name} (--formats={extension})")
            shown = shown.with_frame(shown.frame.head(MAX_TABLE_ROWS))
        text = _rows_text(format_table(shown, CSV_RAW))  # shown as the profile has it
        download = text  # as in the report's file: formatted again only when some cell may be defused
        if _MAY_DEFUSE.search(text) and not self.info.raw_csv:
            download = _rows_text(format_table(shown, csv_style(self.info.raw_csv)))
        fields = shown.csv_fields()
        numeric = [pd.api.types.is_numeric_dtype(shown.frame[f.key].dtype)
                   and not pd.api.types.is_bool_dtype(shown.frame[f.key].dtype) for f in fields]
        self.tables[table_id] = {
            "csv": text,
            "keyValue": table.key_value,
            "numeric": numeric,
            "rows": len(shown),
            "total": total,
            "download": f"{self.info.profile_name}_{report.file_suffix}_{table.key}.csv",
        }
        if download != text:  # formula-like text defused (cells.defuse): the page shows the text, downloads this
            self.tables[table_id]["downloadCsv"] = download
        where = "in the CSV file" if table.csv else "not in the CSV file: figures for this page and the JSON"
        head = (f'<div class="table-head"><span class="table-title">{escape(caption or table.title)}</span>'
                f'<span class="table-source">{escape(report.name)} report, table {escape(table.key)} ({where})</span>'
                "</div>")
        note = "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
        part.blocks.append(f'<div class="table-box">{head}{note}<div class="table" id="{table_id}" '
                           f'data-table="{table_id}"></div></div>')
        return table_id

    def data_json(self) -> str:
        """Charts and tables as one JSON text that is safe inside a <script> element."""
        text = json.dumps(_finite({"charts": self.charts, "tables": self.tables}), ensure_ascii=False,
                          allow_nan=False, separators=(",", ":"))
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    def ordered(self) -> list[Section]:
        return sorted(self.sections, key=lambda s: s.order)


def _finite(value: object) -> object:
    """`value` with every NaN or infinite float made null (JSON has no NaN; the page's parser would fail)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def generic_section(report: Report, page: Page) -> None:
    """Any report without a section of its own: its tables, sortable and downloadable."""
    part = page.section(report.name, f"{report.name.replace('_', ' ').capitalize()} report")
    for table in report.tables:  # a few tables per report
        part.table(table, report)


def render_sections(page: Page, order: Sequence[str]) -> None:
    """Every report of the page in `order` (report names), each by its section function."""
    for name in order:
        report = page.reports.get(name)
        if report is not None:
            SECTIONS.get(name, generic_section)(report, page)


def body(page: Page) -> Iterator[str]:
    """The menu and the sections, in order."""
    parts = page.ordered()
    yield '<nav class="menu">' + "".join(f'<a href="#{p.anchor}">{escape(p.title)}</a>' for p in parts) + "</nav>"
    for part in parts:
        charts = sum(block.count('data-chart="') for block in part.blocks)
        yield (f'<section id="{part.anchor}" data-charts="{charts}"><h2>{escape(part.title)}</h2>'
               + "".join(part.blocks) + "</section>")


def key_value_rows(rows: Sequence[tuple[str, object]]) -> str:
    """A small two-column table of run metadata (not a report table: no download)."""
    return ('<table class="meta">' + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
            + "</table>")
