"""CSV cells a spreadsheet would run as formulas: profile text that starts with =, +, -, @, tab or carriage
return gets a single quote in front in every CSV report (and the HTML page's CSV downloads); numbers stay
numbers; JSON and --raw_csv=true keep the profile's text. Checked on a real export whose NVTX ranges and
kernel were renamed in the test."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reports.figures import Field, Table
from dlagg.writers.cells import CSV, CSV_RAW, FORMULA_START, defuse
from dlagg.writers.csv_writer import format_table

from .conftest import recording
from .dlprof_csv import is_number

# NVTX range -> its new name; the kernel's short name -> its new one
RENAMED_RANGES = {"compute": "=cmd|' /C calc'!A0", "d2h": "-d2h", "setup": "+setup", "h2d": "\th2d"}
RENAMED_KERNEL = ("reduce_sum", "@SUM(1+1)")
HOSTILE = {*RENAMED_RANGES.values(), RENAMED_KERNEL[1]}


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory) -> Path:
    """cuda_basic with NVTX ranges and a kernel renamed to formula-like text (the copy, never the fixture)."""
    db = tmp_path_factory.mktemp("hostile") / "cuda_basic.sqlite"
    shutil.copy(recording("cuda_basic"), db)
    with sqlite3.connect(db) as conn:
        for old, new in RENAMED_RANGES.items():
            assert conn.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = ?", (new, old)).rowcount > 0
        old, new = RENAMED_KERNEL
        (short,) = conn.execute("SELECT id FROM StringIds WHERE value = ?", (old,)).fetchone()
        assert conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = ?",
                            (short,)).fetchone()[0] > 0
        conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (new, short))
        conn.execute("UPDATE StringIds SET value = ? || substr(value, length(?) + 1) WHERE value LIKE ? AND id != ?",
                     (new, old, f"{old}%", short))  # the demangled name: reduce_sum(float const*, ...)
    return db


def written(folder: Path, db: Path, **given: object) -> Path:
    run(Options(nsys_database=db, reports=("all",), output_path=folder, suppress_tb_files=True, verbosity="quiet",
                **given))
    return folder


@pytest.fixture(scope="module")
def safe(hostile_db: Path, tmp_path_factory) -> Path:
    return written(tmp_path_factory.mktemp("safe"), hostile_db, formats=("csv", "json", "html"))


@pytest.fixture(scope="module")
def raw(hostile_db: Path, tmp_path_factory) -> Path:
    return written(tmp_path_factory.mktemp("raw"), hostile_db, formats=("csv",), raw_csv=True)


def formula_like(cells: list[str]) -> set[str]:
    """Text cells a spreadsheet would run: they start with a formula character and are not numbers."""
    return {c for c in cells if c.startswith(FORMULA_START) and not is_number(c)}


def defused(cells: list[str]) -> set[str]:
    """The text of cells written with the quote in front."""
    return {c[1:] for c in cells if c.startswith("'") and c[1:].startswith(FORMULA_START)}


def csv_cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


DETAIL = "_expert_systems_detail"  # the expert systems' second CSV: its JSON report's table with every field


def json_of(csv_path: Path) -> Path:
    """The JSON report a CSV file's cells come from."""
    return csv_path.with_name(csv_path.name.replace(DETAIL, "_expert_systems")).with_suffix(".json")


