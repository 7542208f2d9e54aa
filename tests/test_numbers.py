"""Numbers a user can trust: every item on a hand-built case or a real fixture.

Expected values are worked out by hand (hand-built exports), from SQL on the fixture, or are the
figures the issue quotes from DLProf v1.8's own output; never from dlagg's output.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.cli import main
from dlagg.context import RankContext
from dlagg.expert import run_detectors
from dlagg.expert.base import plural
from dlagg.ops.markers import labelled_shape
from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile
from dlagg.reports import build_reports
from dlagg.reports.summary import driver_version
from dlagg.timeline.iterations import detect_iterations

from . import dlprof_csv, recorded
from .builders import ExportBuilder
from .conftest import ROOT, SHARED, recording
from .marks import quick_on

MS = 1_000_000
DLPROF = SHARED / "public" / "MohanadOdema__DLProf__nsys_profile.sqlite"
GAUSSIAN = SHARED / "public" / "kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite"


def cli(path: Path, out: Path, *options: str, reports: str = "all") -> Path:
    assert main([f"--nsys_database={path}", f"--reports={reports}", "--formats=csv,json", f"--output_path={out}",
                 "-b", "--verbosity=quiet", *options]) == 0
    return out


def csv_sections(out: Path, report: str) -> dict[str, dlprof_csv.Section]:
    return dlprof_csv.read(out / f"dlagg_{report}.csv")


def json_table(out: Path, report: str, key: str) -> pd.DataFrame:
    doc = json.loads((out / f"dlagg_{report}.json").read_text())
    (table,) = [t for t in doc["tables"] if t["key"] == key]
    return pd.DataFrame(table["rows"], columns=[f["key"] for f in table["fields"]])


def json_warnings(out: Path, report: str) -> list[str]:
    return json.loads((out / f"dlagg_{report}.json").read_text())["warnings"]


def context(path: Path, **kw: object) -> RankContext:
    profile = load_profile(path)
    return RankContext(profile, detect_iterations(profile, kw.pop("key_node", None)), Options(nsys_database=path))


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path.name} not available (../shared)")
    return path


def dlprof_sql(query: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(f"file:{need(DLPROF)}?mode=ro&immutable=1", uri=True) as conn:
        rows = conn.execute(query, params).fetchall()
    conn.close()
    return rows


# --- 1. Iteration time when the CPU runs ahead of the GPU -------------------------------------------

def cpu_ahead(path: Path, steps: int = 44, queue: int | None = None) -> tuple[Path, list[int], list[int]]:
    """GIVEN a training loop that never waits for the GPU: each step's CPU range takes 5 ms and launches
    3 kernels of 3 ms (9 ms of GPU work). With `queue`, the launch queue holds that many steps: a step's
    first launch call returns only when step i-queue's GPU work is done (the host then runs at the GPU's
    pace). Returns (export, end of each step's GPU work, end of each step's range)."""
    b = ExportBuilder()
    gpu_free, gpu_end, cpu_end, cpu = 0, [], [], 1 * MS
    for i in range(steps):
        start = cpu
        first = start + 100_000
        returned = first + 10_000
        if queue is not None and i >= queue:
            returned = max(returned, gpu_end[i - queue])
        for k in range(3):
            a0 = first if k == 0 else returned + k * 20_000
            a1 = returned if k == 0 else a0 + 10_000
            k_start = max(gpu_free, a1 + 5_000)
            b.launch(a0, a1, k_start, k_start + 3 * MS, f"step_kernel_{k}")
            gpu_free = k_start + 3 * MS
        gpu_end.append(gpu_free)
        cpu = max(start + 5 * MS, returned + 4_800_000)
        cpu_end.append(cpu)
        b.range(start, cpu, "train_step")
    return b.write(path), gpu_end, cpu_end


def test_cpu_ahead_iterations_follow_the_gpu(tmp_path: Path) -> None:
    path, gpu_end, cpu_end = cpu_ahead(tmp_path / "ahead.sqlite")
    # premises: the host is 20 steps ahead when its last range ends; the GPU needs 9 ms per step
    assert sum(end > cpu_end[-1] for end in gpu_end) == 20
    assert set(np.diff(gpu_end)) == {9 * MS} and set(np.diff(cpu_end)) == {5 * MS}
    out = cli(path, tmp_path / "out", reports="summary,expert_systems")
    summary = csv_sections(out, "summary")
    values, its = summary["Summary Report"].values(), summary["Iterations"].values()
    # iteration i ends with its GPU work: 9 ms each after the first, which starts at the first range
    first_start = 1 * MS
    assert values["Wall Clock Time (ns)"] == gpu_end[-1] - first_start
    assert its["Average Iteration Time (ns)"] == pytest.approx((gpu_end[-1] - first_start) / 44, abs=0.05)
    # the GPU works 44 x 9 ms of that wall clock: no percentage over 100, the partition adds up
    assert values["GPU Utilization %"] == round(100 * 44 * 9 * MS / (gpu_end[-1] - first_start), 1)
    shares = [v for k, v in values.items() if k.endswith("Duration %")]
    assert max(shares) <= 100 and sum(shares) == pytest.approx(100, abs=0.3)
    # both sides in the JSON, and a note: 5 ms on the CPU side, 9 ms on the GPU side
    side = json_table(out, "summary", "iterations_summary").iloc[0]
    assert side["cpu_iteration_time_avg_ns"] == pytest.approx(np.mean(np.diff([first_start, *cpu_end])))
    assert side["gpu_iteration_time_avg_ns"] == pytest.approx(np.mean(np.diff([first_start, *gpu_end])))
    (note,) = [w for w in json_warnings(out, "summary") if "CPU-side and GPU-side" in w]
    cpu_mean, gpu_mean = np.mean(np.diff([first_start, *cpu_end])), np.mean(np.diff([first_start, *gpu_end]))
    assert round(cpu_mean / MS, 3) == 5.0 and round(gpu_mean / MS, 1) == 9.0  # iteration 0 adds start-up
    assert f"{cpu_mean / MS:.3f} ms per iteration on the CPU side" in note
    assert f"{gpu_mean / MS:.3f} ms on the GPU side" in note and "host ran ahead of the GPU" in note
    per = json_table(out, "summary", "iterations")
    assert per["cpu_side_ns"].tolist() == np.diff([first_start, *cpu_end]).tolist()
    assert per["gpu_side_ns"].tolist()[1:] == [9 * MS] * 43


def test_cpu_ahead_steady_range_is_never_the_queue_filling_phase(tmp_path: Path) -> None:
    """70 steps with a 20-step launch queue: the host fills it at 5 ms per step (steps 0-44), then waits
    for the GPU (9 ms per step). Judged on host-side times, steps 45-69 look like outliers and 0-44 like
    the steady range: exactly the queue-filling phase. On the GPU's pace every step takes 9 ms."""
    path, gpu_end, cpu_end = cpu_ahead(tmp_path / "queue.sqlite", steps=70, queue=20)
    host = np.diff([1 * MS, *cpu_end])
    assert (host[:40] == 5 * MS).all() and (host[-20:] == 9 * MS).all()  # premise: the queue fills, then blocks
    ctx = context(path)
    found, outcomes = run_detectors(ctx)
    assert "iteration_variation" not in {f.detector for f in found}
    assert {o.detector: o.status for o in outcomes}["iteration_variation"] == "silent"
    assert np.diff(ctx.iterations.ends).tolist() == [9 * MS] * 69


