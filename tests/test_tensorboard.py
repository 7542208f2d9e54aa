"""TensorBoard event files, read back with TensorBoard's own EventAccumulator, equal the CSV/JSON reports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.errors import OutputError
from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reports import Report, Table
from dlagg.reports.figures import NS, PERCENT, Field, with_rank
from dlagg.reports.summary import ITERATION_FIELDS, OP_TYPE_ITERATION_FIELDS
from dlagg.writers import WRITERS, RunInfo
from dlagg.writers.tensorboard_writer import (
    TEXT_CELL_PX,
    TEXT_PAGE_ROWS,
    TOP_OP_TYPES,
    _text_px,
    _texts_px,
    iteration_scalars,
    md_escape,
    scalars_layout,
    string_tensor,
    table_markdown,
)

from .conftest import recording
from .dlprof_csv import read as read_csv
from .test_ranks import nccl_kernels

START, STOP = 3, 12  # resnet_amp has 15 iterations: some before and some after the aggregated range
CLASSES = ("tc_kernel", "kernel", "memory", "dataloader", "io", "cpu", "other")
OP_TYPE = "op_type_gpu_ms/"
SCALAR_TAGS = {"iteration/time_ms", "iteration/cpu_side_time_ms", "iteration/gpu_side_time_ms",
               "iteration/gpu_utilization_pct", "iteration/tensor_core_kernel_utilization_pct",
               "iteration/kernel_count", *(f"duration_ms/{c}" for c in CLASSES)}
DURATION_LABELS = {"tc_kernel": "Tensor Core Kernel Duration %", "kernel": "Non-Tensor Core Kernel Duration %",
                   "memory": "Memory Duration %", "dataloader": "Dataloader Duration %", "io": "IO Duration %",
                   "cpu": "CPU Duration %", "other": "Other Duration %"}
# Reports round percentages to one decimal; event files hold float32 (7 significant digits).
PCT_TOL = 0.05 + 1e-4
F32_REL = 1e-6


@dataclass(frozen=True)
class TbRun:
    scalars: dict[str, pd.Series]  # tag -> values indexed by step
    texts: dict[str, str]  # tag -> Markdown
    layout: object | None  # layout_pb2.Layout
    files: list[Path]


def read_run(folder: Path) -> TbRun:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    scalars: dict[str, pd.Series] = {}
    texts: dict[str, str] = {}
    layout = None
    for tag in acc.Tags()["tensors"]:
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        events = acc.Tensors(tag)
        values = [tensor_util.make_ndarray(e.tensor_proto) for e in events]
        if plugin == "scalars":
            scalars[tag] = pd.Series([float(v) for v in values], index=[e.step for e in events])
        elif plugin == "text":
            (value,) = values
            texts[tag] = value.item().decode()
        elif plugin == "custom_scalars":
            layout = layout_pb2.Layout.FromString(values[0].item())
    return TbRun(scalars, texts, layout, sorted(folder.glob("events.out.tfevents.*")))


def parse_md_table(markdown: str) -> pd.DataFrame:
    """The Markdown table in `markdown` back as strings (escapes undone, thousands separators kept)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]

    def cells(line: str) -> list[str]:
        parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        return [re.sub(r"\\(.)", r"\1", p.strip()).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
                for p in parts]

    return pd.DataFrame([cells(line) for line in lines[2:]], columns=cells(lines[0]))


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def text_table(texts: dict[str, str], tag: str) -> pd.DataFrame:
    """Every page and column group of a text dashboard table back as one frame of cell texts, each
    cut text replaced by the whole text listed under its page."""
    keys = sorted(t for t in texts if t == tag or t.startswith(f"{tag}/page "))  # zero-padded page numbers
    assert keys, tag
    pages = []
    for key in keys:
        markdown = texts[key]
        body, _, notes = markdown.partition("Whole texts:")
        whole = {int(n): unescape(text) for n, text in re.findall(r"^(\d+)\. (.*)$", notes, re.M)}
        blocks = re.findall(r"((?:^\|.*\n?)+)", body, re.M)
        groups = [parse_md_table(block) for block in blocks]
        page = pd.concat([groups[0], *(g.iloc[:, 1:] for g in groups[1:])], axis=1)
        for column in page.columns:
            page[column] = [whole[int(m.group(1))] if (m := re.search(r"…\[(\d+)\]$", v)) else v
                            for v in page[column]]
        pages.append(page)
    return pd.concat(pages, ignore_index=True)


def number(text: str) -> float:
    return float(text.replace(",", ""))


def report_json(out: Path, name: str) -> dict:
    return json.loads((out / f"dlagg_{name}.json").read_text())


def _shown(value: object) -> object:
    return ("yes" if value else "no") if isinstance(value, bool) else value


def section_frame(doc: dict, title: str) -> pd.DataFrame:
    """A JSON report table's CSV columns under their titles, booleans as the CSV writes them."""
    (table,) = [t for t in doc["tables"] if t["title"] == title and t["csv"]]
    shown = [k for k, f in enumerate(table["fields"]) if f["csv"]]
    if table["key_value"]:
        return pd.DataFrame({"Name": [table["fields"][k]["title"] for k in shown],
                             "Value": pd.Series([_shown(table["rows"][0][k]) for k in shown], dtype=object)})
    rows = [[_shown(row[k]) for k in shown] for row in table["rows"]]
    return pd.DataFrame(rows, columns=[table["fields"][k]["title"] for k in shown])


def kv(doc: dict, title: str) -> dict[str, object]:
    frame = section_frame(doc, title)
    return dict(zip(frame["Name"], frame["Value"], strict=True))


def per_iteration_from_iteration_report(out: Path) -> pd.DataFrame:
    """Kernel count per iteration, computed from the iteration report's rows."""
    rows = section_frame(report_json(out, "iteration"), "Iteration Report")
    return pd.DataFrame({"count": rows.groupby("Iteration").size()})


