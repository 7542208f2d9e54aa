"""The HTML page without a browser: what files --formats writes, that the page fetches nothing, that
every table it holds is the report file's rows, the section registry, and the roofline (--ncu_report)
and before/after (--baseline) sections (tests/test_browser.py renders it)."""

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
from dlagg.options import Baseline, Options
from dlagg.pipeline import run
from dlagg.reports import Report, Table
from dlagg.reports.figures import NS, Field
from dlagg.writers import WRITERS, RunInfo
from dlagg.writers.html_page import SECTIONS, Page, escape, html_section, render_sections
from dlagg.writers.html_writer import page_pieces, vega_bundle

from .conftest import ncu_csv, recording

ITER_START = 2
MAX_PAGE_BYTES = 3_000_000  # "a few MB at most"; this 15-step profile with every report is 1.7 MB
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


def test_one_cause_one_warning_and_the_page_shows_every_warning(tmp_path: Path, capsys) -> None:
    """An export without an NVTX table gave four warnings of that one cause, and the page's box showed
    only the reports' (not the reader's, the key node's or the options')."""
    import html
    import shutil
    import sqlite3

    export = tmp_path / "no_nvtx.sqlite"
    shutil.copy(recording("cuda_basic"), export)
    with sqlite3.connect(export) as db:
        db.execute("DROP TABLE NVTX_EVENTS")
    code = main([f"--nsys_database={export}", "--reports=all", "--formats=html", "-b", "--mode=tensorflow1",
                 f"--output_path={tmp_path / 'out'}"])
    assert code == 0
    said = [line.removeprefix("dlagg: warning: ") for line in capsys.readouterr().err.splitlines()
            if line.startswith("dlagg: warning: ")]
    assert len(said) == 2, said  # the option given, and the missing NVTX ranges
    assert len([w for w in said if "NVTX" in w and not w.startswith("--mode")]) == 1, said
    box = re.search(r'<details class="warnings" open><summary>(.*?)</summary><ul>(.*?)</ul>',
                    page_text(tmp_path / "out"))
    assert box and box.group(1) == "2 warnings"
    assert [html.unescape(w) for w in re.findall(r"<li>(.*?)</li>", box.group(2))] == said


def test_per_rank_run_points_at_the_job_page_and_says_where_the_ranks_pages_are(tmp_path: Path, multi,
                                                                                  capsys) -> None:
    """The job's page is the one with the ranks section; with --per_rank the ranks' pages are written first
    (the run ended pointing at rank0/dlagg_report.html)."""
    code = main([f"--nsys_database={multi('ddp2_gpt_per_rank')}", "--per_rank=true", "--reports=all",
                 "--formats=html", "--suppress_tb_files=true", f"--output_path={tmp_path}"])
    assert code == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if " in a browser" in x)
    opened = Path(re.search(r"open (\S+) in a browser", line).group(1))
    assert opened == tmp_path / "dlagg_report.html"
    assert '<section id="ranks"' in opened.read_text(encoding="utf-8")
    assert f"{tmp_path / 'rank0'} to rank1" in line  # where the ranks' own pages are
    # whatever order the pages were written in
    pages = [tmp_path / "rank1" / "r.html", tmp_path / "rank0" / "r.html", tmp_path / "r.html"]
    assert WRITERS["html"].how_to_open(pages).startswith(f"open {tmp_path / 'r.html'} in a browser")


def test_several_ranks_one_page_and_one_per_rank(tmp_path: Path, multi) -> None:
    run(Options(nsys_database=str(multi("ddp2_gpt_per_rank")), reports=("summary", "kernel"), formats=("html",),
                output_path=tmp_path, per_rank=True, suppress_tb_files=True, verbosity="quiet", workers=1))
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


# --- the roofline and before/after sections ---------------------------------------------------------

LEVELS = ("DRAM", "L2", "L1")


