"""The HTML page without a browser: what files --formats writes, that the page fetches nothing, that
every table it holds is the report file's rows, and the section registry (tests/test_browser.py
renders it)."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from dlagg.cli import main
from dlagg.errors import OptionsError
from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reports import Report, Table
from dlagg.reports.figures import NS, Field
from dlagg.writers import WRITERS, RunInfo
from dlagg.writers.html_page import SECTIONS, Page, html_section, render_sections
from dlagg.writers.html_writer import page_pieces, vega_bundle

from .conftest import SHARED, recording

ITER_START = 2
MAX_PAGE_BYTES = 3_000_000  # "a few MB at most"; this 15-step profile with every report is 1.7 MB
DDP = SHARED / "nsys-2022.4-multi" / "ddp2_gpt_per_rank"
RESOURCE_ATTRIBUTES = {"src", "href", "srcset", "poster", "data", "action", "formaction", "background", "xlink:href"}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("html")
    run(Options(nsys_database=recording("resnet_amp"), reports=("all",), formats=("all",), output_path=folder,
                iter_start=ITER_START, suppress_tb_files=True, verbosity="quiet"))
    return folder


def page_text(out: Path) -> str:
    return (out / "dlagg_report.html").read_text(encoding="utf-8")


def page_data(text: str) -> dict:
    found = re.search(r'<script type="application/json" id="dlagg-data">(.*?)</script>', text, re.S)
    assert found
    return json.loads(found.group(1))


def csv_sections(path: Path) -> dict[str, str]:
    """Title -> the section's lines after its title, as the CSV report file holds them."""
    sections = {}
    for part in path.read_text(encoding="utf-8").split("\n\n"):
        title, _, rest = part.partition("\n")
        sections[title] = rest if rest.endswith("\n") else rest + "\n"
    return sections


def test_formats_all_writes_every_file_format(out: Path) -> None:
    files = {p.name for p in out.iterdir()}
    file_formats = [w for w in WRITERS if w not in ("tensorboard", "png")]  # png: written with the reports that draw
    assert set(file_formats) == {"csv", "json", "html"}
    assert {"dlagg_summary.csv", "dlagg_summary.json", "dlagg_kernel.csv", "dlagg_kernel.json",
            "dlagg_report.html"} <= files
    assert len([f for f in files if f.endswith(".html")]) == 1  # one page for every report


def test_unknown_format_lists_the_choices(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="choose from all, csv, html, json"):
        run(Options(nsys_database=recording("cuda_basic"), reports=("summary",), formats=("xml",),
                    output_path=tmp_path, verbosity="quiet"))