@pytest.fixture(scope="module")
def amp(tmp_path_factory) -> Path:
    """resnet_amp, --reports=all, iterations 3..12 aggregated."""
    out = tmp_path_factory.mktemp("amp")
    run(Options(nsys_database=recording("resnet_amp"), reports=("all",), formats=("csv", "json"), output_path=out,
                iter_start=START, iter_stop=STOP, verbosity="quiet"))
    return out


@pytest.fixture(scope="module")
def amp_all(tmp_path_factory) -> Path:
    """resnet_amp, every iteration aggregated: the iteration report then covers all 15."""
    out = tmp_path_factory.mktemp("amp_all")
    run(Options(nsys_database=recording("resnet_amp"), reports=("all",), formats=("json",), output_path=out,
                verbosity="quiet"))
    return out


def test_one_run_per_profile_with_the_iterations_outside_the_range_apart(amp: Path) -> None:
    folder = amp / "event_files" / "dlagg"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["after_iter_stop", "before_iter_start"]
    main, before, after = read_run(folder), read_run(folder / "before_iter_start"), read_run(folder / "after_iter_stop")
    assert len(main.files) == len(before.files) == len(after.files) == 1
    op_types = set(main.scalars) - SCALAR_TAGS
    assert len(op_types) == TOP_OP_TYPES and all(t.startswith(OP_TYPE) for t in op_types)
    for tag in main.scalars:
        assert list(main.scalars[tag].index) == list(range(START, STOP + 1))
        assert list(before.scalars[tag].index) == list(range(START))
        assert list(after.scalars[tag].index) == [13, 14]
    assert not before.texts and not after.texts and before.layout is None
    # Nothing else under the folder (no staging leftovers TensorBoard would show as runs).
    assert sorted(p.name for p in (amp / "event_files").iterdir()) == ["dlagg"]


def test_aggregated_scalars_equal_the_summary_report(amp: Path) -> None:
    main = read_run(amp / "event_files" / "dlagg")
    summary = report_json(amp, "summary")
    totals = kv(summary, "Summary Report")
    its = kv(summary, "Iterations")
    time_ms = main.scalars["iteration/time_ms"]
    wall = float(totals["Wall Clock Time (ns)"])
    assert time_ms.sum() * 1e6 == pytest.approx(wall, rel=F32_REL)
    assert time_ms.mean() * 1e6 == pytest.approx(its["Average Iteration Time (ns)"], rel=F32_REL)
    assert time_ms.std(ddof=0) * 1e6 == pytest.approx(its["Iteration Time Standard Deviation"], rel=1e-5)
    util = (main.scalars["iteration/gpu_utilization_pct"] * time_ms).sum() / time_ms.sum()
    assert util == pytest.approx(totals["GPU Utilization %"], abs=PCT_TOL)
    parts = sum(main.scalars[f"duration_ms/{c}"] for c in CLASSES)
    np.testing.assert_allclose(parts.to_numpy(), time_ms.to_numpy(), rtol=1e-5)  # the classes partition time
    for name, label in DURATION_LABELS.items():
        share = 100 * main.scalars[f"duration_ms/{name}"].sum() / time_ms.sum()
        assert share == pytest.approx(totals[label], abs=PCT_TOL), name


def test_kernel_count_and_tc_utilization_equal_the_reports(amp: Path, amp_all: Path) -> None:
    folder = amp / "event_files" / "dlagg"
    runs = [read_run(folder), read_run(folder / "before_iter_start"), read_run(folder / "after_iter_stop")]
    count = pd.concat([r.scalars["iteration/kernel_count"] for r in runs]).sort_index()
    # Aggregated range: the iteration report of the same run; every iteration: the run aggregating all.
    aggregated = per_iteration_from_iteration_report(amp)
    assert list(aggregated.index) == list(range(START, STOP + 1))
    expected = per_iteration_from_iteration_report(amp_all)
    assert list(expected.index) == list(range(15))
    assert count.astype(int).to_dict() == expected["count"].to_dict()
    assert count.loc[START:STOP].astype(int).to_dict() == aggregated["count"].to_dict()
    # One definition of Tensor Core Kernel Utilization %: the per-iteration chart is the summary's figure
    # per iteration (TC kernel time / kernel time of the TC-eligible ops), which the tensor report's rows
    # (one per eligible op, over the aggregated iterations) give too.
    tensor = section_frame(report_json(amp, "tensor_core"), "Tensor Core Report")
    overall = 100 * tensor["TC GPU Time (ns)"].sum() / tensor["Total GPU Time (ns)"].sum()
    summary = kv(report_json(amp, "summary"), "Summary Report")
    assert summary["Tensor Core Kernel Utilization %"] == pytest.approx(overall, abs=PCT_TOL)
    (per,) = [t for t in report_json(amp, "summary")["tables"] if t["key"] == "iterations"]
    keys = [f["key"] for f in per["fields"]]
    eligible = pd.Series({row[keys.index("iteration")]: row[keys.index("tc_eligible_kernel_time_ns")]
                          for row in per["rows"] if row[keys.index("aggregated")]}, dtype=float)
    util = runs[0].scalars["iteration/tensor_core_kernel_utilization_pct"]
    assert (util * eligible).sum() / eligible.sum() == pytest.approx(overall, rel=1e-5)
    assert 0 < util.min() < 100  # resnet_amp's eligible ops mix Tensor Core GEMMs with other kernels
    assert not any(tag.startswith("iteration/tensor_core_kernel_pct") for r in runs for tag in r.scalars)