def run_page(folder: Path, **options: object) -> Path:
    run(Options(reports=("all",), formats=("csv", "json", "html"), output_path=folder, iter_start=ITER_START,
                suppress_tb_files=True, verbosity="quiet", **options))
    return folder


@pytest.fixture(scope="module")
def roofline_out(tmp_path_factory) -> Path:
    return run_page(tmp_path_factory.mktemp("html_roofline"), nsys_database=recording("resnet_amp"),
                    ncu_report=ncu_csv("resnet_amp"))


@pytest.fixture(scope="module")
def compare_out(tmp_path_factory) -> Path:
    return run_page(tmp_path_factory.mktemp("html_compare"), nsys_database=recording("resnet_amp"),
                    baseline=Baseline(recording("resnet_fp32")))


@pytest.fixture(scope="module")
def baseline_alone(tmp_path_factory) -> Path:
    """The baseline profile's own reports, from a run of its own."""
    folder = tmp_path_factory.mktemp("html_baseline")
    run(Options(nsys_database=recording("resnet_fp32"), reports=("summary", "op_type"), formats=("json",),
                output_path=folder, iter_start=ITER_START, suppress_tb_files=True, verbosity="quiet"))
    return folder


def section_of(text: str, anchor: str) -> str:
    found = re.search(rf'<section id="{anchor}" data-charts="\d+">(.*?)</section>', text, re.S)
    assert found, anchor
    return found.group(1)


def charts_of(text: str, anchor: str) -> list[dict]:
    data = page_data(text)
    return [data["charts"][c] for c in re.findall(r'data-chart="([^"]+)"', section_of(text, anchor))]


def tables_of(text: str, anchor: str) -> list[dict]:
    data = page_data(text)
    return [data["tables"][t] for t in re.findall(r'data-table="([^"]+)"', section_of(text, anchor))]


def card(text: str, label: str) -> str:
    found = re.search(rf'<div class="label">{re.escape(label)}</div><div class="value">([^<]*)</div>', text)
    assert found, label
    return found.group(1)


def json_table(out: Path, suffix: str, key: str) -> dict:
    doc = json.loads((out / f"dlagg_{suffix}.json").read_text())
    (table,) = [t for t in doc["tables"] if t["key"] == key]
    return table


def json_rows(out: Path, suffix: str, key: str) -> list[dict]:
    table = json_table(out, suffix, key)
    keys = [f["key"] for f in table["fields"]]
    return [dict(zip(keys, row, strict=True)) for row in table["rows"]]


def assert_cell(cell: str, value: object, field: dict) -> None:
    """One cell of an embedded table against the JSON file's exact value, as the CSV writer formats it."""
    if value is None:
        assert cell == "", field["key"]
    elif isinstance(value, bool):
        assert cell == ("yes" if value else "no"), field["key"]
    elif field["type"] == "integer":
        assert int(cell) == value, field["key"]
    elif isinstance(value, (int, float)):
        assert float(cell) == pytest.approx(round(value, field["digits"] or 0) if field["digits"] is not None
                                            else value, rel=1e-12), field["key"]
    else:
        assert cell == value, field["key"]


def assert_report_rows(out: Path, spec: dict, suffix: str) -> str:
    """An embedded table is its report file's rows: the CSV file's section for a table the CSV has, else
    the JSON file's rows formatted as the CSV would. Returns the table's key."""
    key = spec["download"].removeprefix(f"dlagg_{suffix}_").removesuffix(".csv")
    table = json_table(out, suffix, key)
    if table["csv"]:
        assert spec["csv"] == csv_sections(out / f"dlagg_{suffix}.csv")[table["title"]], key
        return key
    shown = [(k, f) for k, f in enumerate(table["fields"]) if f["csv"]]
    cells = list(csv.reader(io.StringIO(spec["csv"])))
    if table["key_value"]:
        assert [c[0] for c in cells] == [f["title"] for _, f in shown]
        rows = [[c[1] for c in cells]]
    else:
        assert cells[0] == [f["title"] for _, f in shown]
        rows = cells[1:]
    assert len(rows) == len(table["rows"]) == spec["rows"] == spec["total"], key
    for row, values in zip(rows, table["rows"], strict=True):
        for cell, (k, f) in zip(row, shown, strict=True):
            assert_cell(cell, values[k], f)
    return key