def test_steady_range_says_why_it_was_chosen(tmp_path: Path) -> None:
    """A warm-up step of 3 ms among 1 ms steps (host-bound: the GPU keeps up): the proposal cuts it and
    says on what it was decided."""
    b = ExportBuilder()
    t = 0
    for length in [3 * MS] + [MS] * 7:
        b.range(t, t + length, "train_step")
        b.launch(t + 10_000, t + 20_000, t + 30_000, t + 100_000, "k")
        t += length
    found = {f.detector: f for f in run_detectors(context(b.write(tmp_path / "warm.sqlite")))[0]}
    finding = found["iteration_variation"]
    assert "--iter_start=1 --iter_stop=7" in finding.recommendation
    assert "leaves out iterations 0 before it, which take more than 1.5x the median" in finding.recommendation
    assert "follow the GPU wherever the host ran ahead" in finding.recommendation


# Recordings whose GPU work always ends before the key range it was launched in (SQL premise): the
# issue's "GPU close behind the CPU". Their iteration figures must not change at all.
IN_STEP = ("cuda_basic", "resnet_fp32", "resnet_amp", "dataloader_bound", "h2d_heavy")


@pytest.mark.parametrize("name", quick_on("h2d_heavy", IN_STEP))
def test_recordings_that_keep_up_keep_their_figures(name: str, tmp_path: Path) -> None:
    ends = recorded.key_ends(name)
    assert (recorded.gpu_side_ends(name) == ends).all()  # premise (SQL)
    out = cli(recording(name), tmp_path / name, reports="summary")
    summary = csv_sections(out, "summary")
    start = recorded.windows(name)[0][0]
    durations = np.diff([start, *ends])
    assert summary["Summary Report"].values()["Wall Clock Time (ns)"] == ends[-1] - start
    its = summary["Iterations"].values()
    assert its["Average Iteration Time (ns)"] == round(durations.mean(), 1)
    assert its["Iteration Time Standard Deviation"] == round(durations.std(), 1)
    assert not [w for w in json_warnings(out, "summary") if "CPU-side and GPU-side" in w]


def test_no_emit_nvtx_host_runs_ahead_and_the_windows_follow(tmp_path: Path) -> None:
    """no_emit_nvtx queues steps ahead of the GPU (docs/expert_systems.md: 1.4 ms windows, 2.8 ms of GPU
    work): its last iteration now ends with the GPU work launched in it (SQL)."""
    ends = recorded.gpu_side_ends("no_emit_nvtx")
    keys = recorded.key_ends("no_emit_nvtx")
    assert ends[-1] > keys[-1]  # premise
    out = cli(recording("no_emit_nvtx"), tmp_path / "out", reports="summary")
    values = csv_sections(out, "summary")["Summary Report"].values()
    assert values["Wall Clock Time (ns)"] == ends[-1] - recorded.windows("no_emit_nvtx")[0][0]


# --- 2. DLProf-exact figures and layout -----------------------------------------------------------

def unassociated_export(path: Path) -> Path:
    """GIVEN two steps, each an op (a user range launching a 100 ns kernel), and CUDA calls outside every
    range: cudaDeviceSynchronize before the first step and between the steps (200 and 300 ns), and a
    launch between the steps whose kernel runs 50 ns."""
    b = ExportBuilder()
    b.api(100, 300, "cudaDeviceSynchronize_v3020")
    for i in range(2):
        t = 1000 + 10_000 * i
        b.range(t, t + 5000, "train_step")
        b.range(t + 100, t + 2000, "forward")
        b.launch(t + 200, t + 300, t + 400, t + 500, "k")
    b.api(7000, 7300, "cudaDeviceSynchronize_v3020")
    b.launch(8000, 8100, 8200, 8250, "loose_kernel")
    return b.write(path)


def test_cuda_calls_outside_every_range_are_unassociated_ops(tmp_path: Path) -> None:
    out = cli(unassociated_export(tmp_path / "loose.sqlite"), tmp_path / "out")
    detail = csv_sections(out, "detailed")["All Iterations"].frame().set_index("Op ID")
    sync = detail.loc["CUDADEVICESYNCHRONIZE_V3020_1"]
    assert (sync["Op Name"], sync["Direction"], sync["Op Type"], sync["Data Type"]) == (
        "unassociated_cudaDeviceSynchronize_v3020", "", "cudaDeviceSynchronize_v3020", "")
    assert sync["No. Calls"] == 2 and sync["Total CPU Time (ns)"] == 200 + 300
    launch = detail.loc["CUDALAUNCHKERNEL_V7000_1"]
    assert launch["No. Calls"] == 1 and launch["Total GPU Time (ns)"] == 50  # with the GPU work it launched
    # All ops counts them; the group report's "/" does not, its _CompleteModel_ row does
    ops = csv_sections(out, "summary")["All Ops"].frame().set_index("")
    assert ops.loc["All ops", "# Ops"] == 3 and ops.loc["All ops", "CPU Time (ns)"] == 2 * 1900 + 500 + 100
    groups = csv_sections(out, "group_op")["Group Op Report"].frame().set_index("Name")
    assert list(groups.index) == ["/", "_CompleteModel_"]  # `forward` encloses no range: an op at "/"
    assert groups.loc["/", "Num Calls Aggregated"] == 2 and groups.loc["_CompleteModel_", "Num Calls Aggregated"] == 5
    kernels = csv_sections(out, "kernel")["Kernel Report"].frame().set_index("Kernel Name")
    assert kernels.loc["loose_kernel", "Op Name"] == "unassociated_cudaLaunchKernel_v7000"