def test_text_dashboards_equal_the_reports(amp: Path) -> None:
    main = read_run(amp / "event_files" / "dlagg")
    (launches,) = [tag for tag in main.texts if tag.startswith("iteration/")]  # one row per launch: one line
    assert "charted per iteration" in main.texts[launches] and "|" not in main.texts[launches]
    summary = report_json(amp, "summary")
    for section in [t for t in summary["tables"] if t["csv"]]:
        table = parse_md_table(main.texts[f"summary/{section['title']}"])
        expected = section_frame(summary, section["title"])
        assert len(table) == len(expected)
        for column in expected.columns:
            for shown, value in zip(table[column], expected[column], strict=True):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    assert number(shown) == pytest.approx(value, abs=0.05), (column, shown, value)
                else:
                    assert shown == str(value)

    kernels = section_frame(report_json(amp, "kernel"), "Kernel Report")
    pages = [t for t in main.texts if t.startswith("kernel/Kernel Report/page ")]
    assert len(pages) == -(-len(kernels) // TEXT_PAGE_ROWS) > 1  # every row, in pages
    shown = text_table(main.texts, "kernel/Kernel Report")
    assert shown["Kernel Name"].tolist() == kernels["Kernel Name"].tolist()
    assert [int(number(v)) for v in shown["Total GPU Time (ns)"]] == kernels["Total GPU Time (ns)"].tolist()
    assert shown["Calls"].map(number).astype(int).tolist() == kernels["Calls"].tolist()
    assert "Long Kernel Name" not in shown.columns and "Min GPU Time (ns)" not in shown.columns  # too wide
    for tag in pages:  # long names are cut in the table and whole under it
        cells = [c for block in re.findall(r"^\|.*$", main.texts[tag], re.M) for c in block.split("|")]
        assert max(_text_px(unescape(c.strip())) for c in cells) <= TEXT_CELL_PX


def test_op_type_series_equal_the_op_type_report(amp: Path) -> None:
    folder = amp / "event_files" / "dlagg"
    main = read_run(folder)
    table = section_frame(report_json(amp, "op_type"), "Op Type Summary Report")
    assert table["Op Type"].tolist() == sorted(table["Op Type"])  # DLProf's order: by type name
    # the charted op types: most GPU time first (ties by name)
    top = table.sort_values("Total GPU Time (ns)", ascending=False, kind="stable").head(TOP_OP_TYPES)
    assert {t for t in main.scalars if t.startswith(OP_TYPE)} == {OP_TYPE + t for t in top["Op Type"]}
    for op_type, total in zip(top["Op Type"], top["Total GPU Time (ns)"], strict=True):
        assert main.scalars[OP_TYPE + op_type].sum() * 1e6 == pytest.approx(total, rel=F32_REL), op_type
    before = read_run(folder / "before_iter_start")
    assert list(before.scalars[OP_TYPE + top["Op Type"].iloc[0]].index) == list(range(START))
    shown = text_table(main.texts, "op_type/Op Type Summary Report")
    assert shown["Op Type"].tolist() == table["Op Type"].tolist()


def test_metadata_dashboard(amp: Path) -> None:
    meta = parse_md_table(read_run(amp / "event_files" / "dlagg").texts["run/metadata"])
    values = dict(zip(meta["Name"], meta["Value"], strict=True))
    summary = report_json(amp, "summary")
    assert values["Source file"] == summary["source"] == "resnet_amp.sqlite"
    assert values["NSys version"] == summary["nsys_version"] == "2022.4.2.1"
    assert values["GPUs"] == f"1: {kv(summary, 'System Config')['GPU Name(s)']}"
    assert values["Key node"] == summary["key_node"] == "train_step"
    assert values["Aggregated iterations"] == f"{START} to {STOP}"
    assert values["Iterations"] == "15"
    assert values["dlagg version"] == summary["dlagg_version"]
    assert set(values["Reports"].split(", ")) >= {"summary", "kernel", "iteration"}


def test_custom_scalars_layout_charts_every_written_tag(amp: Path) -> None:
    main = read_run(amp / "event_files" / "dlagg")
    assert main.layout is not None
    patterns = [tag for cat in main.layout.category for chart in cat.chart for tag in chart.multiline.tag]
    for pattern in patterns:  # one quantity per chart: its lines are runs, told apart by colour
        assert sum(bool(re.match(pattern, tag)) for tag in main.scalars) == 1, pattern
    for tag in main.scalars:
        assert any(re.match(pattern, tag) for pattern in patterns), tag
    titles = [c.title for c in main.layout.category]
    assert titles == ["Overview", "Operator", "Kernel"]  # PyTorch's profiler plugin's views; one rank: no Distributed
    assert main.layout.category[0].chart[0].title == "Iteration time (ms)"  # the most useful chart first


def test_many_ranks_layout_gives_each_rank_its_own_charts() -> None:
    """Ranks 1 and 10 (one's tag prefix starts the other's), each with an op type of its own: a rank's category
    charts exactly its own tags, one tag a chart; each compared quantity's charts hold every rank, at most five
    lines a chart."""
    ranks = [0, 1, 2, 10, 11, 12]
    own = ["iteration/time_ms", "iteration/gpu_utilization_pct", "duration_ms/kernel", "duration_ms/cpu",
           "op_type_gpu_ms/linear", "iteration/kernel_count", "ranks/communication_wait_ms"]
    tags = [f"rank{r}/{t}" for r in ranks for t in [*own, f"op_type_gpu_ms/op{r}"]]
    layout = scalars_layout(tags)
    patterns = {c.title: [p for chart in c.chart for p in chart.multiline.tag] for c in layout.category}
    views = ["Overview", "Operator", "Kernel", "Distributed"]
    assert list(patterns) == [*views, *(f"Rank {r}" for r in ranks)]
    assert [c.closed for c in layout.category] == [False, True, True, False, *(True for _ in ranks)]
    for r in ranks:
        matched = [[t for t in tags if re.match(p, t)] for p in patterns[f"Rank {r}"]]
        assert all(len(m) == 1 for m in matched), matched
        # a rank's own charts: its iteration figures, time classes and op types (the ranks/ figures are compared)
        assert sorted(m[0] for m in matched) == sorted(
            f"rank{r}/{t}" for t in [*own, f"op_type_gpu_ms/op{r}"] if not t.startswith("ranks/"))
    for view, quantities in (("Overview", ("iteration/time_ms", "iteration/gpu_utilization_pct", "duration_ms/cpu")),
                             ("Operator", ("op_type_gpu_ms/linear",)),
                             ("Distributed", ("iteration/time_ms", "ranks/communication_wait_ms"))):
        compared = [[t for t in tags if re.match(p, t)] for p in patterns[view]]
        assert all(len({t.split("/", 1)[1] for t in m}) == 1 for m in compared)  # one quantity a chart
        for quantity in quantities:
            lines = [m for m in compared if m and m[0].endswith("/" + quantity)]
            assert [len(m) for m in lines] == [5, 1], (view, quantity)
            assert sorted(t for m in lines for t in m) == sorted(f"rank{r}/{quantity}" for r in ranks)
    operator = [[t for t in tags if re.match(p, t)] for p in patterns["Operator"]]
    assert [m for m in operator if m[0].endswith("/op_type_gpu_ms/op10")] == [["rank10/op_type_gpu_ms/op10"]]


def test_only_kernel_requested_still_charts_every_iteration(tmp_path: Path) -> None:
    run(Options(nsys_database=recording("resnet_amp"), reports=("kernel",), output_path=tmp_path, verbosity="quiet"))
    main = read_run(tmp_path / "event_files" / "dlagg")
    assert set(main.scalars) >= SCALAR_TAGS
    assert list(main.scalars["iteration/time_ms"].index) == list(range(15))
    # the kernel report's own dashboard and its Kernel view; the summary's figures only when it is asked for
    assert {t.split("/page ")[0] for t in main.texts} == {"run/metadata", "kernel/Kernel Report",
                                                          "Kernel/Kernels by GPU time"}


def test_tb_dir_and_profiles_side_by_side(tmp_path: Path) -> None:
    for name in ("resnet_fp32", "resnet_amp"):
        run(Options(nsys_database=recording(name), reports=("summary",), output_path=tmp_path, profile_name=name,
                    tb_dir="tb", verbosity="quiet"))
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["resnet_amp", "resnet_fp32"]
    fp32 = read_run(tmp_path / "tb" / "resnet_fp32").scalars["iteration/tensor_core_kernel_utilization_pct"]
    amp = read_run(tmp_path / "tb" / "resnet_amp").scalars["iteration/tensor_core_kernel_utilization_pct"]
    assert fp32.max() == 0 and amp.min() > 0  # FP32 with TF32 off uses no Tensor Cores; AMP does


def test_existing_event_folder_needs_force_and_is_replaced_whole(tmp_path: Path, monkeypatch) -> None:
    options = Options(nsys_database=recording("cuda_basic"), reports=("summary",), output_path=tmp_path,
                      suppress_tb_files=False, verbosity="quiet")
    run(options)
    folder = tmp_path / "event_files" / "dlagg"
    stale = folder / "events.out.tfevents.1.stale.1.0"
    stale.write_bytes(b"")
    (tmp_path / "dlagg_summary.csv").unlink()  # only the event folder is in the way now

    def must_not_read(*args, **kwargs):
        raise AssertionError("the database was read before the --force check")

    with monkeypatch.context() as patch:
        patch.setattr("dlagg.ranks.reduce.load_profile", must_not_read)
        with pytest.raises(OutputError, match=r"event_files/dlagg: already exists; pass --force"):
            run(options)
    run(Options(**{**options.__dict__, "force": True}))
    assert not stale.exists()
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in (tmp_path / "event_files").iterdir()) == ["dlagg"]