def assert_offline(text: str) -> None:
    assert not re.search(r"https?://", text.replace(vega_bundle(), ""))  # e.g. a Vega-Lite spec's $schema


def test_roofline_section_draws_the_reports_pictures_interactive(roofline_out: Path) -> None:
    text = page_text(roofline_out)
    assert_offline(text)
    anchors = re.findall(r'<section id="([^"]+)"', text)
    assert anchors.index("kernels") + 1 == anchors.index("roofline") == anchors.index("launches") - 1
    kernels, op_types, bars = charts_of(text, "roofline")
    ceilings = {r["ceiling"]: r["median_per_s"] for r in json_rows(roofline_out, "roofline", "ceilings")}
    for chart, key, label in ((kernels, "kernels", "kernel_name"), (op_types, "op_types", "op_type")):
        assert "$schema" not in chart
        plot = chart["vconcat"][0]
        (dots,) = [layer for layer in plot["layer"] if layer["mark"]["type"] == "point"]
        # Pan and zoom on both axes; a dot's figures in its tooltip; nothing drawn outside the plot when zoomed.
        (zoom,) = dots["params"]
        assert zoom["bind"] == "scales" and zoom["select"] == {"type": "interval", "encodings": ["x", "y"]}
        assert {"name", "level", "ai", "flops", "bound", "pct", "share"} <= \
               {t["field"] for t in dots["encoding"]["tooltip"]}
        assert all(layer["mark"]["clip"] for layer in plot["layer"])
        # One dot per row and memory level with FLOPs and bytes there: the report file's figures.
        rows = json_rows(roofline_out, "roofline", key)
        expected = sorted((r[label], level, r[f"ai_{level.lower()}_flop_per_byte"], r["achieved_flop_per_s"])
                          for r in rows for level in LEVELS
                          if (r["achieved_flop_per_s"] or 0) > 0 and (r[f"ai_{level.lower()}_flop_per_byte"] or 0) > 0)
        got = sorted((d["name"], d["level"], d["ai"], d["flops"]) for d in dots["data"]["values"])
        assert len(got) == len(expected) > 3 * 10 and got == expected
        # The compute roofs are drawn at the ceilings table's medians.
        lines = next(layer for layer in plot["layer"] if layer["mark"]["type"] == "line")["data"]["values"]
        roofs = {line["ceiling"]: line["y"] for line in lines if line["ceiling"] not in LEVELS}
        assert "Tensor FP16" in roofs and all(y == ceilings[name] for name, y in roofs.items())
    by_type = json_rows(roofline_out, "roofline", "op_types")
    values = {r["name"]: r for r in bars["data"]["values"]}
    assert set(values) == {r["op_type"] for r in by_type}  # 17 op types: all drawn
    for row in by_type:
        assert values[row["op_type"]]["pct"] == pytest.approx(row["pct_of_ceiling"], abs=0.006)
        assert values[row["op_type"]]["share"] == pytest.approx(row["gpu_time_pct"], abs=0.006)


def test_roofline_cards_and_tables_are_the_reports_figures(roofline_out: Path) -> None:
    text = page_text(roofline_out)
    part = section_of(text, "roofline")
    step = json_rows(roofline_out, "roofline", "step")[0]
    assert card(part, "Kernels profiled") == f"{step['kernels']:,}" == "268"
    assert card(part, "Achieved over the kernel time") == f"{step['achieved_flop_per_s'] / 1e12:,.1f} TFLOP/s"
    mfu = csv_sections(roofline_out / "dlagg_summary.csv")["Summary Report"]
    # the summary's labels are bare, as DLProf writes them
    assert f'Model FLOPs Utilization % (measured),{card(part, "Model FLOPs utilization").removesuffix(" %")}\n' \
           in mfu
    shares: dict[str, float] = {}
    for row in json_rows(roofline_out, "roofline", "kernels"):
        shares[row["bound"] or ""] = shares.get(row["bound"] or "", 0.0) + (row["gpu_time_pct"] or 0.0)
    assert card(part, "Most GPU time bound by") == max(shares, key=shares.get) == "DRAM"
    keys = [assert_report_rows(roofline_out, spec, "roofline") for spec in tables_of(text, "roofline")]
    assert keys == ["kernels", "op_types", "ceilings", "step", "tc_disagreements"]  # the kernel table first