class Resources(HTMLParser):
    """Every element and attribute that could make a browser fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.fetching: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in RESOURCE_ATTRIBUTES and value and not value.startswith("#"):
                self.fetching.append(f"<{tag} {name}={value}>")
        if tag in ("link", "iframe", "img", "object", "embed", "base"):
            self.fetching.append(f"<{tag}>")


def test_page_is_self_contained_and_fetches_nothing(out: Path) -> None:
    text = page_text(out)
    assert len(text.encode()) < MAX_PAGE_BYTES
    parser = Resources()
    parser.feed(text)
    assert parser.fetching == []  # no <script src>, <link>, <img>, no URL attribute
    assert parser.tags.count("script") == 4  # error catcher, data, libraries, page script: all inline
    assert not re.search(r"url\(|@import", text.split('<script>', 1)[0])  # the style sheet loads nothing
    bundle = vega_bundle()
    assert bundle in text
    ours = text.replace(bundle, "")
    assert not re.search(r"https?://", ours)  # not one address in dlagg's own part of the page
    # The libraries name web addresses only in messages, XML namespaces and the editor link, which the
    # page turns off: none is loaded (the browser test records every request the page makes).
    assert not re.search(r"""(?:import\s*\(|fetch\(|src\s*=)\s*["']https?://""", bundle)


def test_every_table_is_the_report_files_rows(out: Path) -> None:
    data = page_data(page_text(out))
    checked = set()
    for spec in data["tables"].values():
        _, suffix_key = spec["download"].split("_", 1)
        suffix, key = next((s, suffix_key[len(s) + 1:-4]) for s in
                           ("expert_systems", "tensor_core", "group_op", "detailed", "summary", "kernel",
                            "iteration", "op_type") if suffix_key.startswith(s + "_"))
        doc = json.loads((out / f"dlagg_{suffix}.json").read_text())
        (table,) = [t for t in doc["tables"] if t["key"] == key]
        if table["csv"] and suffix != "iteration":
            assert spec["csv"] == csv_sections(out / f"dlagg_{suffix}.csv")[table["title"]], spec["download"]
        elif suffix == "iteration":  # one iteration's launches: those lines of the file, all of them
            lines = spec["csv"].splitlines()
            section = csv_sections(out / "dlagg_iteration.csv")["Iteration Report"].splitlines()
            assert lines[0] == section[0]
            chosen = {row[0] for row in csv.reader(lines[1:])}
            assert len(chosen) == 1
            assert lines[1:] == [line for line in section[1:] if line.split(",", 1)[0] in chosen]
        else:  # a table the CSV does not have: its JSON rows, formatted as the CSV would
            rows = list(csv.reader(io.StringIO(spec["csv"])))
            shown = [f for f in table["fields"] if f["csv"]]
            assert rows[0] == [f["title"] for f in shown]
            assert len(rows) - 1 == len(table["rows"]) == spec["rows"] == spec["total"]
            at = [k for k, f in enumerate(table["fields"]) if f["csv"]]
            for k, field in zip(at, shown, strict=True):
                if field["type"] == "integer":
                    assert [int(r[at.index(k)]) if r[at.index(k)] else None for r in rows[1:]] == \
                           [row[k] for row in table["rows"]], field["key"]
        checked.add((suffix, key))
    assert {("summary", "summary"), ("summary", "timeline"), ("kernel", "kernels"), ("iteration", "launches"),
            ("expert_systems", "findings"), ("op_type", "op_types"), ("detailed", "ops")} <= checked


def test_page_sections_in_order(out: Path) -> None:
    text = page_text(out)
    anchors = re.findall(r'<section id="([^"]+)"', text)
    assert anchors[:8] == ["run", "summary", "findings", "iterations", "timeline", "op-types", "kernels", "launches"]
    assert {"detail", "tensor", "group_node"} <= set(anchors)  # reports without a section of their own
    menu = re.search(r'<nav class="menu">(.*?)</nav>', text).group(1)
    assert re.findall(r'href="#([^"]+)"', menu) == anchors
    findings = re.findall(r'class="see" href="#([^"]+)"', text)
    assert findings and set(findings) <= set(anchors)  # each finding links to a section on the page


def _info() -> RunInfo:
    return RunInfo(source="x.sqlite", nsys_version="", key_node="step", key_node_reason="test", iterations_total=1,
                   iter_start=0, iter_stop=0, iteration_window_ns=(0, 1), profile_name="p", dlagg_version="0",
                   reports=("future",))


def test_a_report_gets_its_registered_section_or_a_generic_one(monkeypatch) -> None:
    fields = (Field("name", "Name"), Field("time_ns", "Time (ns)", NS))
    table = Table("rows", "Future Report", fields, pd.DataFrame({"name": ["a,b", "c"], "time_ns": [1234, 5]}))
    future = Report("future", "future", (table,))
    page = Page([future], _info())
    render_sections(page, ["future"])
    (part,) = page.sections
    assert part.anchor == "future" and len(page.tables) == 1
    (spec,) = page.tables.values()
    assert spec["csv"] == 'Name,Time (ns)\n"a,b",1234\n"c",5\n' and spec["numeric"] == [False, True]

    monkeypatch.setattr("dlagg.writers.html_page.SECTIONS", dict(SECTIONS))  # registered for this test only

    @html_section("future")
    def future_section(report: Report, page: Page) -> None:
        section = page.section("future-view", "The future", order=15)
        section.chart({"mark": "bar", "data": {"values": [{"x": 1}]}, "encoding": {"x": {"field": "x"}}})
        section.table(report.main, report)

    text = "".join(page_pieces([future], _info()))
    assert '<section id="future-view" data-charts="1"><h2>The future</h2>' in text
    assert text.index('id="run"') < text.index('id="future-view"')
    with pytest.raises(RuntimeError, match="duplicate HTML section"):
        html_section("future")(future_section)


def test_end_of_run_says_how_to_open_the_outputs(tmp_path: Path, capsys) -> None:
    code = main([f"--nsys_database={recording('cuda_basic')}", "--reports=summary", "--formats=html",
                 f"--output_path={tmp_path}"])
    assert code == 0
    err = capsys.readouterr().err
    assert f"open {tmp_path / 'dlagg_report.html'} in a browser" in err
    assert f"tensorboard --logdir {tmp_path / 'event_files'}, then open http://localhost:6006/#custom_scalars" in err


@pytest.mark.skipif(not DDP.exists(), reason=f"multi-rank fixture {DDP} not available")
def test_several_ranks_one_page_and_one_per_rank(tmp_path: Path) -> None:
    run(Options(nsys_database=str(DDP), reports=("summary", "kernel"), formats=("html",), output_path=tmp_path,
                per_rank=True, suppress_tb_files=True, verbosity="quiet", workers=1))
    job = page_text(tmp_path)
    assert '<section id="ranks"' in job and '<section id="collectives"' in job
    for rank in (0, 1):
        own = page_text(tmp_path / f"rank{rank}")
        assert '<section id="timeline"' in own and '<section id="ranks"' not in own
        data = page_data(own)
        timeline = [t for t in data["tables"].values() if t["download"].endswith("_summary_timeline.csv")]
        assert len(timeline) == 1 and not timeline[0]["csv"].startswith("Rank,")  # one rank's own figures


def test_page_data_is_json_a_browser_parses() -> None:
    page = Page([], _info())
    page.add_chart({"data": {"values": [{"x": float("nan"), "y": float("inf"), "z": 1.5, "t": "</script>&"}]}})
    text = page.data_json()
    assert "</" not in text and "&" not in text  # cannot end the <script> element that holds it
    assert json.loads(text)["charts"]["chart-1"]["data"]["values"] == [{"x": None, "y": None, "z": 1.5,
                                                                        "t": "</script>&"}]