def test_unassociated_calls_are_one_op_per_occurrence_in_the_iteration(tmp_path: Path) -> None:
    """DLProf 1.8's detailed report (MohanadOdema/DLProf, dlprof_detailed.csv) has two ops
    ``CUDADEVICESYNCHRONIZE_V3020_1`` and ``_2``, one call each, for two cudaDeviceSynchronize calls outside
    every range, numbered like the ``CUDA_n`` ops. GIVEN three steps, the first two followed by two such
    calls (200 and 300 ns after step 0, 400 and 500 ns after step 1), each pair inside the next step's
    iteration window (windows end at the key ranges' ends): the k-th call of an iteration is the op ``_k``."""
    b = ExportBuilder()
    for i, calls in enumerate([(200, 300), (400, 500), ()]):
        t = 10_000 * i
        b.range(t, t + 5000, "train_step")
        b.range(t + 100, t + 2000, "forward")
        b.launch(t + 200, t + 300, t + 400, t + 500, "k")
        for k, length in enumerate(calls):
            b.api(t + 6000 + 1000 * k, t + 6000 + 1000 * k + length, "cudaDeviceSynchronize_v3020")
    out = cli(b.write(tmp_path / "two_syncs.sqlite"), tmp_path / "out")
    table = csv_sections(out, "detailed")["All Iterations"].frame()
    sync = table[table["Op Type"] == "cudaDeviceSynchronize_v3020"].set_index("Op ID")
    assert sync.index.tolist() == ["CUDADEVICESYNCHRONIZE_V3020_1", "CUDADEVICESYNCHRONIZE_V3020_2"]
    assert set(sync["Op Name"]) == {"unassociated_cudaDeviceSynchronize_v3020"}
    assert sync["No. Calls"].tolist() == [2, 2]  # one call per iteration
    assert sync["Total CPU Time (ns)"].tolist() == [200 + 400, 300 + 500]
    # DLProf's row order: Op IDs as plain strings ("CUDADEVICE..." before "CUDA_1", 'D' < '_')
    ids = table["Op ID"].tolist()
    assert ids == sorted(ids)


def test_detailed_rows_in_dlprofs_plain_string_order(tmp_path: Path) -> None:
    """DLProf 1.8's dlprof_detailed.csv (MohanadOdema/DLProf) lists ``CUDA_1, CUDA_10, CUDA_11, CUDA_2``.
    GIVEN one step with eleven ``cuda`` user ops (ranges named ``cuda`` enclosing nothing)."""
    b = ExportBuilder()
    b.range(0, 100_000, "train_step")
    for k in range(11):
        b.range(1000 + 1000 * k, 1500 + 1000 * k, "cuda")
    out = cli(b.write(tmp_path / "eleven.sqlite"), tmp_path / "out")
    ids = csv_sections(out, "detailed")["All Iterations"].frame()["Op ID"].tolist()
    assert ids[:4] == ["CUDA_1", "CUDA_10", "CUDA_11", "CUDA_2"]


def test_dlprof_export_unassociated_calls_are_the_sql_ones(tmp_path: Path) -> None:
    """On the DLProf export: the outermost CUDA calls that no NVTX range of their thread encloses (SQL)."""
    calls = dlprof_sql("""
        SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
        WHERE NOT EXISTS (SELECT 1 FROM NVTX_EVENTS e WHERE e.globalTid = r.globalTid AND e.eventType = 59
                          AND e.start <= r.start AND e."end" >= r."end")
          AND NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME o WHERE o.globalTid = r.globalTid
                          AND o.rowid <> r.rowid AND o.start <= r.start AND o."end" >= r."end")
        GROUP BY s.value""")
    ctx = context(DLPROF)
    ops = ctx.ops.ops
    loose = ops[ops["op_name"].str.startswith("unassociated_")]
    got = ctx.ops.instances[ctx.ops.instances["key"].isin(loose.index)].groupby("key").size()
    assert sorted(zip(loose.loc[got.index, "op_type"], got, strict=True)) == sorted(calls)
    assert "CUDADEVICESYNCHRONIZE_V3020_1" in set(loose["op_id"])


def short_name_export(path: Path) -> Path:
    """GIVEN one conv2d op (emit_nvtx) launching fft2d_r2c_32x32 twice under two demangled names (two
    template instances) and one other kernel, and one memcpy and two memsets issued by three calls of
    two names."""
    b = ExportBuilder()
    b.range(0, 10_000, "train_step")
    b.range(100, 9000, "aten::conv2d, seq = 1, op_id = 1")
    b.launch(200, 300, 400, 500, "void fft2d_r2c_32x32<float, (bool)0>(float2 *)", short="fft2d_r2c_32x32")
    b.launch(600, 700, 800, 950, "void fft2d_r2c_32x32<float, (bool)1>(float2 *)", short="fft2d_r2c_32x32")
    b.launch(1000, 1100, 1200, 1300, "void flip_filter<float>(float *)", short="flip_filter")
    b.copy(2000, 2100, 2200, 2300, call="cudaMemcpyAsync_v3020")
    b.set(3000, 3100, 3200, 3300, call="cudaMemsetAsync_v3020")
    b.set(4000, 4100, 4200, 4300, call="cudaMemsetAsync_v3020")
    return b.write(path)


def test_a_kernel_is_its_short_name(tmp_path: Path) -> None:
    out = cli(short_name_export(tmp_path / "short.sqlite"), tmp_path / "out")
    kernels = csv_sections(out, "summary")["All Kernels"].frame().set_index("")
    # 2 kernels (fft2d_r2c_32x32 once) + 2 memory API names (cudaMemcpyAsync, cudaMemsetAsync)
    assert kernels["# Kernels"].to_dict() == {"All kernels": 4, "Kernels using TC": 0, "Memory": 2,
                                              "All other kernels": 2}
    report = csv_sections(out, "kernel")["Kernel Report"].frame().set_index("Kernel Name")
    assert sorted(report.index) == ["fft2d_r2c_32x32", "flip_filter"]  # one row per short name and op
    assert report.loc["fft2d_r2c_32x32", "Calls"] == 2 and report.loc["fft2d_r2c_32x32", "Total GPU Time (ns)"] == 250
    tensor = csv_sections(out, "tensor_core")["Tensor Core Report"].frame().iloc[0]
    assert tensor["Total Kernel Count"] == 2 and tensor["Non-TC Kernel Count"] == 2  # distinct names, not 3 launches
    assert tensor["Non-TC Kernel Names"] == "fft2d_r2c_32x32, flip_filter"


