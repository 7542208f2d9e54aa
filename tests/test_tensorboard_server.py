"""The real TensorBoard serves dlagg's event files: scalars, text dashboards, the custom-scalars layout and the
roofline images.

Starts ``python -m tensorboard.main`` on 127.0.0.1 with a free port, asks its HTTP API (what the
browser asks), and always stops it (its whole process group: TensorBoard may start a data server).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.writers.tensorboard_writer import MAX_LINES, TOP_OP_TYPES

from .conftest import ncu_csv, recording

pytestmark = pytest.mark.browser  # what a browser asks TensorBoard: CI runs these, the default run does not
START, STOP = 3, 12
# TensorBoard imports and loads the folder in a few seconds; a slow CI machine gets a margin.
STARTUP_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(base: str, path: str, **params: str) -> object:
    return json.loads(get_bytes(base, path, **params).decode())


def get_bytes(base: str, path: str, **params: str) -> bytes:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


@contextmanager
def tensorboard(logdir: Path, log: Path, expected_runs: set[str]) -> Iterator[str]:
    port = free_port()
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(port)],
            stdout=stderr, stderr=stderr, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"tensorboard exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                tags = get(base, "/data/plugin/scalars/tags")
                if expected_runs <= set(tags) and all(tags[r] for r in expected_runs):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"tensorboard did not serve {sorted(expected_runs)} within {STARTUP_TIMEOUT_S} s: "
                            f"{log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    out = tmp_path_factory.mktemp("served")
    run(Options(nsys_database=recording("resnet_amp"), reports=("all",), formats=("json",), output_path=out,
                iter_start=START, iter_stop=STOP, verbosity="quiet", ncu_report=ncu_csv("resnet_amp")))
    runs = {"dlagg", "dlagg/before_iter_start", "dlagg/after_iter_stop"}
    with tensorboard(out / "event_files", out / "tensorboard.log", runs) as base:
        yield base, out


def table(out: Path, name: str, key: str) -> dict:
    doc = json.loads((out / f"dlagg_{name}.json").read_text())
    (found,) = [t for t in doc["tables"] if t["key"] == key]
    return found


def column(out: Path, name: str, key: str, field: str) -> list[object]:
    found = table(out, name, key)
    at = [f["key"] for f in found["fields"]].index(field)
    return [row[at] for row in found["rows"]]


def test_scalar_series_over_http(served: tuple[str, Path]) -> None:
    base, out = served
    assert set(get(base, "/data/runs")) == {"dlagg", "dlagg/before_iter_start", "dlagg/after_iter_stop"}
    series = get(base, "/data/plugin/scalars/scalars", run="dlagg", tag="iteration/time_ms")
    assert [step for _, step, _ in series] == list(range(START, STOP + 1))
    (wall,) = column(out, "summary", "summary", "wall_clock_ns")
    assert sum(v for _, _, v in series) * 1e6 == pytest.approx(wall, rel=1e-6)
    before = get(base, "/data/plugin/scalars/scalars", run="dlagg/before_iter_start", tag="iteration/kernel_count")
    assert [step for _, step, _ in before] == list(range(START))
    counts = get(base, "/data/plugin/scalars/scalars", run="dlagg", tag="iteration/kernel_count")
    launches = column(out, "iteration", "launches", "iteration")
    assert [int(v) for _, _, v in counts] == [launches.count(i) for i in range(START, STOP + 1)]
    tags = get(base, "/data/plugin/scalars/tags")["dlagg"]
    assert "Wall-clock time of the iteration" in tags["iteration/time_ms"]["description"]


def test_text_dashboards_over_http(served: tuple[str, Path]) -> None:
    base, out = served
    tags = get(base, "/data/plugin/text/tags")["dlagg"]
    assert {"run/metadata", "summary/Summary Report", "kernel/Kernel Report/page 1 of 6"} <= set(tags)
    (summary,) = get(base, "/data/plugin/text/text", run="dlagg", tag="summary/Summary Report")
    (wall,) = column(out, "summary", "summary", "wall_clock_ns")
    assert "<table>" in summary["text"] and "<td>Wall Clock Time (ns)</td>" in summary["text"]
    assert f"{wall:,}" in summary["text"]
    (kernels,) = get(base, "/data/plugin/text/text", run="dlagg", tag="kernel/Kernel Report/page 1 of 6")
    first = column(out, "kernel", "kernels", "kernel_name")[0]
    assert "_" in first and f"<td>{first}</td>" in kernels["text"]  # underscores shown, not turned into emphasis
    (meta,) = get(base, "/data/plugin/text/text", run="dlagg", tag="run/metadata")
    assert "<td>resnet_amp.sqlite</td>" in meta["text"] and f"<td>{START} to {STOP}</td>" in meta["text"]


def test_custom_scalars_layout_over_http(served: tuple[str, Path]) -> None:
    base, _ = served
    layout = get(base, "/data/plugin/custom_scalars/layout")
    titles = [c["title"] for c in layout["category"]]
    assert titles == ["Overview", "Operator", "Kernel"]  # the views of PyTorch's profiler plugin (one GPU)
    assert layout["category"][0]["chart"][0]["title"] == "Iteration time (ms)"
    drawn = chart_lines(base, layout)
    charted = {tag for lines in drawn.values() for _, tag in lines}
    tags = get(base, "/data/plugin/scalars/tags")["dlagg"]
    assert charted == set(tags)
    classes = ("tc_kernel", "kernel", "memory", "dataloader", "io", "cpu", "other")
    assert {tag for (view, _), lines in drawn.items() if view == "Overview" for _, tag in lines} == {
        "iteration/time_ms", "iteration/cpu_side_time_ms", "iteration/gpu_side_time_ms",
        "iteration/gpu_utilization_pct", *(f"duration_ms/{c}" for c in classes)}
    operator = {tag for (view, _), lines in drawn.items() if view == "Operator" for _, tag in lines}
    assert len(operator) == TOP_OP_TYPES and all(t.startswith("op_type_gpu_ms/") for t in operator)
    assert {tag for (view, _), lines in drawn.items() if view == "Kernel" for _, tag in lines} == {
        "iteration/tensor_core_kernel_utilization_pct", "iteration/kernel_count"}


def chart_lines(base: str, layout: dict) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(category, chart title) -> the lines TensorBoard draws, (run, tag) each; checks that every chart draws
    between one and MAX_LINES lines, one per run (TensorBoard tells lines apart by their run's colour)."""
    runs = get(base, "/data/runs")
    drawn = {}
    for category in layout["category"]:
        for chart in category["chart"]:
            (pattern,) = chart["multiline"]["tag"]
            lines = []
            for name in runs:  # what the chart draws: a line per (run, matching tag)
                data = get(base, "/data/plugin/custom_scalars/scalars", run=name, tag=pattern)
                assert data["regex_valid"]
                lines += [(name, tag) for tag, events in data["tag_to_events"].items() if events]
            assert 0 < len(lines) <= MAX_LINES, chart["title"]
            assert len({name for name, _ in lines}) == len(lines), chart["title"]  # colour = run: one line per run
            drawn[category["title"], chart["title"]] = lines
    return drawn


