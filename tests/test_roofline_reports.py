"""The roofline through the command line (--ncu_report, --peaks, --ncu_rank): the roofline report, the
figures the kernel, op_type, summary and tensor reports gain, the PNGs and the TensorBoard images, on both
bundled ncu fixtures with their nsys recordings, with the ncu report alone, with a CSV made with fewer
sections, with a CSV that is not ncu's raw page, and over two ranks.

Expected values come from the raw CSVs read in the test (``test_roofline``'s independent reading), the
fixtures' meta.json totals and peaks.json, SQL on the nsys exports, and the reports of the same run
without --ncu_report.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import sqlite3
import statistics
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from dlagg.cli import main

from .conftest import BUNDLED, ncu_csv, ncu_dir, recording
from .marks import quick_on
from .test_roofline import SASS, num, oracle, raw_csv, without_columns, write_csv

WORKLOADS = ("resnet_amp", "resnet_fp32")
EXTRAS = {"kernel": 3, "op_type": 3, "tensor_core": 1}  # CSV columns each report gains, at its end
MFU_KEYS = ("iteration_flops", "achieved_tflop_per_s", "peak", "peak_tflop_per_s", "mfu_pct")
FP16_DENSE = ("sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off", "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32"
              "_sparsity_off", "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16_sparsity_off")
PNG = b"\x89PNG\r\n\x1a\n"


# --- running the command line ------------------------------------------------------------------

def cli(*args: str) -> tuple[int, str]:
    """dlagg's exit code and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Callable[..., tuple[Path, str]]:
    """`runs(label, *args)`: the output folder and stderr of ``dlagg --reports=all --formats=csv,json *args``,
    run once per label in this module."""
    done: dict[str, tuple[Path, str]] = {}

    def run(label: str, *args: str) -> tuple[Path, str]:
        if label not in done:
            out = tmp_path_factory.mktemp(label)
            code, err = cli(*args, "--reports=all", "--formats=csv,json", f"--output_path={out}")
            assert code == 0, err
            done[label] = out, err
        return done[label]

    return run


def with_ncu(runs, name: str) -> tuple[Path, str]:
    return runs(f"{name}_ncu", f"--nsys_database={recording(name)}", f"--ncu_report={ncu_csv(name)}")


def without_ncu(runs, name: str) -> Path:
    return runs(f"{name}_plain", f"--nsys_database={recording(name)}")[0]


# --- reading the outputs -----------------------------------------------------------------------

def tables(path: Path) -> dict[str, pd.DataFrame]:
    """A JSON report's tables as frames whose columns are the figure keys."""
    doc = json.loads(path.read_text())
    return {t["key"]: pd.DataFrame(t["rows"], columns=[f["key"] for f in t["fields"]]) for t in doc["tables"]}


def key_values(path: Path, table: str) -> dict[str, object]:
    return tables(path)[table].iloc[0].to_dict()


def csv_rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


def simple_base(name: str) -> str:
    """A kernel's function identifier, written for the test: the name before its template or parameters."""
    head = re.split(r"[<(]", name.replace("<unnamed>", ""))[0]
    return head.split("::")[-1].split()[-1]


def raw_sums(name: str, key: Callable[[dict[str, str]], tuple]) -> dict[tuple, dict[str, float]]:
    """Sums of the oracle's quantities over the raw CSV rows, grouped by `key`, with the row count as 'n'."""
    _, _, rows = raw_csv(name)
    sums: dict[tuple, dict[str, float]] = {}
    for r in rows:
        acc = sums.setdefault(key(r), {"n": 0.0})
        acc["n"] += 1
        for column, value in oracle(r).items():
            acc[column] = acc.get(column, 0.0) + value
    return sums


REPORT_SUMS = {"fp64_flops": "flops_fp64", "fp32_flops": "flops_fp32", "fp16_flops": "flops_fp16",
               "tensor_flops": "flops_tensor", "dram_bytes": "bytes_dram", "l2_bytes": "bytes_l2",
               "l1_bytes": "bytes_l1", "ncu_time_ns": "time_ns", "invocations": "n"}