def json_texts(path: Path, every_field: bool = False) -> list[str]:
    """The string cells of a JSON report's tables and fields that its CSV has too (`every_field`: the detail
    CSV's, every field of the CSV tables)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    texts = []
    for table in doc["tables"]:
        if not table["csv"]:
            continue
        at = [k for k, f in enumerate(table["fields"]) if f["csv"] or every_field]
        texts += [row[k] for row in table["rows"] for k in at if isinstance(row[k], str)]
    return texts


def test_every_csv_report_defuses_formula_text_that_json_keeps(safe: Path) -> None:
    seen: set[str] = set()
    for path in sorted(safe.glob("dlagg_*.csv")):
        cells = csv_cells(path.read_text(encoding="utf-8"))
        raw_texts = formula_like(json_texts(json_of(path), DETAIL in path.name))
        assert formula_like(cells) == set(), path.name  # nothing a spreadsheet would run
        assert defused(cells) == raw_texts, path.name  # each such JSON text, defused, and nothing else
        seen |= raw_texts
    assert HOSTILE <= seen  # every renamed name reached some report
    kernel = csv_cells((safe / "dlagg_kernel.csv").read_text(encoding="utf-8"))
    assert "'@SUM(1+1)" in kernel
    detail = csv_cells((safe / "dlagg_detailed.csv").read_text(encoding="utf-8"))
    assert "'=cmd|' /C calc'!A0" in detail and "'\th2d" in detail


def test_raw_csv_keeps_the_profile_text(safe: Path, raw: Path) -> None:
    for path in sorted(raw.glob("dlagg_*.csv")):
        cells = csv_cells(path.read_text(encoding="utf-8"))
        assert defused(cells) == set(), path.name
        expected = formula_like(json_texts(safe / json_of(path).name, DETAIL in path.name))
        assert formula_like(cells) == expected, path.name


def test_numbers_stay_numbers_and_negative_ones_too(safe: Path) -> None:
    """No cell that is a number got a quote (the iteration report's offsets can be negative: the timeline's
    enclosing ranges start before the iteration)."""
    for path in sorted(safe.glob("dlagg_*.csv")):
        assert not [c for c in csv_cells(path.read_text(encoding="utf-8")) if c.startswith("'") and is_number(c[1:])]
    frame = pd.DataFrame({"name": pd.Series(["-x", "=1+1", "ok", None, "+", "@a", "\tt", "\rr", "'=q"], dtype=object),
                          "ns": [-3, 0, 1, 2, 3, 4, 5, 6, 7],
                          "ms": [-1.25, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})
    fields = (Field("name", "Name"), Field("ns", "Duration (ns)"), Field("ms", "Avg (ms)", digits=2))
    table = Table("t", "T", fields, frame)
    lines = format_table(table).splitlines()
    assert lines[2:5] == ['"\'-x",-3,-1.25', '"\'=1+1",0,0.00', '"ok",1,1.00']
    assert csv_cells(format_table(table))[4:] == [
        "'-x", "-3", "-1.25", "'=1+1", "0", "0.00", "ok", "1", "1.00", "", "2", "2.00", "'+", "3", "3.00",
        "'@a", "4", "4.00", "'\tt", "5", "5.00", "'\rr", "6", "6.00", "'=q", "7", "7.00"]
    assert format_table(table, CSV_RAW).splitlines()[2] == '"-x",-3,-1.25'
    categorical = Table("t", "T", fields[:1], frame[["name"]].astype("category"))
    assert format_table(categorical).splitlines()[2:4] == ['"\'-x"', '"\'=1+1"']
    key_value = Table("kv", "Summary", (Field("key_node", "Key Node", quote=False),),
                      pd.DataFrame({"key_node": ["=HYPERLINK(\"http://x\")"]}), key_value=True)
    assert format_table(key_value).splitlines()[1] == 'Key Node,"\'=HYPERLINK(""http://x"")"'
    assert CSV.value("-2") == '"\'-2"' and CSV.value(-2) == "-2" and defuse("a-b") == "a-b"


def test_html_page_shows_the_text_and_downloads_the_csv_files_cells(safe: Path) -> None:
    page = (safe / "dlagg_report.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="dlagg-data">(.*?)</script>', page, re.S)
                      .group(1))
    downloads = [spec for spec in data["tables"].values() if "downloadCsv" in spec]
    assert downloads
    shown: set[str] = set()
    for spec in data["tables"].values():
        download = csv_cells(spec.get("downloadCsv", spec["csv"]))
        assert formula_like(download) == set(), spec["download"]
        shown |= formula_like(csv_cells(spec["csv"]))
        if "downloadCsv" in spec:
            assert defused(download) == formula_like(csv_cells(spec["csv"])), spec["download"]
    assert {"=cmd|' /C calc'!A0", "@SUM(1+1)"} <= shown