def test_plugin_views_text_over_http(served: tuple[str, Path]) -> None:
    base, out = served
    tags = set(get(base, "/data/plugin/text/tags")["dlagg"])
    assert {"Overview/Step time breakdown", "Overview/Iterations", "Operator/Op types by GPU time",
            "Kernel/Tensor Core share", "Kernel/Kernel totals", "Kernel/Kernels by GPU time/page 1 of 6",
            "Operator/Ops by GPU time/page 1 of 6"} <= tags
    assert not any(t.startswith("Distributed/") for t in tags)  # one GPU
    (kernels,) = get(base, "/data/plugin/text/text", run="dlagg", tag="Kernel/Kernels by GPU time/page 1 of 6")
    totals = column(out, "kernel", "kernels", "gpu_time_total_ns")
    names = column(out, "kernel", "kernels", "kernel_name")
    first, second = sorted(range(len(totals)), key=lambda k: -totals[k])[:2]  # most GPU time first
    text = kernels["text"]
    assert text.index(f"<td>{totals[first]:,}</td>") < text.index(f"<td>{totals[second]:,}</td>")
    cell = re.search(r"<td>(.*?)</td>", text).group(1)  # the first row's kernel (a long name cut, whole under it)
    assert cell == names[first] or (cell.endswith("…[1]") and names[first].startswith(cell[:-4])), cell
    (share,) = get(base, "/data/plugin/text/text", run="dlagg", tag="Kernel/Tensor Core share")
    (util,) = column(out, "summary", "summary", "tc_kernel_utilization_pct")
    assert "<td>Tensor Core Kernel Utilization %</td>" in share["text"] and f"<td>{util:.1f}</td>" in share["text"]


