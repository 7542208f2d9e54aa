"""dlagg's CSV files against the `nsys stats` CSVs recorded with every fixture, and against plain SQL.

Each nsys-2022.4 recording ships the output of ``nsys stats --report gpukernsum, gpumemtimesum,
gpumemsizesum, cudaapisum, nvtxsum, nvtxkernsum`` made by the same nsys (see its meta.json): those
are the oracles here. Expected values come from them or from SQL on the export, never from dlagg.
dlagg is run through its command line and read back from the CSV files it writes
(``tests/dlprof_csv.py``), so these tests hold whatever the reports look like inside.

Where dlagg differs from nsys on purpose (GPU work launched from autograd's unannotated thread
belongs to the op open in the process, docs/ops.md and docs/reports.md), the difference is
tested explicitly, in terms of the oracle.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.cli import main
from dlagg.reader import load_profile

from . import dlprof_csv
from .conftest import RECORDINGS, recording, recording_dir
from .marks import quick_on
from .recorded import (
    KEY_NODE,
    RANGE_TYPES,
    gpu_side_ends,
    key_ends,
    named_ranges,
    oracle,
    short_names,
    sql,
    sql_frame,
)

GPU_RECORDINGS = [r for r in RECORDINGS if r != "cpu_nvtx_numpy"]  # cpu_nvtx_numpy has no CUDA at all
DOMAIN_CREATE = 75


def ranges(name: str) -> pd.DataFrame:
    """Every NVTX range with the name nsys stats gives it (``domain:text`` outside the default domain)."""
    frame = sql_frame(name, f"""
        SELECT e.rowid AS row, e.start, e."end", e.globalTid AS tid, e.domainId AS domain,
               COALESCE(e.text, s.value) AS text
        FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
        WHERE e.eventType IN {RANGE_TYPES}""")
    domains = dict(sql(name, f"""SELECT e.domainId, COALESCE(e.text, s.value) FROM NVTX_EVENTS e
                                 LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = {DOMAIN_CREATE}"""))
    prefix = frame["domain"].map(lambda d: f"{domains[d]}:" if d in domains else "")
    return frame.assign(name=prefix + frame["text"])


def leaf_user_ranges(name: str) -> set[str]:
    """Names of plain user ranges none of whose instances encloses another range of its thread.

    Those are ops in dlagg (docs/ops.md: a user range enclosing nothing) and their instances are
    exactly nsys's ranges of that name. The key node is not an op.
    """
    r = ranges(name)
    if len(r) > 5000:
        raise AssertionError(f"{name}: {len(r)} ranges, too many for the pairwise check")
    s, e, t = (r[c].to_numpy() for c in ("start", "end", "tid"))
    encloses = (t[:, None] == t[None, :]) & (s[:, None] <= s[None, :]) & (e[:, None] >= e[None, :])
    np.fill_diagonal(encloses, False)
    user = ~r["name"].str.contains(r"^\{|, seq = |, op_id = |^aten::|^autograd::", regex=True)
    leaves = set(r["name"][user]) - set(r["name"][encloses.any(axis=1)])
    return leaves - {KEY_NODE}


_RUNS: dict[tuple[str, ...], Path] = {}


@pytest.fixture(scope="module")
def dlagg(tmp_path_factory: pytest.TempPathFactory):
    """dlagg(name, *options) -> the folder its CSV files were written to (one run per argument list)."""

    def run(name: str, *options: str) -> Path:
        key = (name, *options)
        if key not in _RUNS:
            out = tmp_path_factory.mktemp(name)
            code = main([f"--nsys_database={recording(name)}", "--reports=all", "--formats=csv", "-b",
                         "--verbosity=quiet", f"--output_path={out}", *options])
            assert code == 0
            _RUNS[key] = out
        return _RUNS[key]

    yield run
    _RUNS.clear()


def read(out: Path, report: str) -> dict[str, dlprof_csv.Section]:
    return dlprof_csv.read(out / f"dlagg_{report}.csv")


# --- NVTX ranges: nvtxsum ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", [r for r in RECORDINGS if not r.startswith("resnet")])  # resnet: see below
def test_user_range_ops_have_the_cpu_time_of_nvtxsum(name: str, dlagg) -> None:
    """An op that is a leaf user range: its calls and CPU times are nsys's range statistics.

    (In the resnet recordings every user range encloses emit_nvtx op ranges: no user range is an op.)
    """
    leaves = leaf_user_ranges(name)
    assert leaves, "premise: the recording has leaf user ranges"
    nvtxsum = oracle(name, "nvtxsum").set_index("Range")
    detail = read(dlagg(name), "detailed")["All Iterations"].frame()
    ops = detail.groupby("Op Name").agg(calls=("No. Calls", "sum"), total=("Total CPU Time (ns)", "sum"),
                                        low=("Min CPU Time (ns)", "min"), high=("Max CPU Time (ns)", "max"))
    for leaf in sorted(leaves):
        want = nvtxsum.loc[leaf]
        got = ops.loc[leaf]
        assert (got["calls"], got["total"], got["low"], got["high"]) == (
            want["Instances"], want["Total Time (ns)"], want["Min (ns)"], want["Max (ns)"]), leaf


def test_cuda_basic_user_ranges_are_its_three_phases_and_setup() -> None:
    """The SQL leaf rule above finds what meta.json says the program does: h2d/compute/d2h per step, setup."""
    assert leaf_user_ranges("cuda_basic") == {"h2d", "compute", "d2h", "setup"}
    description = json.loads((recording_dir("cuda_basic") / "meta.json").read_text())["description"]
    assert "h2d/compute/d2h ranges" in description and "setup range" in description


@pytest.mark.parametrize("name", quick_on("h2d_heavy", RECORDINGS))
def test_iterations_are_cut_at_the_key_node_range_ends(name: str, dlagg) -> None:
    """Iteration i spans (end of iteration i-1, end of iteration i], where it ends at the later of the end
    of train_step i and the end of the GPU work launched in train_step i's window (docs/reports.md)."""
    ends = key_ends(name)
    step = oracle(name, "nvtxsum").set_index("Range").loc[KEY_NODE]
    instances = named_ranges(name, KEY_NODE)
    durations = instances[:, 1] - instances[:, 0]
    # the SQL reading of the key node is nsys's: same instances and times
    assert (len(ends), durations.sum(), durations.min(), durations.max()) == (
        step["Instances"], step["Total Time (ns)"], step["Min (ns)"], step["Max (ns)"])
    summary = read(dlagg(name), "summary")["Iterations"].values()
    assert "Key Node" not in summary  # DLProf's section has no such line (stderr and JSON say it)
    assert summary["Total Iterations"] == step["Instances"]
    # From iteration 1 on every window is one end-to-end period of the iteration ends.
    out = dlagg(name, "--iter_start=1")
    sections = read(out, "summary")
    gpu_ends = gpu_side_ends(name)
    periods = np.diff(gpu_ends)
    assert sections["Summary Report"].values()["Wall Clock Time (ns)"] == gpu_ends[-1] - gpu_ends[0]
    its = sections["Iterations"].values()
    assert its["Aggregated Iterations"] == len(ends) - 1 and its["Start Iteration"] == 1
    assert its["Average Iteration Time (ns)"] == pytest.approx(periods.mean(), abs=0.05)
    assert its["Iteration Time Standard Deviation"] == pytest.approx(periods.std(), abs=0.05)
    if name == "cpu_nvtx_numpy":
        return  # no kernels: no iteration report rows
    # Every kernel's launch call starts inside its iteration's window.
    table = read(out, "iteration")["Iteration Report"].frame()
    assert len(table) > 0
    called = table[table["API Call Start (ns)"].notna()]
    it = called["Iteration"].to_numpy(dtype=np.int64)
    start = called["API Call Start (ns)"].to_numpy(dtype=np.int64)
    assert ((start > ends[it - 1]) & (start <= ends[it])).all()