def test_roofline_of_an_ncu_report_alone_has_no_op_type_view(tmp_path: Path) -> None:
    run(Options(ncu_report=ncu_csv("resnet_amp"), reports=("all",), formats=("html",), output_path=tmp_path,
                verbosity="quiet"))
    text = page_text(tmp_path)
    assert re.findall(r'<section id="([^"]+)"', text) == ["run", "roofline"]
    assert len(charts_of(text, "roofline")) == 1 and "No op-type view" in section_of(text, "roofline")


def test_findings_link_to_the_roofline(tmp_path: Path) -> None:
    """resnet_fp32 runs its convolutions in FP32: the mixed-precision finding links to the op types and the
    roofline, where the FP32 roof and the unused Tensor FP16 roof show the headroom."""
    run(Options(nsys_database=recording("resnet_fp32"), ncu_report=ncu_csv("resnet_fp32"),
                reports=("expert_systems", "roofline"), formats=("html",), output_path=tmp_path, verbosity="quiet"))
    text = page_text(tmp_path)
    found = re.search(r'<div class="finding" id="finding-\d+" data-detector="amp">(.*?)</details>', text, re.S)
    assert found
    assert re.findall(r'class="see" href="#([^"]+)"', found.group(1)) == ["op-types", "roofline"]


def test_compare_section_shows_the_verdict_and_both_sides_iteration_times(compare_out: Path,
                                                                          baseline_alone: Path) -> None:
    text = page_text(compare_out)
    assert_offline(text)
    anchors = re.findall(r'<section id="([^"]+)"', text)
    assert anchors[:4] == ["run", "summary", "compare", "findings"]  # the answer to "did my change help?" first
    part = section_of(text, "compare")
    verdict = json_rows(compare_out, "compare", "verdict")[0]
    assert f"<p>{escape(verdict['text'])}</p>" in part and 'class="verdict slower"' in part
    assert card(part, "Ratio (current / baseline)") == f"{verdict['ratio']:.3f}"
    samples, changes = charts_of(text, "compare")
    times, ratio = samples["hconcat"]
    # Every aggregated iteration of each profile, as the profile's own summary has it.
    dots = next(layer for layer in times["layer"] if layer["mark"]["type"] == "circle")["data"]["values"]
    for side, folder in (("baseline", baseline_alone), ("current", compare_out)):
        own = [r for r in json_rows(folder, "summary", "iterations") if r["aggregated"]]
        assert len(own) == 13
        assert sorted((d["it"], d["ms"]) for d in dots if d["side"].startswith(f"{side}: ")) == \
               [(r["iteration"], round(r["duration_ns"] / 1e6, 4)) for r in own]
    mean = next(layer for layer in times["layer"] if layer["mark"]["type"] == "tick")["data"]["values"]
    assert [m["ms"] for m in mean] == [round(verdict[f"{s}_iteration_time_ns"] / 1e6, 4)
                                       for s in ("baseline", "current")]
    (point,) = next(layer for layer in ratio["layer"] if layer["mark"]["type"] == "point")["data"]["values"]
    assert (point["x"], point["lo"], point["hi"]) == tuple(round(verdict[k], 6) for k in
                                                           ("ratio", "ratio_ci_low", "ratio_ci_high"))
    assert point["lo"] > 1  # significant: the interval excludes no change
    # Op types: the change of GPU time per iteration, from each profile's own op_type report.
    per_iteration = {}
    for side, folder in (("baseline", baseline_alone), ("current", compare_out)):
        its = json_rows(folder, "summary", "iterations_summary")[0]["aggregated_iterations"]
        per_iteration[side] = {r["op_type"]: r["gpu_time_total_ns"] / its for r in json_rows(folder, "op_type",
                                                                                              "op_types")}
    bars = changes["data"]["values"]
    names = set(per_iteration["baseline"]) | set(per_iteration["current"])
    expected = {n: (per_iteration["current"].get(n, 0.0) - per_iteration["baseline"].get(n, 0.0)) / 1e6 for n in names}
    assert {b["name"] for b in bars} == {n for n, d in expected.items() if d != 0}
    for bar in bars:
        assert bar["delta"] == pytest.approx(expected[bar["name"]], abs=1e-4)
        assert bar["change"] == ("more GPU time" if bar["delta"] > 0 else "less GPU time")
    assert min(bars, key=lambda b: b["delta"])["name"] == "conv2d"