def assert_sums(report: pd.DataFrame, expected: dict[tuple, dict[str, float]], key: list[str]) -> None:
    got = report.groupby(key)[list(REPORT_SUMS)].sum()
    assert set(got.index) == set(expected)
    for index, row in got.iterrows():
        for column, oracle_key in REPORT_SUMS.items():
            assert row[column] == expected[index][oracle_key], (index, column)


def median_peak(name: str, peaks: Callable[[dict[str, str]], float]) -> float:
    _, _, rows = raw_csv(name)
    return statistics.median(peaks(r) for r in rows)


def sm_clock(r: dict[str, str]) -> float:
    return num(r["sm__cycles_elapsed.avg.per_second"])


PEAKS = {  # the pipe that does the most FLOPs in each step, and its ncu ceiling from the raw CSV
    "resnet_amp": ("Tensor FP16", lambda r: max(num(r[f"{p}.sum.peak_sustained"]) for p in FP16_DENSE) * sm_clock(r)),
    "resnet_fp32": ("FP32", lambda r: 2 * num(r[SASS.format("ffma") + ".peak_sustained"]) * sm_clock(r)),
}


# --- both fixtures, matched to their nsys recordings -------------------------------------------

@pytest.mark.parametrize("name", quick_on("resnet_amp", WORKLOADS))
def test_roofline_report_per_kernel_equals_the_raw_csv_and_the_nsys_export(runs, name: str) -> None:
    out, err = with_ncu(runs, name)
    assert {"dlagg_roofline.csv", "dlagg_roofline.json", "dlagg_roofline.png", "dlagg_roofline_op_type.png"} <= {
        p.name for p in out.iterdir()}
    report = tables(out / "dlagg_roofline.json")
    kernels = report["kernels"]
    # FLOPs, bytes, ncu time and invocations per kernel: sums of the raw CSV rows (by base name and shape)
    assert_sums(kernels, raw_sums(name, lambda r: (simple_base(r["Kernel Name"]), r["Grid Size"], r["Block Size"])),
                ["kernel_name", "grid", "block"])
    meta = json.loads((ncu_dir(name) / "meta.json").read_text())
    assert kernels["invocations"].sum() == meta["kernels"] and (kernels["matched"] == kernels["invocations"]).all()
    step = key_values(out / "dlagg_roofline.json", "step")
    assert step["flops"] == meta["totals"]["all_ops"] and step["dram_bytes"] == meta["totals"]["bytes"][
        "dram__bytes.sum"]
    assert step["kernels"] == step["matched"] == meta["kernels"] and step["steps"] == 15 and step["rank"] == 0
    assert step["ceilings"].startswith("ncu's own")
    assert f"{meta['kernels']} of {meta['kernels']} ncu kernels matched" in err  # said, not warned: all matched
    assert "warning: roofline" not in err

    # nsys Avg Time: the mean duration of the export's kernels of that name and shape (SQL)
    with sqlite3.connect(f"file:{recording(name)}?mode=ro&immutable=1", uri=True) as conn:
        nsys = pd.DataFrame(conn.execute(
            'SELECT s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k."end" - k.start '
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName").fetchall(),
            columns=["name", "gx", "gy", "gz", "bx", "by", "bz", "duration"])
    nsys["grid"] = "(" + nsys["gx"].astype(str) + ", " + nsys["gy"].astype(str) + ", " + nsys["gz"].astype(str) + ")"
    nsys["block"] = "(" + nsys["bx"].astype(str) + ", " + nsys["by"].astype(str) + ", " + nsys["bz"].astype(str) + ")"
    by_shape = nsys.groupby(["name", "grid", "block"])["duration"].agg(["count", "mean", "sum"])
    checked = 0
    for row in kernels.itertuples():
        count, mean, _ = by_shape.loc[(row.long_kernel_name, row.grid, row.block)]
        if count == 15 * row.invocations:
            assert row.nsys_time_avg_ns == pytest.approx(mean, rel=1e-12), row.kernel_name
            checked += 1
    assert checked > 0.9 * len(kernels)
    assert (kernels["nsys_time_avg_ns"] * kernels["invocations"]).sum() == pytest.approx(nsys["duration"].sum() / 15,
                                                                                         rel=1e-12)
    # rates from the nsys time; % of GPU time and % of ceiling are shares
    assert (kernels["time_source"] == "nsys").all()
    flops = kernels[["fp64_flops", "fp32_flops", "fp16_flops", "tensor_flops"]].sum(axis=1)
    seconds = kernels["nsys_time_avg_ns"] * kernels["invocations"] * 1e-9
    assert kernels["achieved_flop_per_s"].to_numpy() == pytest.approx((flops / seconds).to_numpy(), rel=1e-9)
    assert kernels["gpu_time_pct"].sum() == pytest.approx(100.0)
    assert ((kernels["pct_of_ceiling"] > 0) & (kernels["pct_of_ceiling"] <= 100)).all()
    # Tensor Core use measured per kernel: some tensor-path counter above zero (raw CSV); the names agree
    measured = raw_sums(name, lambda r: (simple_base(r["Kernel Name"]), r["Grid Size"], r["Block Size"]))
    for row in kernels.itertuples():
        assert row.uses_tc_measured == (measured[(row.kernel_name, row.grid, row.block)]["flops_tensor"] > 0)
    assert (kernels["uses_tc_measured"] == kernels["uses_tc_name"]).all() and report["tc_disagreements"].empty
    # which ceilings: every one ncu's own, with its metrics (the fastest of the clock recipes: within 1e-9)
    ceilings = report["ceilings"].set_index("ceiling")
    assert ceilings["source"].str.startswith("ncu: ").all()
    resource, peak = PEAKS[name]
    assert ceilings.loc[resource, "median_per_s"] == pytest.approx(median_peak(name, peak), rel=1e-9)


@pytest.mark.parametrize("name", WORKLOADS)
def test_kernel_and_op_type_reports_gain_the_roofline_of_their_rows(runs, name: str) -> None:
    out, _ = with_ncu(runs, name)
    roofline = tables(out / "dlagg_roofline.json")
    kernels = tables(out / "dlagg_kernel.json")["kernels"]
    assert kernels["achieved_tflop_per_s"].notna().sum() > 0.9 * len(kernels)
    # a kernel with one demangled name (SQL), one launch shape and one op: its kernel-report row (one per
    # short name and op) is its roofline row
    with sqlite3.connect(f"file:{recording(name)}?mode=ro&immutable=1", uri=True) as conn:
        variants = dict(conn.execute(
            "SELECT s.value, COUNT(DISTINCT k.demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName GROUP BY s.value").fetchall())
    rows = roofline["kernels"]
    single = rows[~rows["long_kernel_name"].duplicated(keep=False)].set_index("long_kernel_name")
    one = kernels[kernels["kernel_name"].map(variants) == 1]
    alone = one[~one["kernel_name"].duplicated(keep=False)].set_index("long_kernel_name")
    both = single.index.intersection(alone.index)
    assert len(both) >= 5
    assert alone.loc[both, "achieved_tflop_per_s"].to_numpy() * 1e12 == pytest.approx(
        single.loc[both, "achieved_flop_per_s"].to_numpy(), rel=1e-12)
    assert alone.loc[both, "pct_of_ceiling"].to_numpy() == pytest.approx(single.loc[both, "pct_of_ceiling"].to_numpy(),
                                                                         rel=1e-12)
    assert (alone.loc[both, "roofline_bound"] == single.loc[both, "bound"]).all()
    # an op type's figures are those of the roofline's op-type table
    op_types = tables(out / "dlagg_op_type.json")["op_types"].set_index("op_type")
    per_type = roofline["op_types"].set_index("op_type")
    shared = op_types.index.intersection(per_type.index)
    assert len(shared) >= 5 and op_types.loc[shared, "achieved_tflop_per_s"].notna().all()
    assert op_types.loc[shared, "achieved_tflop_per_s"].to_numpy() * 1e12 == pytest.approx(
        per_type.loc[shared, "achieved_flop_per_s"].to_numpy(), rel=1e-12)
    assert (op_types.loc[shared, "roofline_bound"] == per_type.loc[shared, "bound"]).all()
    top = per_type["gpu_time_pct"].idxmax()
    assert top == "conv2d" and per_type.loc[top, "bound"] == PEAKS[name][0]
    # the op-type table partitions the profiled kernels
    assert per_type["kernels"].sum() == rows["invocations"].sum()


@pytest.mark.parametrize("name", WORKLOADS)
def test_summary_states_the_measured_model_flops_utilization(runs, name: str) -> None:
    out, _ = with_ncu(runs, name)
    summary = key_values(out / "dlagg_summary.json", "summary")
    iterations = key_values(out / "dlagg_summary.json", "iterations_summary")
    meta = json.loads((ncu_dir(name) / "meta.json").read_text())
    resource, peak = PEAKS[name]
    assert summary["iteration_flops"] == meta["totals"]["all_ops"]  # every kernel in every one of the 15 steps
    achieved = meta["totals"]["all_ops"] / iterations["iteration_time_avg_ns"] * 1e9 / 1e12
    assert summary["achieved_tflop_per_s"] == pytest.approx(achieved, rel=1e-12)
    assert summary["peak"] == f"{resource} (ncu)"
    assert summary["peak_tflop_per_s"] * 1e12 == pytest.approx(median_peak(name, peak), rel=1e-9)
    assert summary["mfu_pct"] == pytest.approx(100 * achieved * 1e12 / median_peak(name, peak), rel=1e-9)
    assert 0 < summary["mfu_pct"] < 100
    lines = [r[0] for r in csv_rows(out / "dlagg_summary.csv") if r]
    assert "Model FLOPs Utilization % (measured)" in lines


@pytest.mark.parametrize("name", WORKLOADS)
def test_without_ncu_report_the_other_reports_are_the_same_but_the_added_figures(runs, name: str) -> None:
    out, _ = with_ncu(runs, name)
    plain = without_ncu(runs, name)
    assert not list(plain.glob("*roofline*"))
    for path in sorted(plain.glob("*.csv")):
        report = path.stem.removeprefix("dlagg_")
        got, expected = csv_rows(out / path.name), csv_rows(path)
        if report in EXTRAS:
            n = EXTRAS[report]
            assert [r[:-n] if len(r) > 1 else r for r in got] == expected, report
            if report == "tensor_core":  # measured Tensor Core use agrees with the names: nothing listed
                assert {r[-1] for r in got[2:]} == {""}
        elif report == "summary":
            assert [r for r in got if not r or r[0] not in MFU_TITLES] == expected
        else:
            assert got == expected, report


MFU_TITLES = {"FLOPs per Iteration (measured by ncu)", "Achieved TFLOP/s (FLOPs per Iteration / Average Iteration "
              "Time)", "Peak (the pipe that did the most FLOPs)", "Peak TFLOP/s",
              "Model FLOPs Utilization % (measured)"}


def test_roofline_pictures_and_tensorboard_images(runs) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = with_ncu(runs, "resnet_amp")
    acc = EventAccumulator(str(out / "event_files" / "dlagg"), size_guidance={"tensors": 0})
    acc.Reload()
    for tag, file in (("roofline/kernels", "dlagg_roofline.png"), ("roofline/op_types", "dlagg_roofline_op_type.png")):
        png = (out / file).read_bytes()
        assert png.startswith(PNG) and len(png) > 50_000
        assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "images"
        (event,) = acc.Tensors(tag)
        width, height, encoded = event.tensor_proto.string_val
        assert encoded == png and event.step == 0
        assert (int(width), int(height)) == (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"))
    # the roofline tables are text dashboards too
    texts = {tag.split("/page ")[0] for tag in acc.Tags()["tensors"]}  # long tables come in pages
    assert {"roofline/Roofline Report", "roofline/Ceilings"} <= texts


# --- the ncu report alone, with measured ceilings ------------------------------------------------

def test_ncu_report_alone_gives_the_roofline_of_its_kernels(runs) -> None:
    name = "resnet_amp"
    peaks_file = BUNDLED / "ncu" / "peaks.json"
    out, err = runs("alone", f"--ncu_report={ncu_csv(name)}", f"--peaks={peaks_file}")
    assert {p.name for p in out.iterdir()} == {"dlagg_roofline.csv", "dlagg_roofline.json", "dlagg_roofline.png",
                                               "event_files"}
    assert "the other reports need --nsys_database" in err and "without an nsys export" in err
    report = tables(out / "dlagg_roofline.json")
    kernels = report["kernels"]
    # one row per ncu name and shape; exact sums of the raw CSV
    assert_sums(kernels, raw_sums(name, lambda r: (r["Kernel Name"], r["Grid Size"], r["Block Size"])),
                ["long_kernel_name", "grid", "block"])
    assert (kernels["matched"] == 0).all() and (kernels["time_source"] == "ncu").all()
    assert kernels["nsys_time_avg_ns"].isna().all() and report["op_types"].empty
    # measured ceilings where the peaks file gives them, ncu's for the others
    measured = json.loads(peaks_file.read_text())["measured"]
    dram = max(v for k, v in measured.items() if k.startswith("dram_bytes_per_s"))
    ceilings = report["ceilings"].set_index("ceiling")
    assert ceilings.loc["DRAM", "median_per_s"] == dram and ceilings.loc["DRAM", "source"].startswith("peaks.json: ")
    assert ceilings.loc["Tensor FP16", "median_per_s"] == measured["matmul_fp16_flop_per_s"]
    assert ceilings.loc["L2", "source"].startswith("ncu: ")
    step = key_values(out / "dlagg_roofline.json", "step")
    assert step["ceilings"].startswith("peaks.json for DRAM") and "ncu's own" in step["ceilings"]
    assert "rank" not in step and "matched" not in step
    # % of ceiling of a DRAM-bound kernel: its bytes at the measured bandwidth over its ncu time
    _, _, rows = raw_csv(name)
    by_key = {(r["Kernel Name"], r["Grid Size"], r["Block Size"]): r for r in rows}
    dram_bound = kernels[(kernels["bound"] == "DRAM") & (kernels["invocations"] == 1)]
    assert len(dram_bound) > 5
    for row in dram_bound.itertuples():
        raw = by_key[(row.long_kernel_name, row.grid, row.block)]
        expected = 100 * num(raw["dram__bytes.sum"]) / dram / (num(raw["gpu__time_duration.sum"]) * 1e-9)
        assert row.pct_of_ceiling == pytest.approx(expected, rel=1e-9)
    # TensorBoard holds the picture and the tables, no scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "event_files" / "dlagg"), size_guidance={"tensors": 0})
    acc.Reload()
    (event,) = acc.Tensors("roofline/kernels")
    assert event.tensor_proto.string_val[2] == (out / "dlagg_roofline.png").read_bytes()
    assert not acc.Tags()["scalars"] and "custom_scalars__config__" not in acc.Tags()["tensors"]


@pytest.mark.parametrize(("args", "says"), [
    (("--reports=kernel,roofline",), "--reports: kernel need an nsys export: pass --nsys_database"),
    (("--reports=all", "--ncu_rank=1"), "--ncu_rank chooses among the ranks of an nsys export"),
])
def test_ncu_report_alone_refuses_what_needs_nsys(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    code, err = cli(f"--ncu_report={ncu_csv('resnet_amp')}", f"--output_path={tmp_path}", *args)
    assert code == 2 and err.count("\n") == 1 and says in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("args", "says"), [
    ((), "nothing to read: pass --nsys_database"),
    (("--reports=roofline", "--nsys_database={db}"), "--reports: roofline needs Nsight Compute metrics: pass "
                                                     "--ncu_report"),
    (("--reports=all", "--nsys_database={db}", "--peaks=peaks.json"), "--peaks applies to the roofline"),
])
def test_roofline_options_without_an_ncu_report(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    code, err = cli(f"--output_path={tmp_path}", *(a.format(db=recording("cuda_basic")) for a in args))
    assert code == 2 and err.count("\n") == 1 and says in err


# --- bad and partial ncu input -------------------------------------------------------------------

@pytest.mark.parametrize("case", ["nsys_stats", "details_page"])
def test_a_csv_that_is_not_ncus_raw_page_is_one_error_before_any_output(tmp_path: Path, case: str) -> None:
    if case == "nsys_stats":
        bad = BUNDLED / "nsys-2022.4" / "resnet_amp" / "resnet_amp_gpukernsum.csv"
        says = "is not an Nsight Compute raw-page CSV"
    else:
        bad = tmp_path / "details.csv"
        bad.write_text('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                       '"0","k","SpeedOfLight","Duration","ns","1,024"\n')
        says = "is ncu's details page"
    out = tmp_path / "out"
    code, err = cli(f"--nsys_database={recording('resnet_amp')}", f"--ncu_report={bad}", "--reports=all",
                    f"--output_path={out}")
    errors = [line for line in err.splitlines() if "error" in line]
    assert code == 1 and len(errors) == 1 and says in errors[0] and str(bad) in errors[0]
    assert not list(out.rglob("*.*"))  # nothing written


def test_a_csv_made_with_fewer_sections_gives_what_it_can_and_says_what_is_missing(runs, tmp_path_factory) -> None:
    name = "resnet_amp"

    def drop(column: str) -> bool:
        return column.startswith(("lts__t_bytes", "sm__ops_path_tensor", "sm__inst_executed_pipe_tensor"))

    partial = without_columns(name, tmp_path_factory.mktemp("partial_csv") / "partial.csv", drop)
    out, err = runs("partial", f"--nsys_database={recording(name)}", f"--ncu_report={partial}")
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert any("L2 bytes (collect with --metrics lts__t_bytes.sum)" in w for w in warnings)
    assert any("Tensor FLOPs (collect with --section SpeedOfLight_HierarchicalTensorRooflineChart" in w
               for w in warnings)
    assert any("cannot tell Tensor Core use" in w for w in warnings)
    assert any("no Model FLOPs Utilization: partial.csv lacks FLOP metrics" in w for w in warnings)
    kernels = tables(out / "dlagg_roofline.json")["kernels"]
    assert kernels["l2_bytes"].isna().all() and kernels["ai_l2_flop_per_byte"].isna().all()
    assert kernels["tensor_flops"].isna().all() and kernels["uses_tc_measured"].isna().all()
    # what the columns allow is still there: DRAM bytes, FP32 FLOPs, a bound among the known ceilings
    expected = raw_sums(name, lambda r: ())[()]
    assert kernels["dram_bytes"].sum() == expected["bytes_dram"] and kernels["fp32_flops"].sum() == expected[
        "flops_fp32"]
    assert kernels["bound"].notna().all() and kernels["pct_of_ceiling"].between(0, 100, inclusive="right").all()
    summary = key_values(out / "dlagg_summary.json", "summary")
    assert all(summary[k] is None for k in MFU_KEYS)
    # no measurement: the tensor report keeps the name-based Tensor Core use
    plain = without_ncu(runs, name)
    got = csv_rows(out / "dlagg_tensor_core.csv")
    assert [r[:-1] if len(r) > 1 else r for r in got] == csv_rows(plain / "dlagg_tensor_core.csv")


def test_measured_tensor_core_use_replaces_the_name_and_disagreements_are_listed(runs, tmp_path_factory) -> None:
    """A kernel whose name says Tensor Cores, made (in a copy of the CSV) to have run no tensor math."""
    name = "resnet_amp"
    target = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_" \
             "execute_segment_k_off_kernel__5x_cudnn"
    header, units, rows = raw_csv(name)
    tensor = [c for c in header if c.startswith("sm__ops_path_tensor_src_") and c.endswith(".sum")]
    for r in rows:
        if r["Kernel Name"] == target:
            r.update({c: "0" for c in tensor})
    launches = sum(r["Kernel Name"] == target for r in rows)
    shapes = len({(r["Grid Size"], r["Block Size"]) for r in rows if r["Kernel Name"] == target})
    assert launches > 1
    path = write_csv(tmp_path_factory.mktemp("no_tc") / "no_tc.csv", header, [units[c] for c in header],
                     [[r[c] for c in header] for r in rows])
    out, err = runs("no_tc", f"--nsys_database={recording(name)}", f"--ncu_report={path}")
    assert (f"Tensor Core use measured by ncu disagrees with the kernel-name rules for {shapes} kernel(s), {launches} "
            f"launches: {shapes} named like Tensor Core kernels ran no tensor math ({target})") in err
    listed = tables(out / "dlagg_roofline.json")["tc_disagreements"]
    assert listed["long_kernel_name"].tolist() == [target] * shapes
    assert not listed["uses_tc_measured"].any() and listed["uses_tc_name"].all()
    # the tensor report counts its time as non-TC time and names it in the new column
    with sqlite3.connect(f"file:{recording(name)}?mode=ro&immutable=1", uri=True) as conn:
        moved = conn.execute('SELECT SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s '
                             "ON s.id = k.demangledName WHERE s.value = ?", (target,)).fetchone()[0]
    ops = tables(out / "dlagg_tensor_core.json")["ops"]
    plain = tables(without_ncu(runs, name) / "dlagg_tensor_core.json")["ops"]
    assert ops["tc_kernel_time_ns"].sum() == plain["tc_kernel_time_ns"].sum() - moved
    assert ops["kernel_time_ns"].sum() == plain["kernel_time_ns"].sum()
    named = ops[ops["tc_name_mismatch_kernel_names"] != ""]
    assert len(named) > 0 and (named["tc_name_mismatch_kernel_names"] == target).all()
    assert (named["tc_kernel_time_ns"] < plain.set_index("op_key").loc[named["op_key"], "tc_kernel_time_ns"]
            .to_numpy()).all()
    # the kernel report (one row per short name and op) says so too, and the summary's Tensor Core figures follow
    with sqlite3.connect(f"file:{recording(name)}?mode=ro&immutable=1", uri=True) as conn:
        (short, variants), = conn.execute(
            "SELECT s.value, (SELECT COUNT(DISTINCT k2.demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL k2 "
            "WHERE k2.shortName = k.shortName) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName JOIN StringIds d ON d.id = k.demangledName "
            "WHERE d.value = ? LIMIT 1", (target,)).fetchall()
    assert variants == 1  # premise: the short name is this kernel alone
    kernels = tables(out / "dlagg_kernel.json")["kernels"]
    mine = kernels.loc[kernels["kernel_name"] == short, "uses_tc"]
    assert len(mine) > 0 and not mine.any()
    eligible = key_values(out / "dlagg_summary.json", "summary")
    before = key_values(without_ncu(runs, name) / "dlagg_summary.json", "summary")
    assert eligible["tc_eligible_tc_kernel_time_ns"] == before["tc_eligible_tc_kernel_time_ns"] - moved


# --- several ranks ---------------------------------------------------------------------------------

def test_the_ncu_rank_is_analysed_and_the_job_takes_its_figures(runs, tmp_path_factory) -> None:
    """Two ranks (resnet_amp, then resnet_fp32, one file each); ncu profiled rank 1's program."""
    folder = tmp_path_factory.mktemp("two_ranks")
    (folder / "a.sqlite").symlink_to(recording("resnet_amp"))
    (folder / "b.sqlite").symlink_to(recording("resnet_fp32"))
    out, err = runs("two_ranks", f"--nsys_database={folder}", f"--ncu_report={ncu_csv('resnet_fp32')}",
                    "--ncu_rank=1", "--per_rank=true", "--workers=1")
    step = key_values(out / "dlagg_roofline.json", "step")
    meta = json.loads((ncu_dir("resnet_fp32") / "meta.json").read_text())
    assert step["rank"] == 1 and step["matched"] == meta["kernels"]
    assert not (out / "rank0" / "dlagg_roofline.csv").exists() and (out / "rank1" / "dlagg_roofline.csv").exists()
    # the job's kernel rows take rank 1's figures; rank 0 has the columns, empty
    keys = ["kernel_name", "op_key"]  # the kernel report's rows: one per short name and op
    job = tables(out / "dlagg_kernel.json")["kernels"].set_index(keys)
    rank1 = tables(out / "rank1" / "dlagg_kernel.json")["kernels"].set_index(keys)
    rank0 = tables(out / "rank0" / "dlagg_kernel.json")["kernels"]
    assert rank0["achieved_tflop_per_s"].isna().all() and rank0["roofline_bound"].isna().all()
    known = rank1[rank1["achieved_tflop_per_s"].notna()]
    assert len(known) > 100
    assert job.loc[known.index, "achieved_tflop_per_s"].tolist() == known["achieved_tflop_per_s"].tolist()
    assert job.loc[known.index, "roofline_bound"].tolist() == known["roofline_bound"].tolist()
    assert job["achieved_tflop_per_s"].notna().sum() == len(known)
    op_types = tables(out / "dlagg_op_type.json")["op_types"].set_index("op_type")
    rank1_types = tables(out / "rank1" / "dlagg_op_type.json")["op_types"].set_index("op_type")
    assert op_types.loc["conv2d", "pct_of_ceiling"] == rank1_types.loc["conv2d", "pct_of_ceiling"]
    summary = key_values(out / "dlagg_summary.json", "summary")
    rank1_summary = key_values(out / "rank1" / "dlagg_summary.json", "summary")
    assert [summary[k] for k in MFU_KEYS] == [rank1_summary[k] for k in MFU_KEYS]
    assert summary["peak"] == "FP32 (ncu)"


def test_an_ncu_rank_the_job_lacks_is_an_error(tmp_path: Path) -> None:
    code, err = cli(f"--nsys_database={recording('cuda_basic')}", f"--ncu_report={ncu_csv('resnet_amp')}",
                    "--ncu_rank=2", "--reports=all", f"--output_path={tmp_path}")
    assert code == 2 and err.count("\n") == 1
    assert "--ncu_rank=2: the job has no such rank; its ranks are 0" in err



def test_utilization_past_the_peak_is_not_reported(tmp_path: Path) -> None:
    """A peaks file far below what the step did: no utilization over 100 %, a warning instead."""
    from dlagg.context import RankContext
    from dlagg.options import Options
    from dlagg.reader import load_profile
    from dlagg.reports.roofline import MFU_FIELDS, mfu_lines
    from dlagg.timeline.iterations import detect_iterations

    peaks = tmp_path / "low.json"
    peaks.write_text(json.dumps({"ceilings": {"tensor_fp16_flop_per_s": 1.0e12}}))
    profile = load_profile(recording("resnet_amp"))
    options = Options(nsys_database=recording("resnet_amp"), ncu_report=ncu_csv("resnet_amp"), peaks=peaks)
    ctx = RankContext(profile, detect_iterations(profile, None, None, None), options)
    lines, warnings = mfu_lines(ctx, 15.8e6)
    values = {f.key: v for f, v in lines}
    assert [f for f, _ in lines] == list(MFU_FIELDS)
    assert values["peak"] == "Tensor FP16 (low.json)" and values["peak_tflop_per_s"] == 1.0
    assert values["achieved_tflop_per_s"] > 1.0 and values["mfu_pct"] is None
    (warning,) = warnings
    assert "pass the Tensor FP16 (low.json) peak" in warning and "resnet_amp_raw.csv.gz" in warning
    # another rank's context: the lines are there, blank
    other = RankContext(profile, ctx.iterations, Options(nsys_database=recording("resnet_amp"),
                                                         ncu_report=ncu_csv("resnet_amp"), ncu_rank=1), rank=0)
    assert other.roofline is None and all(v is None for _, v in mfu_lines(other, 15.8e6)[0])
    # an ncu step of another program (a few names match by chance): no utilization either
    small = load_profile(recording("cuda_graph"))
    alien = RankContext(small, detect_iterations(small, None, None, None),
                        Options(nsys_database=recording("cuda_graph"), ncu_report=ncu_csv("resnet_amp")))
    assert 0 < alien.roofline_match.matched < 10
    lines, warnings = mfu_lines(alien, 1e6)
    assert all(v is None for f, v in lines if f.key != "peak" and f.key != "peak_tflop_per_s")
    assert any("0 % of the FLOPs resnet_amp_raw.csv.gz counted are in this run's iterations" in w for w in warnings)