# --- kernels per range: nvtxkernsum ---------------------------------------------------------------

def kernels_by_op(out: Path) -> pd.DataFrame:
    """Per op and kernel (short name, a kernel's identity as in DLProf: one row per short name and op)."""
    table = read(out, "kernel")["Kernel Report"].frame()
    assert not table.duplicated(["Kernel Name", "Op ID", "Op Name", "Direction"]).any()
    return table.groupby(["Op Name", "Kernel Name"]).agg(
        calls=("Calls", "sum"), total=("Total GPU Time (ns)", "sum"), low=("Min GPU Time (ns)", "min"),
        high=("Max GPU Time (ns)", "max")).astype(np.int64)


def nvtxkernsum_by_range(name: str) -> pd.DataFrame:
    """nsys's kernels per range, its demangled kernel names mapped to their short names (SQL)."""
    table = oracle(name, "nvtxkernsum").rename(columns={"NVTX Range": "range", "Kernel Name": "kernel"})
    table["kernel"] = table["kernel"].map(short_names(name))
    assert table["kernel"].notna().all()
    return table.groupby(["range", "kernel"]).agg(
        calls=("Kern Inst", "sum"), total=("Total Time (ns)", "sum"), low=("Min (ns)", "min"),
        high=("Max (ns)", "max")).astype(np.int64)