def test_compare_section_findings_gone_and_new_link_to_the_findings(compare_out: Path) -> None:
    text = page_text(compare_out)
    part = section_of(text, "compare")
    verdict = json_rows(compare_out, "compare", "verdict")[0]
    gone, new = verdict["problems_gone"].split(", "), verdict["problems_new"].split(", ")
    assert gone == ["amp", "host_sync"] and new == ["underutilized_gpu", "launch_bound"]
    labels = {r["key"].removeprefix("finding:"): r["name"] for r in json_rows(compare_out, "compare", "compare")
              if r["key"].startswith("finding:")}
    for kind, detectors in (("gone", gone), ("new", new)):
        listed = re.search(rf'<div class="changes-{kind}"><h3>[^<]*</h3><ul>(.*?)</ul>', part).group(1)
        assert re.findall(r"<li><b>([^<]*)</b>", listed) == [escape(labels[d]) for d in detectors]
    findings = dict(re.findall(r'<div class="finding" id="(finding-\d+)" data-detector="([^"]+)">', text))
    linked = re.findall(r'<a href="#(finding-\d+)">see the finding</a>', part)
    assert [findings[a] for a in linked] == new  # each new problem links to its finding on this page
    for anchor, detector in findings.items():
        block = re.search(rf'id="{anchor}".*?</details>', text, re.S).group(0)
        assert ('href="#compare">new since the baseline' in block) == (detector in new)
    keys = [assert_report_rows(compare_out, spec, "compare") for spec in tables_of(text, "compare")]
    assert keys == ["compare", "verdict", "profiles", "iterations"]  # the compare table first


def test_compare_section_with_too_few_iterations_draws_the_ratio_without_an_interval(tmp_path: Path) -> None:
    run(Options(nsys_database=recording("resnet_amp"), baseline=Baseline(recording("resnet_fp32")),
                reports=("compare",), formats=("json", "html"), output_path=tmp_path, iter_start=2, iter_stop=3,
                suppress_tb_files=True, verbosity="quiet"))
    text = page_text(tmp_path)
    verdict = json_rows(tmp_path, "compare", "verdict")[0]
    assert verdict["ratio_ci_low"] is None and verdict["change"] == "no significant change"
    part = section_of(text, "compare")
    assert 'class="verdict same"' in part and "no confidence interval: too few iterations on a side" in part
    ratio = charts_of(text, "compare")[0]["hconcat"][1]
    (point,) = next(layer for layer in ratio["layer"] if layer["mark"]["type"] == "point")["data"]["values"]
    assert point["x"] == round(verdict["ratio"], 6) and point["lo"] is None and point["hi"] is None
    interval = next(layer for layer in ratio["layer"] if layer["mark"]["type"] == "rule" and "x2" in layer["encoding"])
    assert interval["data"]["values"] == []  # no interval drawn