@pytest.fixture(scope="module")
def served_ranks(multi, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    out = tmp_path_factory.mktemp("served_ranks")
    (database,) = multi("ddp2_gpt_one_session").glob("*.sqlite")
    run(Options(nsys_database=str(database), reports=("all",), formats=("json",), output_path=out, verbosity="quiet",
                workers=1))
    with tensorboard(out / "event_files", out / "tensorboard.log", {"dlagg/rank0", "dlagg/rank1"}) as base:
        yield base, out


def test_distributed_view_over_http(served_ranks: tuple[str, Path]) -> None:
    base, out = served_ranks
    layout = get(base, "/data/plugin/custom_scalars/layout")
    assert [c["title"] for c in layout["category"]] == ["Overview", "Operator", "Kernel", "Distributed", "Rank 0",
                                                        "Rank 1"]
    drawn = chart_lines(base, layout)
    for (view, title), lines in drawn.items():
        if view in ("Overview", "Kernel", "Distributed"):  # a line per rank, each its rank's run
            assert sorted(lines) == [("dlagg/rank0", f"rank0/{lines[0][1].split('/', 1)[1]}"),
                                     ("dlagg/rank1", f"rank1/{lines[0][1].split('/', 1)[1]}")], title
    distributed = {tag.split("/", 1)[1] for (view, _), lines in drawn.items() if view == "Distributed"
                   for _, tag in lines}
    assert {"ranks/compute_kernel_ms", "ranks/communication_kernel_ms", "ranks/communication_wait_ms",
            "ranks/gpu_idle_ms"} <= distributed
    tags = set(get(base, "/data/plugin/text/tags")["dlagg"])
    assert {"Distributed/Ranks", "Distributed/Collectives by duration/page 1 of 3"} <= tags
    (ranks,) = get(base, "/data/plugin/text/text", run="dlagg", tag="Distributed/Ranks")
    for field in ("compute_kernel_ns", "comm_kernel_ns", "comm_wait_ns", "gpu_idle_ns"):
        for value in column(out, "ranks", "ranks", field):
            assert f"<td>{value:,.1f}</td>" in ranks["text"], field


def test_roofline_images_over_http(served: tuple[str, Path]) -> None:
    base, out = served
    tags = get(base, "/data/plugin/images/tags")["dlagg"]
    assert {"roofline/kernels", "roofline/op_types"} <= set(tags)
    for tag, file in (("roofline/kernels", "dlagg_roofline.png"), ("roofline/op_types", "dlagg_roofline_op_type.png")):
        (image,) = get(base, "/data/plugin/images/images", run="dlagg", tag=tag, sample="0")
        assert image["step"] == 0
        assert get_bytes(base, "/data/plugin/images/individualImage?" + image["query"]) == (out / file).read_bytes()