@pytest.mark.parametrize("name", [r for r in GPU_RECORDINGS if not r.startswith("resnet")])
def test_leaf_range_kernels_equal_nvtxkernsum(name: str, dlagg) -> None:
    """Per leaf range and kernel name: launches, total, min and max GPU time as nsys counts them."""
    # dataloader_bound's `backward` differs on purpose: see the next test.
    leaves = leaf_user_ranges(name) - ({"backward"} if name == "dataloader_bound" else set())
    want = nvtxkernsum_by_range(name)
    got = kernels_by_op(dlagg(name))
    compared = 0
    for leaf in sorted(leaves):
        expected = want.loc[leaf] if leaf in want.index.get_level_values(0) else want.iloc[:0].droplevel(0)
        mine = got.loc[leaf] if leaf in got.index.get_level_values(0) else got.iloc[:0].droplevel(0)
        pd.testing.assert_frame_equal(mine.sort_index(), expected.sort_index(), check_names=False, obj=leaf)
        compared += len(expected)
    # no_emit_nvtx's only leaf range, cuBLAS:cublasCreate_v2, launches no kernel (nor does dlagg give it one)
    assert compared > 0 or name == "no_emit_nvtx"


def test_cuda_basic_compute_kernel_time() -> None:
    """The figure a user quoted, straight from nvtxkernsum: compute ran 50 kernels for 291,739 ns."""
    compute = nvtxkernsum_by_range("cuda_basic").loc["compute"]
    assert (compute["total"].sum(), compute["calls"].sum()) == (291_739, 50)


