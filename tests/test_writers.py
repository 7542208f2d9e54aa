"""CSV in DLProf's layout and self-describing JSON carry the same tables."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reports.figures import NS, PERCENT, Field, Table, key_values
from dlagg.writers.base import written_line
from dlagg.writers.csv_writer import format_table

from .conftest import recording


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out")
    run(Options(nsys_database=recording("cuda_basic"), reports=("summary", "kernel", "iteration"),
                formats=("csv", "json"), output_path=out, suppress_tb_files=True, verbosity="quiet"))
    return out


def test_csv_table_layout_formats_figures() -> None:
    fields = (Field("kernel_name", "Kernel Name"), Field("gpu_time_total_ns", "Total GPU Time (ns)", NS),
              Field("gpu_time_avg_ns", "Avg GPU Time (ns)", NS, digits=1), Field("uses_tc", "Uses TC"),
              Field("api_start_ns", "API Call Start (ns)", NS), Field("hidden", "Not In CSV", csv=False))
    frame = pd.DataFrame({
        "kernel_name": ['k"1', "k,2"],
        "gpu_time_total_ns": [10, 20],
        "gpu_time_avg_ns": [3.333, 0.25],  # shown with one decimal, correctly rounded (0.25 -> 0.2)
        "uses_tc": [True, False],
        "api_start_ns": pd.array([5, None], dtype="Int64"),
        "hidden": [1, 2],
    })
    text = format_table(Table("kernels", "Kernel Report", fields, frame))
    assert text.splitlines() == [
        "Kernel Report",
        "Kernel Name,Total GPU Time (ns),Avg GPU Time (ns),Uses TC,API Call Start (ns)",
        '"k""1",10,3.3,"yes",5',
        '"k,2",20,0.2,"no",',
    ]


def test_key_value_table_has_no_header() -> None:
    table = key_values("summary", "Summary Report", [(Field("gpu_count", "GPU Count"), 2),
                                                     (Field("gpu_pct", "GPU Utilization %", PERCENT, digits=1), 41.26),
                                                     (Field("gpus", "GPU Name(s)"), "A100, A100"),
                                                     (Field("cpu", "CPU Model"), 'Xeon "Gold"')])
    # bare as DLProf writes them (chelseajohn/Nvidia-DLProf dlprof_summary.csv), quoted only where a
    # comma or quote would break the line
    assert format_table(table).splitlines() == ["Summary Report", "GPU Count,2", "GPU Utilization %,41.3",
                                                'GPU Name(s),"A100, A100"', 'CPU Model,"Xeon ""Gold"""']
    assert table.values == {"gpu_count": 2, "gpu_pct": 41.26, "gpus": "A100, A100", "cpu": 'Xeon "Gold"'}


def test_row_labels_are_bare_where_the_field_says_so() -> None:
    fields = (Field("label", "", quote=False), Field("name", "Name"), Field("n", "N"))
    table = Table("t", "All Ops", fields, pd.DataFrame({"label": ["All ops", "a,b"], "name": ["x", "y"], "n": [1, 2]}))
    assert format_table(table).splitlines() == ["All Ops", ",Name,N", 'All ops,"x",1', '"a,b","y",2']


def test_table_refuses_a_frame_that_does_not_match_its_fields() -> None:
    with pytest.raises(ValueError, match="differ from fields"):
        Table("t", "T", (Field("a", "A"),), pd.DataFrame({"b": [1]}))


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
    assert doc["format"] == "dlagg-report" and doc["format_version"] == 2 and doc["report"] == report
    assert doc["source"] == "cuda_basic.sqlite" and doc["key_node"] == "train_step"
    assert doc["iterations"]["total"] == 10 and doc["iterations"]["start"] == 0 and doc["iterations"]["stop"] == 9
    csv_sections = (outputs / f"dlagg_{report}.csv").read_text().split("\n\n")
    tables = [t for t in doc["tables"] if t["csv"]]
    assert len(tables) == len(csv_sections)
    for table, text in zip(tables, csv_sections, strict=True):
        lines = text.strip("\n").splitlines()
        assert lines[0] == table["title"]
        shown = [k for k, f in enumerate(table["fields"]) if f["csv"]]
        rows = [[row[k] for k in shown] for row in table["rows"]]
        fields = [table["fields"][k] for k in shown]
        if table["key_value"]:
            body = [[f["title"], value] for f, value in zip(fields, rows[0], strict=True)]
            got_rows = list(csv.reader(lines[1:]))
        else:
            assert next(csv.reader([lines[1]])) == [f["title"] for f in fields]
            body = rows
            got_rows = list(csv.reader(lines[2:]))
        for field in fields:
            assert field["unit"] == ("ns" if field["title"].endswith("(ns)") else field["unit"])
        assert len(got_rows) == len(body)
        for got, want in zip(got_rows, body, strict=True):
            assert len(got) == len(want)
            for cell, value in zip(got, want, strict=True):
                if value is None:
                    assert cell == ""
                elif isinstance(value, bool):
                    assert cell == ("yes" if value else "no")
                elif isinstance(value, str):
                    assert cell == value
                else:
                    assert float(cell) == pytest.approx(value, abs=0.05)


def test_outputs_are_complete_files(outputs: Path) -> None:
    assert not [p for p in outputs.iterdir() if p.name.startswith(".")]  # no temp files left behind
    for path in outputs.glob("*.json"):
        json.loads(path.read_text())


def test_the_written_line_names_each_folder_once() -> None:
    """Folders holding files of the same names (the ranks' folders, the ranks' TensorBoard runs) are named once."""
    out, runs = Path("/out"), Path("/out/event_files/p")
    written = [out / "p_summary.csv", out / "p_kernel.csv", out / "rank0" / "p_summary.csv",
               out / "rank1" / "p_summary.csv", out / "rank2" / "p_summary.csv", runs / "rank0" / "events.x",
               runs / "rank1" / "events.x", runs / "events.x"]
    assert written_line(written) == ("wrote 8 files: /out: p_summary.csv, p_kernel.csv; 3 folders in /out (rank0 to "
                                     "rank2): p_summary.csv; 3 folders under /out/event_files/p: events.x")
    assert written_line([out / "p_summary.csv"]) == "wrote 1 file: /out: p_summary.csv"


def test_expert_systems_detail_csv_is_a_target_of_the_csv_writer(tmp_path: Path) -> None:
    """The expert systems' second CSV (every column; DLProf's file keeps two) counts as an output of the report:
    an existing one stops a run without --force, as the report's own file does."""
    from dlagg.errors import OutputError
    from dlagg.writers import WRITERS

    names = [p.name for p in WRITERS["csv"].targets(["summary", "expert_systems"], tmp_path, "run")]
    assert names == ["run_summary.csv", "run_expert_systems.csv", "run_expert_systems_detail.csv"]
    assert [p.name for p in WRITERS["csv"].targets(["summary"], tmp_path, "run")] == ["run_summary.csv"]
    (tmp_path / "dlagg_expert_systems_detail.csv").write_text("old\n")
    with pytest.raises(OutputError, match="expert_systems_detail.csv: already exists"):
        run(Options(nsys_database=recording("cuda_basic"), reports=("expert_systems",), formats=("csv",),
                    output_path=tmp_path, suppress_tb_files=True, verbosity="quiet"))