def test_dlprof_export_kernels_and_memory_as_dlprof_counts_them(tmp_path: Path) -> None:
    """The issue's figure: Memory is 3 (cudaMemcpyAsync, cudaMemcpy, cudaMemsetAsync); # Kernels counts
    short names (SQL)."""
    out = cli(need(DLPROF), tmp_path / "out", reports="summary,kernel")
    kernels = csv_sections(out, "summary")["All Kernels"].frame().set_index("")
    memory_calls = dlprof_sql("""
        SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
        WHERE r.correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY
                                  UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET)""")
    assert sorted(n for (n,) in memory_calls) == ["cudaMemcpyAsync_v3020", "cudaMemcpy_v3020", "cudaMemsetAsync_v3020"]
    assert kernels.loc["Memory", "# Kernels"] == 3
    (short,) = dlprof_sql("SELECT COUNT(DISTINCT shortName) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    (long,) = dlprof_sql("SELECT COUNT(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert short < long  # premise: fft2d_r2c_32x32 and others have several template instances
    assert kernels.loc["All other kernels", "# Kernels"] + kernels.loc["Kernels using TC", "# Kernels"] == short
    report = csv_sections(out, "kernel")["Kernel Report"].frame()
    assert not report.duplicated(["Kernel Name", "Op ID"]).any()
    assert (report["Kernel Name"] == "fft2d_r2c_32x32").sum() == report[report["Kernel Name"] == "fft2d_r2c_32x32"][
        "Op ID"].nunique()


def test_no_key_node_one_iteration_from_session_time_zero(tmp_path: Path) -> None:
    """DLProf: without a key node the one iteration spans [0, end of the profile], so CPU % and Other %
    are shares of that. Hand-built: the first event at 5 ms, the last ends at 8 ms."""
    b = ExportBuilder()
    b.range(5 * MS, 6 * MS, "work")
    b.launch(5 * MS + 100, 5 * MS + 200, 5 * MS + 300, 7 * MS, "k")
    b.api(7 * MS, 8 * MS, "cudaDeviceSynchronize_v3020")
    out = cli(b.write(tmp_path / "nokey.sqlite"), tmp_path / "out", "--key_node=train_step", reports="summary")
    values = csv_sections(out, "summary")["Summary Report"].values()
    assert values["Wall Clock Time (ns)"] == 8 * MS
    # 0-5 ms: nothing ran (Other); kernel 5.0003-7 ms; CPU: the range and calls outside the kernel
    assert values["Other Duration %"] == round(100 * (5 * MS) / (8 * MS), 1)
    assert values["CPU Duration %"] == round(100 * (300 + MS) / (8 * MS), 1)


def test_dlprof_export_wall_clock_from_time_zero(tmp_path: Path) -> None:
    """The DLProf export has no key node: the wall clock is the end of its last event (SQL), from 0."""
    out = cli(need(DLPROF), tmp_path / "out", reports="summary")
    ends = [dlprof_sql(f'SELECT MAX("end") FROM {t}')[0][0] for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")]
    assert csv_sections(out, "summary")["Summary Report"].values()["Wall Clock Time (ns)"] == max(ends)


DLPROF_SYSTEM = ["GPU Count", "GPU Name(s)", "CPU Model", "GPU Driver Version", "Framework", "CUDA Version",
                 "cuDNN Version", "NSys Version", "DLProf Version", "DLProf Build"]  # reference section 1.4


def test_dlprof_export_summary_layout(tmp_path: Path) -> None:
    out = cli(need(DLPROF), tmp_path / "out", reports="summary")
    text = (out / "dlagg_summary.csv").read_text()
    sections = dlprof_csv.parse(text)
    assert list(sections) == ["System Config", "Summary Report", "Iterations", "All Ops", "All Kernels"]
    system = sections["System Config"].values()
    # DLProf's rows in DLProf's order, where the export has the data, then dlagg's version
    labels = list(system)
    assert labels[-1] == "dlagg Version"
    assert [label for label in DLPROF_SYSTEM if label in labels] == labels[:-1]
    assert "CUDA Driver Version" not in labels and system["CUDA Version"] == 11.7  # CudaDriverVersion 11070
    assert system["GPU Driver Version"] == "515.43.04"  # NvDriverVersion 5154304
    assert "Key Node" not in sections["Iterations"].values()
    assert json_table(out, "summary", "iterations_summary")["key_node"].tolist() == ["(not found)"]  # JSON says it
    # one iteration without a key node has no CPU side to compare: no note
    assert not [w for w in json_warnings(out, "summary") if "CPU-side and GPU-side" in w]
    # labels bare, as DLProf writes them: no line starts with a quote
    assert not [line for line in text.splitlines() if line.startswith('"')]
    assert "\nAll ops," in text and "\nMemory," in text and "\nGPU Count,1\n" in text


@pytest.mark.parametrize(("raw", "shown"), [("5154304", "515.43.04"), ("58015904", "580.159.04"),
                                            ("5303002", "530.30.02"), ("5452906", "545.29.06"),
                                            ("535.129.03", "535.129.03")])  # the public exports' values
def test_driver_version(raw: str, shown: str) -> None:
    assert driver_version(raw) == shown


def test_framework_and_cudnn_from_a_system_info_table(tmp_path: Path) -> None:
    b = ExportBuilder(system_env={"NvDriverVersion": "5154304", "CudaDriverVersion": "11070"},
                      system_info={"Framework": "PyTorch 1.10.1+cu102", "cuDNN Version": "8.2.1"})
    b.range(0, 100, "train_step")
    b.launch(10, 20, 30, 40, "k")
    out = cli(b.write(tmp_path / "info.sqlite"), tmp_path / "out", reports="summary")
    system = csv_sections(out, "summary")["System Config"].values()
    assert list(system)[:7] == ["GPU Count", "GPU Name(s)", "GPU Driver Version", "Framework", "CUDA Version",
                                "cuDNN Version", "NSys Version"]
    assert (system["Framework"], system["cuDNN Version"], system["CUDA Version"]) == (
        "PyTorch 1.10.1+cu102", "8.2.1", 11.7)


def test_input_shapes_in_dlprofs_labelled_form() -> None:
    # the example: a conv2d over a batch of 32 images 3x32x32, 6 filters 3x3, a bias of 6
    shapes = [labelled_shape("conv2d", k, s) for k, s in enumerate([(32, 3, 32, 32), (6, 3, 3, 3), (6,)])]
    assert "; ".join(shapes) == "<N:32, C:3, H:32, W:32>; <K:6, C:3, R:3, S:3>; <6>"
    # a linear layer's input and weight, as DLProf 1.8's dlprof_iteration.csv (MohanadOdema/DLProf, w_Relu) labels
    # them: "<N:32, K:400>; <M:120, K:400>; <120>"
    shapes = [labelled_shape("linear", k, s) for k, s in enumerate([(32, 400), (120, 400), (120,)])]
    assert "; ".join(shapes) == "<N:32, K:400>; <M:120, K:400>; <120>"
    assert labelled_shape("linear", 0, (4, 7, 400)) == "<4, 7, 400>"  # DLProf's labels are for 2-D inputs


def modop_marker(op: str, *args: object) -> str:
    """A DLProf/PyProf {'mod','op','args'} marker: a tuple argument is a tensor's shape, a [name, value] list a
    non-tensor argument (name '': positional)."""
    out = []
    for arg in args:
        if isinstance(arg, tuple):
            out.append({"name": "", "type": "tensor", "shape": arg, "dtype": "float32"})
        else:
            name, value = arg
            out.append({"name": name, "type": type(value).__name__, "value": value})
    return repr({"mod": "torch.nn.functional", "op": op, "args": out})


def test_output_shapes_where_the_marker_determines_them(tmp_path: Path) -> None:
    """DLProf 1.8 wrote Output Shapes for PyTorch (MohanadOdema/DLProf, w_Relu/dlprof_iteration.csv): conv2d of
    <N:32, C:3, H:32, W:32> by <K:6, C:3, R:3, S:3> (nn.Conv2d's stride 1, padding 0) gives <N:32, K:6, P:30, Q:30>;
    linear of <N:32, K:400> by <M:120, K:400> gives <N:32, M:120>. GIVEN those markers with the stride and
    padding recorded (positionally), a conv2d with stride 2 and padding 1 by name (by hand: (32 + 2 - 3) // 2 + 1
    = 16), and a conv2d whose marker records its tensors only (DLProf's plugin: stride and padding unknown)."""
    b = ExportBuilder()
    b.range(0, 100_000, "train_step")
    markers = [modop_marker("conv2d", (32, 3, 32, 32), (6, 3, 3, 3), (6,), ["", (1, 1)], ["", (0, 0)]),
               modop_marker("linear", (32, 400), (120, 400), (120,)),
               modop_marker("conv2d", (32, 3, 32, 32), (6, 3, 3, 3), (6,), ["stride", 2], ["padding", 1]),
               modop_marker("conv2d", (32, 3, 32, 32), (6, 3, 3, 3), (6,))]
    for k, marker in enumerate(markers):
        t = 1000 + 10_000 * k
        b.range(t, t + 5000, marker)
        b.launch(t + 100, t + 200, t + 300, t + 400, f"kernel{k}")
    out = cli(b.write(tmp_path / "shapes.sqlite"), tmp_path / "out", reports="iteration")
    table = csv_sections(out, "iteration")["Iteration Report"].frame().set_index("Kernel Name")
    assert table.loc["kernel0", "Output Shapes"] == "<N:32, K:6, P:30, Q:30>"
    assert table.loc["kernel1", "Output Shapes"] == "<N:32, M:120>"
    assert table.loc["kernel1", "Input Shapes"] == "<N:32, K:400>; <M:120, K:400>; <120>"
    assert table.loc["kernel2", "Output Shapes"] == "<N:32, K:6, P:16, Q:16>"
    assert table.loc["kernel3", "Output Shapes"] == ""  # not determined: not invented
    assert (table["Parameters"] == "").all()


def test_dlprof_export_iteration_report_columns(tmp_path: Path) -> None:
    out = cli(need(DLPROF), tmp_path / "out", reports="iteration")
    table = csv_sections(out, "iteration")["Iteration Report"].frame()
    # DLProf's columns, in its order (reference section 1.4)
    assert list(table.columns)[-5:] == ["Data Types", "Input Shapes", "Parameters", "Output Shapes",
                                        "Long Kernel Name"]
    # the markers of this export record tensors only (no stride or padding) and its linear layer's shapes do not
    # fit ((1, 10816) by (120, 400): the run failed there), so no output shape is determined (docs/ops.md)
    assert (table["Parameters"] == "").all() and (table["Output Shapes"] == "").all()
    # the first conv2d's marker: input (1, 3, 32, 32), weight (6, 3, 3, 3), bias (6,) (SQL)
    (marker,) = dlprof_sql("SELECT text FROM NVTX_EVENTS WHERE text LIKE ? ORDER BY start LIMIT 1",
                           ("{'mod': 'torch.nn.functional', 'op': 'conv2d'%",))[0]
    assert "'shape': (1, 3, 32, 32)" in marker and "'shape': (6, 3, 3, 3)" in marker
    conv = table[table["Op ID"] == "CONV2D_1"]
    assert set(conv["Input Shapes"]) == {"<N:1, C:3, H:32, W:32>; <K:6, C:3, R:3, S:3>; <6>"}


def group_export(path: Path) -> Path:
    """GIVEN three steps; `forward` holds op a (CPU 100, then 50 + 70, then 300 ns: 100, 120 and 300 per
    step); op b under `extra` runs in the second step only (40 ns)."""
    b = ExportBuilder()
    calls = [[100], [50, 70], [300]]
    for i, times in enumerate(calls):
        t = 10_000 * i
        b.range(t, t + 9000, "train_step")
        b.range(t + 100, t + 5000, "forward")
        s = t + 200
        for cpu in times:
            b.range(s, s + cpu, "a")
            s += cpu + 10
        if i == 1:
            b.range(t + 6000, t + 7000, "extra")
            b.range(t + 6100, t + 6140, "b")
    return b.write(path)


def test_group_report_is_dlprofs_group_op_with_per_iteration_statistics(tmp_path: Path) -> None:
    out = cli(group_export(tmp_path / "groups.sqlite"), tmp_path / "out", reports="group_node")
    assert (out / "dlagg_group_op.csv").exists() and not (out / "dlagg_group_node.csv").exists()
    groups = csv_sections(out, "group_op")["Group Op Report"].frame().set_index("Name")
    assert list(groups.index) == ["/", "/extra/", "/forward/", "_CompleteModel_"]
    forward = groups.loc["/forward/"]
    assert forward["Num Calls Aggregated"] == 4 and forward["Total CPU Time (ns)"] == 520
    # per iteration (100, 120, 300), not per call (100, 50, 70, 300)
    assert (forward["Avg. CPU Time (ns)"], forward["Min CPU Time (ns)"], forward["Max CPU Time (ns)"]) == (
        round(520 / 3, 1), 100, 300)
    extra = groups.loc["/extra/"]  # in one of three iterations: 0 in the others
    assert (extra["Avg. CPU Time (ns)"], extra["Min CPU Time (ns)"], extra["Max CPU Time (ns)"]) == (
        round(40 / 3, 1), 0, 40)
    assert groups.loc["_CompleteModel_", "Total CPU Time (ns)"] == 560


def test_dlprof_export_row_orders(tmp_path: Path) -> None:
    out = cli(need(DLPROF), tmp_path / "out")
    detail = csv_sections(out, "detailed")["All Iterations"].frame()
    ids = detail["Op ID"].tolist()
    # DLProf 1.8's dlprof_detailed.csv of this model (MohanadOdema/DLProf): Op IDs as plain strings,
    # "CONV2D_2", "CUDADEVICESYNCHRONIZE_V3020_1", "CUDA_1", "CUDA_10", "CUDA_11", "CUDA_2"
    assert ids == sorted(ids) and ids.index("CUDA_10") < ids.index("CUDA_2")
    assert ids.index("CUDADEVICESYNCHRONIZE_V3020_1") < ids.index("CUDA_1")
    op_types = csv_sections(out, "op_type")["Op Type Summary Report"].frame()["Op Type"].tolist()
    assert op_types == sorted(op_types)
    kernel = csv_sections(out, "kernel")["Kernel Report"].frame().fillna("")
    pairs = list(zip(kernel["Op Name"], kernel["Kernel Name"], strict=True))
    assert pairs == sorted(pairs)
    iteration = csv_sections(out, "iteration")["Iteration Report"].frame().fillna("")
    rows = list(zip(iteration["Op Name"], iteration["Kernel Name"], iteration["GPU Start Time (ns)"], strict=True))
    assert rows == sorted(rows)


def test_repeated_backward_nodes_are_written_in_brackets(tmp_path: Path) -> None:
    """Under AMP a linear's backward has two ToCopyBackward0 nodes (weight and bias casts): the second is
    ToCopyBackward0[2], as DLProf writes repeats."""
    b = ExportBuilder()
    b.range(0, 100_000, "train_step")
    b.range(100, 10_000, "aten::linear, seq = 5, op_id = 1")
    b.launch(200, 300, 400, 500, "gemm")
    for j in range(2):
        s = 20_000 + 10_000 * j
        b.range(s, s + 5000, "ToCopyBackward0, seq = 5, op_id = 9", tid=999)
        b.launch(s + 100, s + 200, s + 300, s + 400, "cast", tid=999)
    names = set(build_reports(context(b.write(tmp_path / "amp.sqlite")), ["detail"])["detail"].main.frame["op_name"])
    assert {"ToCopyBackward0", "ToCopyBackward0[2]"} <= names and not any("(2)" in n for n in names)


def test_amp_advised_to_a_small_fp32_model_as_dlprof_did(tmp_path: Path) -> None:
    """The DLProf export (an FP32 CNN on a Turing GPU): DLProf reported AMP; dlagg does too, at low
    severity, whatever the model's size (docs/expert_systems.md)."""
    found = {f.detector: f for f in run_detectors(context(need(DLPROF)))[0]}
    amp = found["amp"]
    assert amp.severity == "low" and "Tensor Cores" in amp.problem
    assert "CONV2D_1" in amp.ops and "CONV2D_2" in amp.ops
    # compute capability 7.5 (TARGET_INFO_GPU, SQL): FP16 with a GradScaler, not bf16
    assert dlprof_sql("SELECT computeMajor, computeMinor FROM TARGET_INFO_GPU") == [(7, 5)]
    assert "float16" in amp.recommendation and "bfloat16" not in amp.recommendation


def test_dali_advice_only_where_data_loading_is_exposed() -> None:
    """No standalone "No DALI ops detected" finding (docs/expert_systems.md): DALI is named in the
    input-pipeline advice of a run whose loading is exposed, and nowhere else."""
    dlprof = run_detectors(context(need(DLPROF)))[0]
    assert not any("DALI" in f.problem + f.recommendation for f in dlprof)
    loader = {f.detector: f for f in run_detectors(context(recording("dataloader_bound")))[0]}
    assert "NVIDIA DALI" in loader["input_pipeline"].recommendation


# --- 3. One definition per figure, no contradictions -----------------------------------------------

def test_gpu_utilization_is_one_figure_in_summary_and_expert_text(tmp_path: Path) -> None:
    """resnet_amp is GPU-underutilized: the finding quotes the summary's GPU Utilization % (same name,
    same definition: time with a kernel running) for the aggregated iterations and for its median one."""
    out = cli(recording("resnet_amp"), tmp_path / "out", reports="summary,expert_systems")
    summary = csv_sections(out, "summary")["Summary Report"].values()
    finding = csv_sections(out, "expert_systems_detail")["Expert Systems Feedback"].frame().set_index("Detector").loc[
        "underutilized_gpu"]
    assert f"GPU Utilization {summary['GPU Utilization %']:.1f}%" in finding["Evidence"]
    per = json_table(out, "summary", "iterations")
    per = per[per["aggregated"]]
    median = float(np.median(per["gpu_busy_ns"] / per["duration_ns"]))
    assert f"GPU Utilization is {summary['GPU Utilization %']:.1f}% (the summary's figure" in finding["Problem"]
    assert f"{100 * median:.1f}% in a typical iteration" in finding["Problem"]
    assert "kernels or copies) running" not in finding["Problem"]  # the old second GPU-busy figure


def test_tensor_core_utilization_is_one_figure_in_summary_and_expert_text(tmp_path: Path) -> None:
    out = cli(recording("resnet_fp32"), tmp_path / "out", reports="summary,expert_systems")
    summary = csv_sections(out, "summary")["Summary Report"].values()
    amp = csv_sections(out, "expert_systems_detail")["Expert Systems Feedback"].frame().set_index("Detector").loc["amp"]
    assert f"summary: Tensor Core Kernel Utilization % {summary['Tensor Core Kernel Utilization %']:.1f}" in amp[
        "Evidence"]


def test_tensor_core_utilization_row_is_always_written_and_the_warning_says_why(tmp_path: Path) -> None:
    """DLProf's summary has the row `Tensor Core Kernel Utilization %` in every file (reference section 1.4).
    GIVEN a run without NVTX ranges (no op, so no Tensor-Core-eligible op) whose kernels are a Tensor Core GEMM
    of 300 ns and another kernel of 100 ns: the row is there, 0.0 (the TC share of eligible ops' kernel time,
    which has none), and the warning says so and quotes the Tensor Core share of all kernel time,
    300 / (300 + 100) = 75.0 %, instead of reading as "no Tensor Core work"."""
    b = ExportBuilder()
    b.launch(100, 200, 1000, 1300, "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_"
             "tensor16x8x16_kernel")
    b.launch(300, 400, 2000, 2100, "elementwise_kernel")
    out = cli(b.write(tmp_path / "no_ranges.sqlite"), tmp_path / "out", reports="summary")
    sections = csv_sections(out, "summary")
    assert sections["Summary Report"].values()["Tensor Core Kernel Utilization %"] == 0.0
    kernels = sections["All Kernels"].frame().set_index("")
    assert kernels.loc["Kernels using TC", "GPU Time (ns)"] == 300  # premise: the GEMM counts as a TC kernel
    (warning,) = [w for w in json_warnings(out, "summary") if "Tensor Core Kernel Utilization" in w]
    assert "is 0.0 by definition, not a measure of Tensor Core use" in warning
    assert "75.0% of all kernel time ran in Tensor Core kernels" in warning


def test_ranks_no_eligible_lines_of_the_tensor_report_become_one() -> None:
    """Each rank's line quotes its own Tensor Core share (hand-built: 75.0 % and 10.0 %): a job's tensor report
    says the cause once, without a rank's share, keeping the count of ops of other types using Tensor Cores."""
    from dlagg.reports.base import Report
    from dlagg.reports.detail import no_eligible_warning
    from dlagg.reports.tensor_core import _job_warnings

    ranks = [Report("tensor", "tensor_core", (), warnings=("tensor: " + no_eligible_warning(2, 75.0), "other")),
             Report("tensor", "tensor_core", (), warnings=("tensor: " + no_eligible_warning(0, 10.0),))]
    assert _job_warnings(ranks) == ("tensor: " + no_eligible_warning(2), "other")
    assert _job_warnings(ranks[:1]) == ranks[0].warnings  # one rank: its own line, word for word the summary's


def test_no_warning_contradicts_the_report(tmp_path: Path) -> None:
    """dataloader_bound: its user-range ops `forward` and `backward` run TF32 convolutions (Ops using TC: 2)
    but no op is Tensor-Core-eligible by type: the warning about the missing TC utilization says so."""
    result = run(Options(nsys_database=recording("dataloader_bound"), reports=("summary", "tensor"),
                         formats=("csv",), output_path=tmp_path, suppress_tb_files=True, verbosity="quiet"))
    summary = {r.name: r for r in result.reports}["summary"]
    using = summary.table("all_ops").frame.set_index("ops").loc["Ops using TC", "op_count"]
    assert using == 2
    (warning,) = [w for w in result.warnings if "Tensor Core Kernel Utilization" in w]
    assert warning.startswith("summary, tensor: ")  # one cause, one warning
    assert "2 op(s) of other types ran Tensor Core kernels (All Ops: Ops using TC" in warning


def test_kernel_report_is_per_kernel_and_op_and_its_docs_say_so(tmp_path: Path) -> None:
    out = cli(recording("resnet_amp"), tmp_path / "out", reports="kernel")
    table = csv_sections(out, "kernel")["Kernel Report"].frame()
    assert not table.duplicated(["Kernel Name", "Op ID", "Op Name", "Direction"]).any()
    assert table["Kernel Name"].duplicated().any()  # a kernel launched by several ops has several rows
    docs = (ROOT / "docs" / "reports.md").read_text()
    section = docs[docs.index("## kernel"):]
    section = section[:section.index("\n## ", 1)]
    assert "One row per (kernel, op)" in section and "One row per kernel name" not in section


# --- 4. Advice fitted to the evidence ---------------------------------------------------------------

def launch_bound(path: Path, *, kernel: str = "elementwise_kernel", call: str = "cudaLaunchKernel_v7000",
                 emit: bool = False) -> Path:
    """GIVEN 6 steps of 1 ms, each 40 kernels of 5 us launched every 20 us by 10 us calls: the GPU waits
    about 15 us for the host before each (60% of the step). `call` launches them, `emit` wraps each in
    an emit_nvtx-style op range."""
    b = ExportBuilder()
    for i in range(6):
        t = i * MS
        b.range(t, t + MS, "train_step")
        for j in range(40):
            a = t + 10_000 + 20_000 * j
            if emit:
                b.range(a - 1000, a + 12_000, f"aten::add, seq = {40 * i + j}, op_id = {40 * i + j}")
            corr = b.api(a, a + 10_000, call)
            b.kernel(a + 11_000, a + 16_000, kernel, corr=corr)
    return b.write(path)


@pytest.mark.parametrize(("case", "kw", "absent", "present"), [
    ("eager", {"emit": True}, [], ["capture the step in a CUDA graph", "torch.compile", "emit_nvtx"]),
    ("graphed", {"call": "cudaGraphLaunch_v10000"}, ["capture the step in a CUDA graph", "emit_nvtx"],
     ["CUDA graphs it already replays"]),
    ("triton", {"kernel": "triton_poi_fused_add_0"}, ["torch.compile", "emit_nvtx"],
     ["capture the step in a CUDA graph"]),
])
def test_launch_advice_only_what_is_not_done_yet(tmp_path: Path, case: str, kw: dict, absent: list[str],
                                                  present: list[str]) -> None:
    found = {f.detector: f for f in run_detectors(context(launch_bound(tmp_path / f"{case}.sqlite", **kw)))[0]}
    finding = found["launch_bound"]
    for text in absent:
        assert text not in finding.recommendation, text
    for text in present:
        assert text in finding.recommendation, text
    # the evidence says what was checked
    graphed = 240 if case == "graphed" else 0
    triton = 240 if case == "triton" else 0
    emit = 240 if case == "eager" else 0
    assert (f"{graphed} of 240 kernels launched by CUDA graphs (cudaGraphLaunch); {triton} Triton kernels "
            f"(torch.compile/Inductor); {emit} emit_nvtx ranges") in finding.evidence


def test_dominant_kernel_of_a_synchronous_run_with_its_wall_clock_share(tmp_path: Path) -> None:
    """A CUDA exercise: each 1 ms step launches one kernel and waits for it (cudaDeviceSynchronize); the
    kernel runs 790 us, 79% of the wall clock. Nothing is queued behind it, yet the host waits for it:
    it is on the critical path."""
    b = ExportBuilder()
    for i in range(10):
        t = i * MS
        b.range(t, t + MS, "train_step")
        b.launch(t + 10_000, t + 20_000, t + 100_000, t + 890_000, "solve_kernel")
        b.api(t + 30_000, t + 900_000, "cudaDeviceSynchronize_v3020")
    found = {f.detector: f for f in run_detectors(context(b.write(tmp_path / "sync.sqlite")))[0]}
    finding = found["dominant_kernels"]
    assert finding.problem.startswith("1 kernel(s) take 100.0% of the GPU time and 79.0% of the wall clock")
    assert finding.time_at_stake_ns == pytest.approx(790_000)


def test_gaussian_elimination_gets_a_dominant_kernel_finding() -> None:
    """Rodinia's Gaussian elimination (public export): synchronous, Fan2 is 99.5% of the GPU time; the
    finding gives the kernels' share of the wall clock too (SQL: kernel time over the one iteration
    from time 0 to the profile's end)."""
    path = need(GAUSSIAN)
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        per = dict(conn.execute("""SELECT s.value, SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                   JOIN StringIds s ON s.id = k.shortName GROUP BY s.value""").fetchall())
        end = max(conn.execute(f'SELECT MAX("end") FROM {t}').fetchone()[0] for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API"))  # every event table the export has
    conn.close()
    total = sum(per.values())
    assert round(100 * per["Fan2"] / total, 1) == 99.5  # the figure
    finding = {f.detector: f for f in run_detectors(context(path))[0]}["dominant_kernels"]
    assert f"Fan2 ({100 * per['Fan2'] / total:.1f}%)" in finding.problem
    assert f"{100 * total / end:.1f}% of the wall clock" in finding.problem


def test_no_finding_with_nothing_measurable_at_stake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlagg.expert import base
    from dlagg.expert.base import Finding

    def tiny(facts: object) -> list[Finding]:
        return [Finding("tiny", "p", "r", "e", 400.0, "est")]  # 0.0004 ms: shown as 0.000 ms

    monkeypatch.setitem(base.DETECTORS, "tiny", tiny)
    found, outcomes = run_detectors(context(unassociated_export(tmp_path / "run.sqlite")))
    assert "tiny" not in {f.detector for f in found}
    assert {o.detector: o.status for o in outcomes}["tiny"] == "silent"


@pytest.mark.parametrize("name", ["cuda_basic", "resnet_fp32", "h2d_heavy", "cuda_graph", "no_emit_nvtx"])
def test_every_finding_has_something_measurable_at_stake(name: str) -> None:
    for finding in run_detectors(context(recording(name)))[0]:
        assert finding.time_at_stake_ns is None or round(finding.time_at_stake_ns / MS, 3) > 0, finding.detector


def test_one_iteration_is_singular() -> None:
    assert plural(1, "iteration") == "1 iteration" and plural(2, "iteration") == "2 iterations"
    path = need(SHARED / "public" / "cestwc__balinski-and-gomory-cuda__report19.sqlite")
    found = {f.detector: f for f in run_detectors(context(path))[0]}
    assert "blocking calls in 1 iteration)" in found["host_sync"].problem
    assert not any("1 iterations" in f.problem + f.evidence + f.recommendation for f in found.values())


def test_one_warning_per_cause(tmp_path: Path) -> None:
    """Every CUDA call lies inside the key node and no other range exists: no op at all. The detail,
    op_type, group_node and tensor reports each notice it; the run says it once."""
    b = ExportBuilder()
    for i in range(3):
        b.range(i * 1000, i * 1000 + 900, "train_step")
        b.launch(i * 1000 + 10, i * 1000 + 20, i * 1000 + 30, i * 1000 + 40, "k")
    result = run(Options(nsys_database=b.write(tmp_path / "run.sqlite"), reports=("all",), formats=(),
                         output_path=tmp_path, suppress_tb_files=True, verbosity="quiet"))
    about = [w for w in result.warnings if "defines an op" in w]
    assert len(about) == 1
    heads = about[0].split(": ")[0].split(", ")
    assert {"detail", "op_type", "group_node", "tensor"} <= set(heads)
    assert len(result.warnings) == len(set(w.split(": ", 1)[-1] for w in result.warnings))


# --- 6. The expert-systems CSV keeps DLProf's layout ------------------------------------------------

def test_expert_csv_is_one_table_statuses_in_json_and_tensorboard(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([f"--nsys_database={recording('h2d_heavy')}", "--reports=expert_systems", "--formats=csv,json",
                 f"--output_path={out}", "--verbosity=quiet"]) == 0
    text = (out / "dlagg_expert_systems.csv").read_text()
    assert list(dlprof_csv.parse(text)) == ["Expert Systems Feedback"]
    assert "\n\n" not in text.strip() and "Detector,Status" not in text
    statuses = json_table(out, "expert_systems", "detectors").set_index("detector")["status"]
    assert statuses["launch_bound"] == "fired" and statuses["key_node"] == "silent"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "event_files" / "dlagg"), size_guidance={"tensors": 0})
    acc.Reload()
    assert "expert_systems/Detectors" in acc.Tags()["tensors"]


# --- several ranks: the merges follow the figures -------------------------------------------------

def test_two_ranks_combine_the_new_figures(multi, tmp_path: Path) -> None:
    folder = multi("ddp2_gpt_per_rank")
    files = sorted(folder.glob("*.sqlite"))
    job = cli(",".join(str(f) for f in files), tmp_path / "job", "--workers=1")
    alone = [cli(f, tmp_path / f.stem) for f in files]
    groups = [csv_sections(o, "group_op")["Group Op Report"].frame().set_index("Name") for o in (job, *alone)]
    for column in ("Num Calls Aggregated", "Total CPU Time (ns)"):
        for row in ("/", "_CompleteModel_"):
            assert groups[0].loc[row, column] == groups[1].loc[row, column] + groups[2].loc[row, column]
    # per iteration over the job: iteration i of both ranks adds up, so the job's per-iteration maximum
    # is at most the sum of the ranks' maxima
    assert groups[0].loc["/", "Max CPU Time (ns)"] <= groups[1].loc["/", "Max CPU Time (ns)"] + groups[2].loc[
        "/", "Max CPU Time (ns)"]
    kernels = csv_sections(job, "kernel")["Kernel Report"].frame()
    assert not kernels.duplicated(["Kernel Name", "Op ID", "Op Name", "Direction"]).any()
    names = [set(csv_sections(o, "kernel")["Kernel Report"].frame()["Kernel Name"]) for o in alone]
    job_kernels = csv_sections(job, "summary")["All Kernels"].frame().set_index("")
    one_kernels = [csv_sections(o, "summary")["All Kernels"].frame().set_index("") for o in alone]
    assert job_kernels.loc["All other kernels", "# Kernels"] + job_kernels.loc["Kernels using TC", "# Kernels"] == len(
        names[0] | names[1])
    assert job_kernels.loc["Memory", "# Kernels"] == max(k.loc["Memory", "# Kernels"] for k in one_kernels)
    tensor = csv_sections(job, "tensor_core")["Tensor Core Report"].frame()
    listed = (tensor["TC Kernel Names"].fillna("") + ", " + tensor["Non-TC Kernel Names"].fillna("")).map(
        lambda text: len({n for n in text.split(", ") if n}))
    assert (tensor["Total Kernel Count"] == listed).all()