def test_autograd_thread_launches_go_to_the_op_open_in_the_process(dlagg) -> None:
    """dataloader_bound has no emit_nvtx: autograd launches the backward pass from its own thread,
    which has no NVTX range, while the main thread waits in `backward`. nsys attributes those
    kernels to no range ("None" rows of that thread); dlagg gives them to the `backward` op
    (docs/ops.md). So dlagg's `backward` = nvtxkernsum's `backward` + the unannotated thread's
    kernels, per kernel name, and nothing else changes."""
    name = "dataloader_bound"
    nvtx_tids = {tid & 0xFFFFFF for (tid,) in sql(name, "SELECT DISTINCT globalTid FROM NVTX_EVENTS "
                                                        "WHERE eventType IN (59, 60)")}
    raw = oracle(name, "nvtxkernsum")
    unannotated = raw[(raw["NVTX Range"] == "None") & ~raw["TID"].isin(nvtx_tids)]
    assert unannotated["Kern Inst"].sum() == 640  # premise (docs/ops.md): 640 of 1,240 kernels
    # Premise, by SQL: each of those launches starts while a `backward` range is open.
    outside = sql(name, """
        SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
        WHERE (r.globalTid & 16777215) NOT IN (SELECT DISTINCT globalTid & 16777215 FROM NVTX_EVENTS)
          AND NOT EXISTS (SELECT 1 FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                          WHERE COALESCE(e.text, s.value) = 'backward'
                            AND e.start <= r.start AND r.start <= e."end")""")
    assert outside == [(0,)]
    extra = unannotated.assign(**{"Kernel Name": unannotated["Kernel Name"].map(short_names(name))}).groupby(
        "Kernel Name").agg(
        calls=("Kern Inst", "sum"), total=("Total Time (ns)", "sum"), low=("Min (ns)", "min"),
        high=("Max (ns)", "max")).astype(np.int64)
    same_thread = nvtxkernsum_by_range(name).loc["backward"]
    expected = pd.concat([same_thread, extra]).groupby(level=0).agg(
        {"calls": "sum", "total": "sum", "low": "min", "high": "max"})
    got = kernels_by_op(dlagg(name)).loc["backward"]
    pd.testing.assert_frame_equal(got.sort_index(), expected.sort_index(), check_names=False)
    assert got["calls"].sum() == 20 + 640
    # nsys's own figure for the range differs by exactly those kernels.
    assert same_thread["calls"].sum() == 20


# --- CUDA API time: cudaapisum ---------------------------------------------------------------------

def api_totals(name: str, word: str) -> tuple[int, int]:
    """(total ns, calls) of the cudaapisum rows whose name holds `word`."""
    api = oracle(name, "cudaapisum")
    rows = api[api["Name"].str.contains(word)]
    return int(rows["Total Time (ns)"].sum()), int(rows["Num Calls"].sum())


def calls_before_last_key_end(name: str, *words: str) -> bool:
    """Whether every call whose name holds one of `words` starts in an iteration (before the last key end)."""
    where = " OR ".join("instr(s.value, ?) > 0" for _ in words)
    (latest,) = sql(name, f"""SELECT MAX(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
                              ON s.id = r.nameId WHERE {where}""", words)[0]
    return latest <= int(key_ends(name)[-1])


@pytest.mark.parametrize("name", [r for r in GPU_RECORDINGS if r != "cuda_graph"])
def test_launch_api_time_equals_cudaapisum(name: str, dlagg) -> None:
    """Summed over kernels, the kernel report's API time is the launch calls' time in cudaapisum."""
    launch_ns, launch_calls = api_totals(name, "Launch")
    kernels = oracle(name, "gpukernsum")["Instances"].sum()
    assert launch_calls == kernels, "premise: one launch call per kernel"
    assert calls_before_last_key_end(name, "Launch"), "premise: every launch is in an aggregated iteration"
    out = dlagg(name)
    table = read(out, "kernel")["Kernel Report"].frame()
    assert table["Total API Time (ns)"].sum() == launch_ns and table["Calls"].sum() == kernels
    # The summary's All Kernels CPU time of kernels is the same launch time (DLProf: "CPU Time").
    rows = read(out, "summary")["All Kernels"].frame().set_index("")
    assert rows.loc["Kernels using TC", "CPU Time (ns)"] + rows.loc["All other kernels", "CPU Time (ns)"] == launch_ns


