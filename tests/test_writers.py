"""CSV in DLProf's layout and self-describing JSON carry the same tables."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reports.base import Section
from dlagg.writers.csv_writer import format_section

from .conftest import recording


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out")
    run(Options(nsys_database=recording("cuda_basic"), reports=("summary", "kernel", "iteration"),
                formats=("csv", "json"), output_path=out, suppress_tb_files=True, verbosity="quiet"))
    return out


def test_csv_section_layout() -> None:
    table = pd.DataFrame({
        "Kernel Name": ['k"1', "k,2"],
        "Total GPU Time (ns)": [10, 20],
        "Avg GPU Time (ns)": [3.333, 20.0],
        "Uses TC": ["yes", "no"],
        "API Call Start (ns)": pd.array([5, None], dtype="Int64"),
    })
    text = format_section(Section("Kernel Report", table))
    assert text.splitlines() == [
        "Kernel Report",
        "Kernel Name,Total GPU Time (ns),Avg GPU Time (ns),Uses TC,API Call Start (ns)",
        '"k""1",10,3.3,"yes",5',
        '"k,2",20,20.0,"no",',
    ]


def test_key_value_section_has_no_header() -> None:
    table = pd.DataFrame({"Name": ["GPU Count", "GPU Utilization %"], "Value": pd.Series([2, 41.26], dtype=object)})
    assert format_section(Section("Summary Report", table, header=False)).splitlines() == [
        "Summary Report", '"GPU Count",2', '"GPU Utilization %",41.3']


def test_csv_parses_back_to_the_report(outputs: Path) -> None:
    lines = (outputs / "dlagg_kernel.csv").read_text().splitlines()
    assert lines[0] == "Kernel Report"
    rows = list(csv.DictReader(lines[1:]))
    assert {r["Kernel Name"] for r in rows} == {"scale_kernel", "saxpy_kernel", "matmul_tiled", "reduce_sum",
                                                 "side_kernel"}
    assert sum(int(r["Calls"]) for r in rows) == 50


@pytest.mark.parametrize("report", ["summary", "kernel", "iteration"])
def test_json_is_self_describing_and_matches_csv(outputs: Path, report: str) -> None:
    doc = json.loads((outputs / f"dlagg_{report}.json").read_text())
    assert doc["format"] == "dlagg-report" and doc["report"] == report
    assert doc["source"] == "cuda_basic.sqlite" and doc["key_node"] == "train_step"
    assert doc["iterations"]["total"] == 10 and doc["iterations"]["start"] == 0 and doc["iterations"]["stop"] == 9
    csv_sections = (outputs / f"dlagg_{report}.csv").read_text().split("\n\n")
    assert len(doc["sections"]) == len(csv_sections)
    for section, text in zip(doc["sections"], csv_sections, strict=True):
        lines = text.strip("\n").splitlines()
        assert lines[0] == section["title"]
        body = lines[1:] if section["key_value"] else lines[2:]
        assert len(body) == len(section["rows"])
        if not section["key_value"]:
            names = [c["name"] for c in section["columns"]]
            assert next(csv.reader([lines[1]])) == names
            for column in section["columns"]:
                if column["name"].endswith("(ns)"):
                    assert column["unit"] == "ns"
        for got, want in zip(csv.reader(body), section["rows"], strict=True):
            assert len(got) == len(want)
            for cell, value in zip(got, want, strict=True):
                if value is None:
                    assert cell == ""
                elif isinstance(value, str):
                    assert cell == value
                else:
                    assert float(cell) == pytest.approx(value, abs=0.05)


def test_outputs_are_complete_files(outputs: Path) -> None:
    assert not [p for p in outputs.iterdir() if p.name.startswith(".")]  # no temp files left behind
    for path in outputs.glob("*.json"):
        json.loads(path.read_text())