def test_suppressed_and_blocked_event_folders(tmp_path: Path) -> None:
    run(Options(nsys_database=recording("cuda_basic"), reports=("summary",), output_path=tmp_path,
                suppress_tb_files=True, verbosity="quiet"))
    assert not (tmp_path / "event_files").exists()
    (tmp_path / "tb").write_text("not a folder")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        run(Options(nsys_database=recording("cuda_basic"), reports=("summary",), output_path=tmp_path, tb_dir="tb",
                    force=True, verbosity="quiet"))


def test_export_without_kernels_charts_cpu_time_only(tmp_path: Path) -> None:
    run(Options(nsys_database=recording("cpu_nvtx_numpy"), reports=("all",), output_path=tmp_path,
                verbosity="quiet"))
    main = read_run(tmp_path / "event_files" / "dlagg")
    assert "iteration/tensor_core_kernel_utilization_pct" not in main.scalars  # undefined: not written as 0
    assert "iteration/gpu_side_time_ms" not in main.scalars  # no GPU work: no GPU side
    assert main.scalars["iteration/kernel_count"].max() == 0
    assert main.scalars["iteration/gpu_utilization_pct"].max() == 0
    assert main.scalars["iteration/time_ms"].min() > 0


def test_tensorboard_is_imported_only_by_the_writer() -> None:
    code = ("import sys, dlagg.cli, dlagg.pipeline; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'tensorflow', 'google')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("value", ["| a | b |\n|---|---|\n| é | ✓ |", "", b"\x00layout bytes\xff",
                                   [b"640", b"480", b"\x89PNG\r\n\x1a\n"], [b""]])
def test_string_tensors_are_those_tensorboard_makes(value) -> None:
    """Text (a str), a custom-scalars layout (bytes) and an image ([width, height, PNG]): the same bytes as
    TensorBoard's own make_tensor_proto, which the text, image and custom-scalars summaries use."""
    from tensorboard.util import tensor_util

    expected = tensor_util.make_tensor_proto(value, dtype=np.object_).SerializeToString()
    assert string_tensor(value).SerializeToString() == expected