@pytest.mark.parametrize("name", [r for r in GPU_RECORDINGS if r != "cuda_graph"])
def test_memory_api_time_equals_cudaapisum(name: str, dlagg) -> None:
    memcpy_ns, memcpy_calls = api_totals(name, "Memcpy")
    memset_ns, memset_calls = api_totals(name, "Memset")
    sizes = oracle(name, "gpumemsizesum")
    assert memcpy_calls + memset_calls == sizes["Count"].sum(), "premise: one call per memory operation"
    assert calls_before_last_key_end(name, "Memcpy", "Memset"), "premise: all in aggregated iterations"
    rows = read(dlagg(name), "summary")["All Kernels"].frame().set_index("")
    assert rows.loc["Memory", "CPU Time (ns)"] == memcpy_ns + memset_ns
    assert rows.loc["Memory", "GPU Time (ns)"] == oracle(name, "gpumemtimesum")["Total Time (ns)"].sum()


@pytest.mark.parametrize("name", [r for r in GPU_RECORDINGS if r != "cuda_graph"])
def test_kernel_report_api_time_per_kernel_equals_sql(name: str, dlagg) -> None:
    """Per kernel (short name): the launching calls' total, min and max duration, joined by correlation id
    within the process in plain SQL."""
    assert calls_before_last_key_end(name, "Launch"), "premise: every launch is in an aggregated iteration"
    want = sql_frame(name, """
        SELECT s.value AS kernel, SUM(r."end" - r.start) AS total, MIN(r."end" - r.start) AS low,
               MAX(r."end" - r.start) AS high, COUNT(*) AS calls
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
        GROUP BY s.value""").set_index("kernel").sort_index()
    table = read(dlagg(name), "kernel")["Kernel Report"].frame()
    got = table.groupby("Kernel Name").agg(
        total=("Total API Time (ns)", "sum"), low=("Min API Time (ns)", "min"),
        high=("Max API Time (ns)", "max"), calls=("Calls", "sum")).astype(np.int64).sort_index()
    pd.testing.assert_frame_equal(got, want.astype(np.int64), check_names=False)


def test_graph_launch_api_time_is_counted_once(dlagg) -> None:
    """cuda_graph: 20 cudaGraphLaunch calls launch 520 kernels and 20 memsets. The launch-API CPU
    time of the kernels cannot exceed the time spent in those 20 calls."""
    graph_ns, graph_calls = api_totals("cuda_graph", "GraphLaunch")
    memcpy_ns, _ = api_totals("cuda_graph", "Memcpy")
    assert graph_calls == 20
    rows = read(dlagg("cuda_graph"), "summary")["All Kernels"].frame().set_index("")
    kernels_cpu = rows.loc["Kernels using TC", "CPU Time (ns)"] + rows.loc["All other kernels", "CPU Time (ns)"]
    assert kernels_cpu == graph_ns
    assert rows.loc["All kernels", "CPU Time (ns)"] == graph_ns + memcpy_ns


# --- memory operations: gpumemsizesum --------------------------------------------------------------

@pytest.mark.parametrize("name", GPU_RECORDINGS)
def test_memcpy_and_memset_bytes_equal_gpumemsizesum(name: str) -> None:
    """The reader's bytes per copy kind and for memsets against nsys's sizes (MB = 1e6 bytes, 3 decimals)."""
    profile = load_profile(recording(name))
    labels = dict(sql(name, "SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER"))  # 1: Host-to-Device ...
    short = {k: "to".join(part[0] for part in v.split("-to-")) for k, v in labels.items() if "-to-" in v}
    sizes = oracle(name, "gpumemsizesum").set_index("Operation")
    groups = {f"[CUDA memcpy {short[int(kind)]}]": frame["bytes"].to_numpy()
              for kind, frame in profile.memcpy.groupby("copy_kind")}
    if len(profile.memset):
        groups["[CUDA memset]"] = profile.memset["bytes"].to_numpy()
    assert set(groups) == set(sizes.index)
    for operation, nbytes in groups.items():
        want = sizes.loc[operation]
        assert len(nbytes) == want["Count"], operation
        for got, column in ((nbytes.sum(), "Total (MB)"), (nbytes.min(), "Min (MB)"), (nbytes.max(), "Max (MB)")):
            assert got / 1e6 == pytest.approx(want[column], abs=0.0005), (operation, column)