def test_writing_event_files_does_not_load_tensorflows_stub(tmp_path) -> None:
    """TensorBoard's TensorFlow stand-in (tensorboard.compat.tensorflow_stub, with its protos) is left unloaded:
    the writer builds the few tensors it would be used for itself."""
    code = ("import sys; from pathlib import Path; from dlagg.options import Options; from dlagg.pipeline import run; "
            f"run(Options(nsys_database={str(recording('resnet_amp'))!r}, reports=('summary', 'kernel'), "
            f"output_path=Path({str(tmp_path)!r}), verbosity='quiet')); "
            "print(sorted(m for m in sys.modules if m.startswith('tensorboard.compat.tensorflow_stub')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert list((tmp_path / "event_files" / "dlagg").glob("events.out.tfevents.*"))


def test_markdown_cells_are_escaped_and_formatted() -> None:
    assert md_escape("void f<a_b>(int*) | [x]") == r"void f&lt;a\_b&gt;(int\*) \| \[x\]"
    fields = (Field("kernel_name", "Kernel Name"), Field("op_name", "Op Name"),
              Field("gpu_time_total_ns", "Total GPU Time (ns)", NS),
              Field("tc_utilization_pct", "TC Utilization (%)", PERCENT, digits=1),
              Field("gpu_time_avg_ns", "Avg. GPU Time (ns)", NS, digits=1),
              Field("gpu_time_min_ns", "Min GPU Time (ns)"),
              Field("uses_tc", "Uses TC"), Field("long_kernel_name", "Long Kernel Name"),
              Field("tc_kernel_names", "TC Kernel Names"))
    frame = pd.DataFrame({
        "kernel_name": ["k_1", "k|2"],
        "op_name": ["", ""],  # empty in every row: dropped
        "gpu_time_total_ns": [1234567, 5],
        "tc_utilization_pct": [1.25, np.nan],
        "gpu_time_avg_ns": [1.5, 2.5],  # averages, min/max and kernel-name lists stay in the CSV
        "gpu_time_min_ns": [1, 2],
        "uses_tc": [True, False],
        "long_kernel_name": ["x", "y"],
        "tc_kernel_names": ["x", "y"],
    })
    many = pd.concat([frame] * (TEXT_PAGE_ROWS // 2 + 1), ignore_index=True)
    pages = table_markdown(Table("kernels", "Kernel Report", fields, many))
    assert len(pages) == 2
    lines = pages[0].splitlines()
    assert lines[:6] == [
        f"_rows 1–{TEXT_PAGE_ROWS} of {len(many):,}_",
        "",
        "| Kernel Name | Total GPU Time (ns) | TC Utilization (%) | Uses TC |",
        "|---|---:|---:|---|",
        r"| k\_1 | 1,234,567 | 1.2 | yes |",
        r"| k\|2 | 5 |  | no |",
    ]
    assert len(lines) == 4 + TEXT_PAGE_ROWS
    assert pages[1].splitlines()[0] == f"_rows {TEXT_PAGE_ROWS + 1}–{len(many)} of {len(many):,}_"
    assert len(pages[1].splitlines()) == 4 + len(many) - TEXT_PAGE_ROWS


def test_long_texts_are_cut_and_wide_tables_split_into_column_groups() -> None:
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, T2, T3)"
    fields = (Field("kernel_name", "Kernel Name"), *(Field(f"t{k}_ns", f"Total Time {k} (ns)", NS) for k in range(12)))
    frame = pd.DataFrame({"kernel_name": [name, "short"], **{f"t{k}_ns": [123456789, 1] for k in range(12)}})
    (page,) = table_markdown(Table("kernels", "Kernel Report", fields, frame))
    assert f"1. {md_escape(name)}" in page  # the whole name under the table
    blocks = re.findall(r"((?:^\|.*\n?)+)", page, re.M)
    assert len(blocks) > 1 and "_columns 1 of" in page
    parts = [parse_md_table(b) for b in blocks]
    assert all(p.columns[0] == "Kernel Name" for p in parts)  # the identifying column in every group
    assert sum(len(p.columns) - 1 for p in parts) == 12
    cut, kept = parts[0]["Kernel Name"].tolist()
    assert kept == "short" and cut.endswith("…[1]") and name.startswith(cut[:-4])
    assert TEXT_CELL_PX - 30 < _text_px(cut) <= TEXT_CELL_PX


def test_texts_px_measures_a_column_as_text_px_measures_each_text() -> None:
    # 11 px an upper-case letter, 9 a digit, 8 anything else (Roboto 16 px, measured in Chromium)
    assert _text_px("Ab1-") == 11 + 8 + 9 + 8
    column = ["Ab1-", "", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm *, unsigned long, ncclWork *)",
              "123,456,789.5", "ZZZ", " "]
    assert _texts_px(column).tolist() == [_text_px(t) for t in column]
    unicode = [*column, "µs – ‘quoted’", "Ä1"]  # not ASCII: each text on its own
    assert _texts_px(unicode).tolist() == [_text_px(t) for t in unicode]
    assert _texts_px([]).tolist() == []


def test_empty_table_says_why_in_one_line() -> None:
    fields = (Field("op_type", "Op Type"), Field("calls", "# Calls"))
    empty = Table("op_types", "Op Type Summary Report", fields, pd.DataFrame({"op_type": [], "calls": []}))
    report = Report("op_type", "op_type", (empty,), warnings=("op_type: no op ranges (NVTX) in the export",))
    assert table_markdown(empty, report) == ["_No rows: no op ranges (NVTX) in the export._"]


def _summary(op_types: list[str], iterations: list[int], gpu_ns: list[int], start: int, stop: int) -> Report:
    """A summary report holding only what the op-type series read: per iteration (0..4) whether it is
    aggregated, and GPU time per (iteration, op type) of op calls (one per item)."""
    its = pd.DataFrame({f.key: np.zeros(5, dtype=np.int64) for f in ITERATION_FIELDS})
    its["iteration"] = np.arange(5)
    its["aggregated"] = (its["iteration"] >= start) & (its["iteration"] <= stop)
    calls = pd.DataFrame({"iteration": iterations, "op_type": op_types, "gpu_time_ns": gpu_ns})
    per = calls[calls["iteration"] >= 0].groupby(["iteration", "op_type"])["gpu_time_ns"].sum().reset_index()
    return Report("summary", "summary", (Table("iterations", "Iterations", ITERATION_FIELDS, its, csv=False),
                                         Table("op_type_iterations", "Op types", OP_TYPE_ITERATION_FIELDS, per,
                                               csv=False)))


def test_pieces_made_beforehand_are_shown_as_given(tmp_path) -> None:
    """A report's piece (its text dashboards), made beforehand by the job that wrote its files, is what the writer
    shows for it; a report without one gets its texts made by the writer, the texts `piece` makes."""
    summary = _summary(["conv", "gemm"], [1, 2], [1_000_000, 2_000_000], 0, 4)
    fields = (Field("op_type", "Op Type"), Field("calls", "# Calls"))
    op_type = Report("op_type", "op_type", (Table("op_types", "Op Type Summary Report", fields,
                                                  pd.DataFrame({"op_type": ["conv", "gemm"], "calls": [3, 1]})),))
    kernels = Table("kernels", "Kernel Report", (Field("name", "Kernel Name"), Field("calls", "Calls")),
                    pd.DataFrame({"name": ["sgemm"], "calls": [7]}))
    kernel = Report("kernel", "kernel", (kernels,))
    info = RunInfo(source="x.sqlite", nsys_version="2022.4", key_node="step", key_node_reason="given",
                   iterations_total=5, iter_start=0, iter_stop=4, iteration_window_ns=(0, 1), profile_name="dlagg",
                   dlagg_version="0", reports=("op_type", "kernel"))
    writer = WRITERS["tensorboard"]
    made = writer.piece(op_type)
    table = "| Op Type | # Calls |\n|---|---:|\n| conv | 3 |\n| gemm | 1 |"
    assert made == {"op_type/Op Type Summary Report": table,  # its own dashboard and its view in the plugin's Operator
                    "Operator/Op types by GPU time": f"_From op\\_type/Op Type Summary Report._\n\n{table}"}
    writer.write([summary, op_type, kernel], tmp_path / "made", info)
    writer.write([summary, op_type, kernel], tmp_path / "given", info,
                 pieces={"op_type": {"op_type/Op Type Summary Report": "made beforehand"}})
    by_writer, given = read_run(tmp_path / "made" / "dlagg").texts, read_run(tmp_path / "given" / "dlagg").texts
    assert by_writer["op_type/Op Type Summary Report"] == made["op_type/Op Type Summary Report"]
    assert given["op_type/Op Type Summary Report"] == "made beforehand"
    kernel_text = "| Kernel Name | Calls |\n|---|---:|\n| sgemm | 7 |"
    assert given["kernel/Kernel Report"] == by_writer["kernel/Kernel Report"] == kernel_text
    assert set(by_writer) == {"run/metadata", "op_type/Op Type Summary Report", "Operator/Op types by GPU time",
                              "kernel/Kernel Report", "Kernel/Kernels by GPU time"}
    assert set(given) == set(by_writer) - {"Operator/Op types by GPU time"}  # the piece given is all of op_type's


def _op_type_series(summary: Report) -> pd.DataFrame:
    frame = iteration_scalars(summary)[None]
    return frame[[c for c in frame.columns if c.startswith(OP_TYPE)]]


def test_op_type_series_sum_gpu_time_per_iteration_and_keep_the_top_types(monkeypatch) -> None:
    monkeypatch.setattr("dlagg.writers.tensorboard_writer.TOP_OP_TYPES", 2)
    summary = _summary(["conv", "conv", "gemm", "relu", "relu", "conv", "relu"],
                       [1, 1, 1, 2, 0, 2, -1],
                       [2_000_000, 1_000_000, 2_500_000, 500_000, 9_000_000, 1_000_000, 9_000_000], 1, 2)
    frame = _op_type_series(summary)
    # In iterations 1..2: conv 4 ms, gemm 2.5 ms, relu 0.5 ms (relu's 9 ms in iteration 0 and outside don't count).
    assert list(frame.columns) == ["op_type_gpu_ms/conv", "op_type_gpu_ms/gemm"]
    assert frame.loc[1].tolist() == [3.0, 2.5]
    assert frame.loc[2].tolist() == [1.0, 0.0]
    assert frame.loc[0].tolist() == [0.0, 0.0]  # iteration 0 ran only relu
    assert frame.loc[[3, 4]].to_numpy().tolist() == [[0.0, 0.0], [0.0, 0.0]]  # no op calls: 0 ms, not a gap
    assert list(frame.index) == [0, 1, 2, 3, 4]


def test_op_type_series_are_each_ranks_own(monkeypatch) -> None:
    """Several ranks' summary: each rank's series, its own top types, from its own iterations' calls."""
    monkeypatch.setattr("dlagg.writers.tensorboard_writer.TOP_OP_TYPES", 1)
    one = _summary(["conv", "gemm", "gemm"], [1, 1, 2], [3_000_000, 2_000_000, 2_000_000], 1, 2)
    other = _summary(["relu", "conv"], [2, 3], [1_000_000, 7_000_000], 1, 2)
    summary = Report("summary", "summary", tuple(with_rank([a, b], [4, 5])
                                                 for a, b in zip(one.tables, other.tables, strict=True)))
    scalars = iteration_scalars(summary, of=(4, 5, 6))
    assert [c for c in scalars[4].columns if c.startswith(OP_TYPE)] == ["op_type_gpu_ms/gemm"]  # 4 ms against 3
    assert scalars[4]["op_type_gpu_ms/gemm"].tolist() == [0.0, 2.0, 2.0, 0.0, 0.0]
    assert [c for c in scalars[5].columns if c.startswith(OP_TYPE)] == ["op_type_gpu_ms/relu"]  # conv ran in 3
    assert scalars[5]["op_type_gpu_ms/relu"].tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert scalars[6].empty  # no rows of rank 6


def test_no_ops_no_op_type_series() -> None:
    assert _op_type_series(_summary(["conv"], [-1], [5], 0, 1)).columns.empty


# --- The views of PyTorch's profiler plugin: Overview, Operator, Kernel, Distributed ---------------------------

VIEWS = ["Overview", "Operator", "Kernel"]
DDP = "ddp2_gpt_one_session"


def csv_section(out: Path, file: str, title: str):
    """A section of a CSV report, read by the tests' own DLProf-CSV reader (no dlagg code)."""
    return read_csv(out / f"dlagg_{file}.csv")[title]


def largest_first(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Rows by `column`, largest first, ties in the file's order."""
    return frame.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)


def view_values(texts: dict[str, str], tag: str) -> dict[str, float]:
    """A view's Name/Value dashboard as numbers."""
    table = parse_md_table(texts[tag])
    return {name: number(value) for name, value in zip(table["Name"], table["Value"], strict=True)}


def assert_column(shown: pd.DataFrame, expected: pd.DataFrame, column: str, tol: float = 0.0) -> None:
    """A dashboard column (text cells) equals a CSV column: numbers to `tol` (CSV and card both round to 0.1)."""
    values = expected[column].tolist()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        np.testing.assert_allclose([number(v) for v in shown[column]], values, atol=tol, rtol=0, err_msg=column)
    else:
        assert shown[column].tolist() == [str(v) for v in values], column


def layout_charts(run: TbRun, tags: Iterable[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """Category -> chart title -> the written tags (`tags`, else the run's own) its pattern draws."""
    written = list(run.scalars if tags is None else tags)
    return {c.title: {chart.title: [t for t in written if re.match(chart.multiline.tag[0], t)]
                      for chart in c.chart} for c in run.layout.category}


def test_plugin_views_as_custom_scalars_categories_on_one_gpu(amp: Path) -> None:
    main = read_run(amp / "event_files" / "dlagg")
    charts = layout_charts(main)
    assert list(charts) == VIEWS  # one GPU: no Distributed
    overview = charts["Overview"]
    assert list(overview)[0] == "Iteration time (ms)" and overview["Iteration time (ms)"] == ["iteration/time_ms"]
    # the step time breakdown: a chart per class, their sums over the aggregated iterations the summary's Duration %
    breakdown = {title: tags for title, tags in overview.items() if title.startswith("Step time breakdown (ms): ")}
    assert sorted(t for tags in breakdown.values() for t in tags) == sorted(f"duration_ms/{c}" for c in CLASSES)
    totals = csv_section(amp, "summary", "Summary Report").values()
    wall_ms = totals["Wall Clock Time (ns)"] / 1e6
    for name, label in DURATION_LABELS.items():
        assert 100 * main.scalars[f"duration_ms/{name}"].sum() / wall_ms == pytest.approx(totals[label], abs=PCT_TOL)
    # Operator: a chart per op type charted, the op_type report's top op types by GPU time
    op_types = largest_first(csv_section(amp, "op_type", "Op Type Summary Report").frame(), "Total GPU Time (ns)")
    assert sorted(t for tags in charts["Operator"].values() for t in tags) == sorted(
        OP_TYPE + t for t in op_types["Op Type"].head(TOP_OP_TYPES))
    assert list(charts["Operator"])[0] == f"GPU time (ms): {op_types['Op Type'].iloc[0]}"
    assert charts["Kernel"] == {"Tensor Core Kernel Utilization %": ["iteration/tensor_core_kernel_utilization_pct"],
                                "Kernels launched": ["iteration/kernel_count"]}


def test_plugin_views_as_text_dashboards_on_one_gpu(amp: Path) -> None:
    texts = read_run(amp / "event_files" / "dlagg").texts
    assert {t.split("/")[0] for t in texts} >= set(VIEWS) and not any(t.startswith("Distributed/") for t in texts)
    summary = csv_section(amp, "summary", "Summary Report").values()
    # Overview: the summary's figures of the step time (its CSV's values, as rounded there)
    overview = view_values(texts, "Overview/Step time breakdown")
    assert list(overview) == ["Wall Clock Time (ns)", "GPU Utilization %", *DURATION_LABELS.values()]
    for name, value in overview.items():
        assert value == pytest.approx(summary[name], abs=PCT_TOL), name
    iterations = view_values(texts, "Overview/Iterations")
    expected = csv_section(amp, "summary", "Iterations").values()
    assert iterations["Aggregated Iterations"] == STOP - START + 1
    for name in ("Aggregated Iterations", "Start Iteration", "Stop Iteration", "Average Iteration Time (ns)",
                 "Iteration Time Standard Deviation"):
        assert iterations[name] == pytest.approx(expected[name], abs=0.05), name
    (its,) = [t for t in report_json(amp, "summary")["tables"] if t["key"] == "iterations_summary"]
    its = {f["title"]: v for f, v in zip(its["fields"], its["rows"][0], strict=True)}  # CPU-/GPU-side: JSON only
    for name in ("Average CPU-Side Iteration Time (ns)", "Average GPU-Side Iteration Time (ns)"):
        assert iterations[name] == pytest.approx(its[name], abs=0.05), name
    # Operator: op types and ops, most GPU time first, every row
    op_types = largest_first(csv_section(amp, "op_type", "Op Type Summary Report").frame(), "Total GPU Time (ns)")
    shown = text_table(texts, "Operator/Op types by GPU time")
    assert list(shown.columns) == ["Op Type", "# Calls", "Total GPU Time (ns)", "Total CPU Time (ns)",
                                   "Total CPU Overhead (ns)", "Total GPU Idle (ns)", "# Ops"]
    for column in shown.columns:
        assert_column(shown, op_types, column)
    ops = largest_first(csv_section(amp, "detailed", "All Iterations").frame(), "Total GPU Time (ns)")
    shown = text_table(texts, "Operator/Ops by GPU time")
    assert len(shown) == len(ops) > TEXT_PAGE_ROWS  # in pages
    for column in ("Op Name", "Total GPU Time (ns)", "No. Calls", "Total CPU Time (ns)", "Direction", "Using TC"):
        assert_column(shown, ops, column)
    # Kernel: every kernel (and op) by GPU time, with mean, min and max; the Tensor Core share
    kernels = largest_first(csv_section(amp, "kernel", "Kernel Report").frame(), "Total GPU Time (ns)")
    shown = text_table(texts, "Kernel/Kernels by GPU time")
    assert list(shown.columns) == ["Kernel Name", "Calls", "Total GPU Time (ns)", "Avg GPU Time (ns)",
                                   "Min GPU Time (ns)", "Max GPU Time (ns)", "Uses TC", "Op Name", "Direction"]
    assert len(shown) == len(kernels)
    for column in shown.columns:
        assert_column(shown, kernels, column, tol=0.05)
    assert number(shown["Total GPU Time (ns)"].iloc[0]) == max(kernels["Total GPU Time (ns)"])
    share = view_values(texts, "Kernel/Tensor Core share")
    assert list(share) == ["Tensor Core Kernel Utilization %", "Tensor Core Kernel Duration %",
                           "Non-Tensor Core Kernel Duration %"]
    for name, value in share.items():
        assert value == pytest.approx(summary[name], abs=PCT_TOL), name
    assert 0 < share["Tensor Core Kernel Utilization %"] < 100  # AMP: Tensor Core GEMMs among other kernels
    totals = text_table(texts, "Kernel/Kernel totals")
    all_kernels = csv_section(amp, "summary", "All Kernels").frame()
    for column in all_kernels.columns:
        assert_column(totals.rename(columns={"": all_kernels.columns[0]}), all_kernels, column)
    tensor = largest_first(csv_section(amp, "tensor_core", "Tensor Core Report").frame(), "Total GPU Time (ns)")
    shown = text_table(texts, "Kernel/Tensor Core use of eligible ops by GPU time")
    for column in ("Op Name", "Total GPU Time (ns)", "TC GPU Time (ns)", "TC Utilization (%)"):
        assert_column(shown, tensor, column, tol=0.05)
    # each view's page says where its figures are from
    assert texts["Kernel/Kernels by GPU time/page 1 of 6"].startswith(
        "_From kernel/Kernel Report, by Total GPU Time (ns), largest first._")


@pytest.fixture(scope="module")
def ddp(multi, tmp_path_factory) -> Path:
    """The two-rank job (one database holding both ranks), every report, CSV."""
    out = tmp_path_factory.mktemp("ddp")
    (database,) = multi(DDP).glob("*.sqlite")
    run(Options(nsys_database=str(database), reports=("all",), formats=("csv",), output_path=out, verbosity="quiet",
                workers=1))
    return out


def test_distributed_view_with_two_ranks(ddp: Path, multi) -> None:
    folder = ddp / "event_files" / "dlagg"
    main = read_run(folder)  # the dashboards and the layout; each rank's scalars in its own run
    scalars = {tag: values for rank in (0, 1) for tag, values in read_run(folder / f"rank{rank}").scalars.items()}
    charts = layout_charts(main, scalars)
    assert list(charts) == [*VIEWS, "Distributed", "Rank 0", "Rank 1"]
    for view in (*VIEWS, "Distributed"):  # a chart per quantity, a line per rank
        for title, tags in charts[view].items():
            assert title.endswith(" per rank") and len({t.split("/", 1)[1] for t in tags}) == 1, title
            assert sorted(t.split("/")[0] for t in tags) == ["rank0", "rank1"] or view == "Operator", title
    quantities = {tags[0].split("/", 1)[1] for tags in charts["Distributed"].values()}
    assert {"ranks/compute_kernel_ms", "ranks/communication_kernel_ms", "ranks/communication_wait_ms",
            "ranks/gpu_idle_ms"} <= quantities
    # per rank, the mean of each figure per aggregated iteration is the ranks report's
    ranks = csv_section(ddp, "ranks", "Ranks Report").frame()
    for tag, column in (("ranks/compute_kernel_ms", "Compute Kernel Time (ns)"),
                        ("ranks/communication_kernel_ms", "Communication Kernel Time (ns)"),
                        ("ranks/gpu_idle_ms", "GPU Idle Time (ns)")):
        for rank, value in zip(ranks["Rank"], ranks[column], strict=True):
            assert scalars[f"rank{rank}/{tag}"].mean() * 1e6 == pytest.approx(value, rel=1e-5, abs=1), tag
    # the text dashboards: the ranks report's per-rank figures, the collectives by duration
    shown = text_table(main.texts, "Distributed/Ranks")
    assert list(shown.columns) == ["Rank", "Iterations", "Avg Iteration Time (ns)", "Compute Kernel Time (ns)",
                                   "Communication Kernel Time (ns)", "Communication Wait Time (ns)",
                                   "Exposed Communication Time (ns)", "GPU Idle Time (ns)", "Launch Lateness (ns)",
                                   "Collectives", "Arrived Last"]
    for column in shown.columns:
        assert_column(shown, ranks, column, tol=0.05)
    collectives = largest_first(csv_section(ddp, "collectives", "Collectives Report").frame(), "Duration (ns)")
    shown = text_table(main.texts, "Distributed/Collectives by duration")
    assert len(shown) == len(collectives) > TEXT_PAGE_ROWS
    for column in ("Iteration", "Collective", "Operation", "Rank", "Duration (ns)", "Wait (ns)", "Arrived Last"):
        assert_column(shown, collectives, column)
    # every duration shown is an NCCL kernel's of that rank in the database
    kernels = nccl_kernels(multi(DDP))
    recorded = {(int(r), int(e - s)) for r, s, e in zip(kernels["rank"], kernels["start"], kernels["end"],
                                                         strict=True)}
    assert {(int(number(r)), int(number(d))) for r, d in zip(shown["Rank"], shown["Duration (ns)"],
                                                             strict=True)} <= recorded
