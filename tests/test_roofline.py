"""Roofline from Nsight Compute on the real ncu fixtures (one step of resnet_amp and resnet_fp32 on
an H200) and on hand-made CSVs.

Expected values come from an independent reading of the raw CSV in this file (the csv module and
float parsing, nothing from dlagg.roofline), from the fixtures' meta.json totals, from SQL on the
nsys exports and from the per-kernel JSON ncu_report wrote (mangled names).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlagg.classify import kernel_uses_tc
from dlagg.errors import InputError
from dlagg.reader import load_profile
from dlagg.roofline import (
    KernelMatch,
    analyse,
    apply_peaks,
    chart_spec,
    iteration_flops,
    kernel_table,
    load_peaks,
    main_compute,
    match_kernels,
    measure,
    op_type_table,
    op_types_of,
    read_ncu_csv,
    render_png,
    roofline,
    step_totals,
    tc_disagreements,
)
from dlagg.roofline.match import base_name, normalise_demangled
from dlagg.roofline.ncu import unit_scale
from dlagg.timeline.iterations import detect_iterations

from .builders import ExportBuilder
from .conftest import BUNDLED, SHARED, ncu_csv, ncu_dir, recording

WORKLOADS = ("resnet_amp", "resnet_fp32")
SASS = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
TENSOR_SOURCES = {"FP16": "fp16", "BF16": "bf16_dst_fp32", "TF32": "tf32_dst_fp32", "FP64": "fp64", "FP8": "fp8",
                  "INT8": "int8", "INT1": "int1"}


# --- the independent reading of the raw CSV ---------------------------------------------------

def raw_csv(name: str) -> tuple[list[str], dict[str, str], list[dict[str, str]]]:
    with gzip.open(ncu_csv(name), "rt", newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    return header, dict(zip(header, rows[1], strict=True)), [dict(zip(header, r, strict=True)) for r in rows[2:]]


def num(text: str) -> float:
    return float(text.replace(",", ""))


def oracle(row: dict[str, str]) -> dict[str, float]:
    """FLOPs, tensor ops, bytes and time of one raw-page row, as ncu's roofline sections count them."""
    def inst(op: str) -> float:
        return num(row[SASS.format(op)])

    out = {
        "flops_fp64": inst("dadd") + inst("dmul") + 2 * inst("dfma"),
        "flops_fp32": inst("fadd") + inst("fmul") + 2 * inst("ffma"),
        "flops_fp16": 2 * inst("hadd") + 2 * inst("hmul") + 4 * inst("hfma"),
        "bytes_dram": num(row["dram__bytes.sum"]),
        "bytes_l2": num(row["lts__t_bytes.sum"]),
        "bytes_l1": num(row["l1tex__t_bytes.sum"]),
        "time_ns": num(row["gpu__time_duration.sum"]),
    }
    for precision, source in TENSOR_SOURCES.items():
        out[f"tensor_{precision.lower()}"] = num(row[f"sm__ops_path_tensor_src_{source}.sum"])
    out["flops_tensor"] = sum(out[f"tensor_{p.lower()}"] for p in TENSOR_SOURCES)
    return out


def oracle_pct_of_ceiling(row: dict[str, str], time_ns: float) -> tuple[str, float]:
    """The binding ceiling and % of it: max over resources of work / (peak per cycle x clock)."""
    work = oracle(row)
    sm_clock = num(row["sm__cycles_elapsed.avg.per_second"])
    bounds = {
        "DRAM": work["bytes_dram"] / (num(row["dram__bytes.sum.peak_sustained"])
                                      * num(row["dram__cycles_elapsed.avg.per_second"])),
        "L2": work["bytes_l2"] / (num(row["lts__t_bytes.sum.peak_sustained"])
                                  * num(row["lts__cycles_elapsed.avg.per_second"])),
        "L1": work["bytes_l1"] / (num(row["l1tex__t_bytes.sum.peak_sustained"])
                                  * num(row["l1tex__cycles_elapsed.avg.per_second"])),
        "FP32": work["flops_fp32"] / (2 * num(row[SASS.format("ffma") + ".peak_sustained"]) * sm_clock),
        "FP16": work["flops_fp16"] / (4 * num(row[SASS.format("hfma") + ".peak_sustained"]) * sm_clock),
        "FP64": work["flops_fp64"] / (2 * num(row[SASS.format("dfma") + ".peak_sustained"]) * sm_clock),
        "Tensor FP16": work["tensor_fp16"] / (
            num(row["sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained"]) * sm_clock),
    }
    bound = max(bounds, key=bounds.__getitem__)
    return bound, 100.0 * bounds[bound] * 1e9 / time_ns


def write_csv(path: Path, header: list[str], units: list[str], rows: list[list[str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerows([header, units, *rows])
    path.write_text(buffer.getvalue())
    return path


def without_columns(name: str, path: Path, drop) -> Path:  # drop: (column name) -> bool
    header, units, rows = raw_csv(name)
    keep = [c for c in header if not drop(c)]
    return write_csv(path, keep, [units[c] for c in keep], [[r[c] for c in keep] for r in rows])


# --- per-kernel quantities and step totals ----------------------------------------------------

@pytest.mark.parametrize("name", WORKLOADS)
def test_flops_and_bytes_per_kernel_equal_the_raw_csv(name: str) -> None:
    header, units, rows = raw_csv(name)
    assert units["dram__bytes.sum"] == "byte" and units["gpu__time_duration.sum"] == "ns"  # oracle reads as printed
    work = measure(read_ncu_csv(ncu_csv(name)))
    assert work.warnings == () and work.missing == ()  # every metric is there
    kernels = work.kernels
    assert kernels["id"].tolist() == [int(r["ID"]) for r in rows]
    for column, expected in pd.DataFrame([oracle(r) for r in rows]).items():
        np.testing.assert_array_equal(kernels[column].to_numpy(), expected.to_numpy(), err_msg=column)

    # per kernel name and launch shape (the report's rows): sums of the CSV rows with that name
    table = kernel_table(roofline(measure(read_ncu_csv(ncu_csv(name)))))
    sums: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in rows:
        key = (r["Kernel Name"], r["Grid Size"], r["Block Size"])
        acc = sums.setdefault(key, {"n": 0.0})
        acc["n"] += 1
        for column, value in oracle(r).items():
            acc[column] = acc.get(column, 0.0) + value
    assert len(table) == len(sums)
    columns = {"FP64 FLOPs": "flops_fp64", "FP32 FLOPs": "flops_fp32", "FP16 FLOPs": "flops_fp16",
               "Tensor FLOPs": "flops_tensor", "DRAM Bytes": "bytes_dram", "L2 Bytes": "bytes_l2",
               "L1 Bytes": "bytes_l1", "ncu Time (ns)": "time_ns", "Invocations": "n"}
    for _, row in table.iterrows():
        expected = sums[(row["Long Kernel Name"], row["Grid"], row["Block"])]
        for column, key in columns.items():
            assert row[column] == expected[key], (row["Kernel Name"], column)


@pytest.mark.parametrize("name", WORKLOADS)
def test_step_totals_equal_meta_json(name: str) -> None:
    meta = json.loads((ncu_dir(name) / "meta.json").read_text())["totals"]
    totals = step_totals(roofline(measure(read_ncu_csv(ncu_csv(name)))))
    assert totals["kernels"] == json.loads((ncu_dir(name) / "meta.json").read_text())["kernels"]
    assert totals["ncu_time_ns"] == meta["gpu_time_ns"]
    for precision, flops in meta["sass_flops_by_precision"].items():
        assert totals[f"flops_{precision}"] == flops
    for metric, ops in meta["tensor_ops_by_source_type"].items():
        precision = next(p for p, s in TENSOR_SOURCES.items() if metric == f"sm__ops_path_tensor_src_{s}.sum")
        assert totals[f"tensor_{precision.lower()}"] == ops
    assert totals["bytes_dram"] == meta["bytes"]["dram__bytes.sum"]
    assert totals["bytes_l2"] == meta["bytes"]["lts__t_bytes.sum"]
    assert totals["bytes_l1"] == meta["bytes"]["l1tex__t_bytes.sum"]
    assert totals["flops_total"] == meta["all_ops"]
    assert round(totals["ai_dram"], 3) == meta["arithmetic_intensity_dram"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_tensor_core_use_agrees_with_the_tensor_path_counters(name: str) -> None:
    _, _, rows = raw_csv(name)
    measured = measure(read_ncu_csv(ncu_csv(name))).kernels["uses_tc"]
    expected = [any(num(r[f"sm__ops_path_tensor_src_{s}.sum"]) > 0 for s in TENSOR_SOURCES.values()) for r in rows]
    assert measured.tolist() == expected
    assert sum(expected) == {"resnet_amp": 61, "resnet_fp32": 0}[name]  # the fixture README's counts
    # the pipe counter would have said otherwise (HFMA2 on the tensor pipe): it is not what is used
    pipe = [num(r["sm__inst_executed_pipe_tensor.sum"]) > 0 for r in rows]
    assert pipe != expected


@pytest.mark.parametrize("name", WORKLOADS)
def test_percent_of_ceiling_is_the_largest_work_over_ceiling(name: str) -> None:
    """Per kernel (rows launched once), with ncu's ceilings and the ncu time: independent formula."""
    _, _, rows = raw_csv(name)
    table = kernel_table(roofline(measure(read_ncu_csv(ncu_csv(name)))))
    once = table[table["Invocations"] == 1]
    by_key = {(r["Kernel Name"], r["Grid Size"], r["Block Size"]): r for r in rows}
    checked = 0
    for _, row in once.iterrows():
        raw = by_key[(row["Long Kernel Name"], row["Grid"], row["Block"])]
        bound, pct = oracle_pct_of_ceiling(raw, num(raw["gpu__time_duration.sum"]))
        assert row["Bound"] == bound
        assert row["% of Ceiling"] == pytest.approx(pct, rel=1e-9)
        checked += 1
    assert checked > 20
    assert (table["% of Ceiling"] <= 100).all() and (table["% of Ceiling"] > 0).all()


# --- matching to the nsys recordings ----------------------------------------------------------

@pytest.fixture(scope="module", params=WORKLOADS)
def matched(request):
    name = request.param
    profile = load_profile(recording(name))
    iterations = detect_iterations(profile, None, None, None)
    roof, match = analyse(ncu_csv(name), profile=profile, iterations=iterations)
    return name, profile, iterations, roof, match


def test_every_ncu_kernel_matches_an_nsys_kernel_of_every_step(matched) -> None:
    name, profile, iterations, roof, match = matched
    n = len(roof.kernels)
    assert match.matched == n and not match.unmatched_names
    assert iterations.count == 15 and (match.nsys_count == 15).all()
    assert f"{n} of {n} ncu kernels matched" in match.summary() and not any("matched" in w for w in roof.warnings)
    path = recording(name)
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        nsys = pd.DataFrame(conn.execute(
            'SELECT "end" - start, gridX, gridY, gridZ, blockX, blockY, blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL '
            "ORDER BY rowid").fetchall(), columns=["duration", "gx", "gy", "gz", "bx", "by", "bz"])
        total = conn.execute('SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    # same launch shape as the ncu kernel
    k = roof.kernels
    shapes = nsys.iloc[match.nsys_row][["gx", "gy", "gz", "bx", "by", "bz"]].to_numpy()
    assert (shapes == k[["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]].to_numpy()).all()
    # each of the 15 steps' kernels is some ncu kernel's match, once: the averages add up to a 15th
    assert len(match.pairs) == len(nsys) and match.pairs["row"].is_unique
    assert k["nsys_avg_ns"].sum() == pytest.approx(total / 15, rel=1e-12)
    # rates use the nsys time; ncu's time is still shown
    assert (k["time_source"] == "nsys").all()
    assert (k["rate_time_ns"] == k["nsys_avg_ns"]).all() and (k["ncu_time_ns"] == k["time_ns"]).all()


def test_matches_carry_the_kernels_mangled_names(matched) -> None:
    """ncu_report's mangled name of each kernel (the JSON) is the mangledName of its nsys match."""
    name, profile, _, roof, match = matched
    path = SHARED / "ncu" / name / f"{name}_kernels.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not available")
    with gzip.open(path, "rt") as handle:
        results = json.load(handle)["kernel_results"]
    mangled = {int(r["id"]): r["name_mangled"] for r in results}
    nsys_mangled = profile.strings.decode(profile.kernels["mangled_name_id"].iloc[match.nsys_row]).tolist()
    assert nsys_mangled == [mangled[i] for i in roof.kernels["id"]]


def test_mangled_name_export_matches_by_mangled_name(tmp_path: Path) -> None:
    """A CSV exported with --print-kernel-base mangled matches by mangledName."""
    name = "resnet_amp"
    path = SHARED / "ncu" / name / f"{name}_kernels.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not available")
    with gzip.open(path, "rt") as handle:
        mangled = {str(r["id"]): r["name_mangled"] for r in json.load(handle)["kernel_results"]}
    header, units, rows = raw_csv(name)
    for r in rows:
        r["Kernel Name"] = mangled[r["ID"]]
    csv_path = write_csv(tmp_path / "mangled.csv", header, [units[c] for c in header], [[r[c] for c in header]
                                                                                      for r in rows])
    profile = load_profile(recording(name))
    kernels = read_ncu_csv(csv_path).kernels
    match = match_kernels(kernels, profile, detect_iterations(profile, None, None, None))
    assert (match.how == "mangled name").all() and (match.nsys_count == 15).all()


def test_matching_by_shape_and_launch_order_within_steps(tmp_path: Path) -> None:
    """Hand-built: two steps; 'gemm' launched with two grids (the second step launches the small one
    twice), 'copy' and 'scale' once; the ncu step names 'scale' by its function name only
    (--print-kernel-base function) and has a kernel the nsys run never launched."""
    b = ExportBuilder()
    gemm = "void ns::gemm<float, 2>(float *)"
    for step, t0 in enumerate((0, 1000)):
        b.range(t0, t0 + 900, "train_step")
        b.launch(t0 + 10, t0 + 20, t0 + 100, t0 + 150 + step * 10, gemm, grid=(8, 1, 1))
        b.launch(t0 + 30, t0 + 40, t0 + 200, t0 + 220, "copy_kernel")
        b.launch(t0 + 50, t0 + 60, t0 + 300, t0 + 400 + step * 20, gemm, grid=(16, 1, 1))
        b.launch(t0 + 70, t0 + 80, t0 + 500, t0 + 530, "void ns::scale<float, (int)4>(float *)")
        if step == 1:
            b.launch(t0 + 90, t0 + 95, t0 + 600, t0 + 607, gemm, grid=(8, 1, 1))
    profile = load_profile(b.write(tmp_path / "two_steps.sqlite"))
    iterations = detect_iterations(profile, "train_step", None, None)
    kernels = pd.DataFrame({
        "name": ["void gemm<float, 2>(float *)", "copy_kernel", "void gemm<float, 2>(float *)", "scale",
                 "void gemm<float, 2>(float *)", "never_in_nsys"],
        "grid_x": [8, 1, 16, 1, 8, 1], "grid_y": 1, "grid_z": 1, "block_x": 32, "block_y": 1, "block_z": 1,
        "device": 0})
    match = match_kernels(kernels, profile, iterations)
    # the builder writes no mangledName column: names match as demangled, 'scale' by its base name
    assert match.how.tolist() == ["demangled name"] * 3 + ["base name", "demangled name", ""]
    # (50 + 60) / 2, 20, (100 + 120) / 2, 30, and the second small gemm of step 1 alone
    assert match.nsys_avg_ns[:5].tolist() == [55.0, 20.0, 110.0, 30.0, 7.0]
    assert match.nsys_count.tolist() == [2, 2, 2, 2, 1, 0] and match.nsys_row[5] == -1
    starts = profile.kernels["start"].to_numpy()[match.nsys_row[:5]]
    assert starts.tolist() == [100, 200, 300, 500, 1600]  # the earliest step's match
    assert match.unmatched_names == (("never_in_nsys", 1),)
    assert "5 of 6 ncu kernels matched" in match.summary() and "never_in_nsys" in match.summary()


@pytest.mark.parametrize(("ncu", "nsys"), [
    ("void at::elementwise_kernel<128, 2, at::Foo<float>>(int, T3)",
     "void at::native::elementwise_kernel<(int)128, (int)2, at::native::Foo<float>>(int, T3)"),
    ("void at::<unnamed>::max_pool_forward_nhwc<c10::Half, int>(const T1 *, int)",
     "void at::native::<unnamed>::max_pool_forward_nhwc<c10::Half, int>(const T1 *, int)"),
    ("void nhwcAddPaddingKernel<__half, float, 1, 0>(int)",
     "void nhwcAddPaddingKernel<__half, float, (bool)1, (cudnnKernelDataType_t)0>(int)"),
    ("void at::vectorized_elementwise_kernel<8, at::Add, std::array<char *, 2>>(int, T2, T3)",
     "void at::native::vectorized_elementwise_kernel<(int)8, at::native::Add, std::array<char *, (unsigned long)2>>"
     "(int, T2, T3)"),
])
def test_ncu_and_nsys_demangled_names_normalise_alike(ncu: str, nsys: str) -> None:
    assert normalise_demangled(ncu) == normalise_demangled(nsys)


@pytest.mark.parametrize(("name", "base"), [
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::f<int>(int)::[lambda(int) (instance 1)]>"
     "(int, T3)", "elementwise_kernel"),
    ("void at::native::<unnamed>::max_pool_forward_nhwc<c10::Half, int>(const T1 *, int)", "max_pool_forward_nhwc"),
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_kernel__5x_cudnn",
     "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_kernel__5x_cudnn"),
    ("_ZN2at6native29vectorized_elementwise_kernelILi8ENS0_15CUDAFunctor_addIN3c104HalfEEESt5arrayIPcLm3EEEEviT0_T1_",
     "vectorized_elementwise_kernel"),
    ("_Z20nhwcAddPaddingKernelI6__halfS0_fLb1EL21cudnnKernelDataType_t0EEviiiiiiiiPKT_PT0_iiiiT1_S7_",
     "nhwcAddPaddingKernel"),
])
def test_base_names(name: str, base: str) -> None:
    assert base_name(name) == base


# --- tables, op types, Tensor Core disagreements ----------------------------------------------

def test_op_type_table_partitions_the_kernels(matched) -> None:
    name, profile, _, roof, match = matched
    short = profile.strings.decode(profile.kernels["short_name_id"])
    op_of_row = pd.Series(np.where(short.str.contains("xmma|gemm|conv", regex=True), "conv_or_gemm", ""),
                          index=profile.kernels.index)
    op_types = op_types_of(match, op_of_row)
    table = op_type_table(roof, op_types)
    kernels = kernel_table(roof)
    assert set(table["Op Type"]) <= {"conv_or_gemm", "(no op)"}
    assert table["Kernels"].sum() == len(roof.kernels)
    for column in ("FP32 FLOPs", "Tensor FLOPs", "DRAM Bytes", "ncu Time (ns)"):
        assert table[column].sum() == pytest.approx(kernels[column].sum(), rel=1e-12)
    assert table["% of GPU Time"].sum() == pytest.approx(100.0)
    assert ((table["% of Ceiling"] > 0) & (table["% of Ceiling"] <= 100)).all()
    conv = op_types.to_numpy() == "conv_or_gemm"
    expected = roof.kernels["flops_tensor"].to_numpy()[conv].sum()
    assert table.set_index("Op Type").loc["conv_or_gemm", "Tensor FLOPs"] == expected


def test_tc_disagreements_list_the_kernels_whose_name_misleads(matched) -> None:
    name, _, _, roof, _ = matched
    _, _, rows = raw_csv(name)
    kernels = kernel_table(roof)
    check = tc_disagreements(roof, kernels)
    measured = {}
    for r, long_name in zip(rows, roof.kernels["long_name"], strict=True):
        used = any(num(r[f"sm__ops_path_tensor_src_{s}.sum"]) > 0 for s in TENSOR_SOURCES.values())
        measured[long_name] = measured.get(long_name, False) or used
    differ = {n for n, used in measured.items() if used != kernel_uses_tc(n)}
    assert set(check.table["Long Kernel Name"]) == differ
    # none since classify.py's execute_split_k_kernel rule: cuDNN's split-K steps of resnet_amp carry the xmma
    # family name but run no tensor math (the measured data behind the rule)
    split_k = {n for n in measured if "execute_split_k_kernel" in n}
    assert bool(split_k) == (name == "resnet_amp") and not any(measured[n] for n in split_k)
    assert not differ and check.warning is None and check.table.empty


def test_nsys_time_that_would_pass_a_ceiling_falls_back_to_the_ncu_time() -> None:
    """ncu's cold-cache bytes over a (made-up) tiny nsys time would pass the DRAM ceiling."""
    work = measure(read_ncu_csv(ncu_csv("resnet_amp")))
    n = len(work.kernels)
    avg = np.full(n, np.nan)
    avg[0], avg[1] = 1.0, work.kernels["time_ns"].iloc[1] * 0.9  # 1 ns: impossible; 90 %: plausible
    rows = np.full(n, -1)
    rows[:2] = [10, 11]
    match = KernelMatch(np.array(["demangled name"] * 2 + [""] * (n - 2), dtype=object), avg,
                        np.r_[1, 1, np.zeros(n - 2, dtype=np.int64)], rows, np.array(["k0", "k1"] + [""] * (n - 2),
                                                                                     dtype=object),
                        pd.DataFrame({"ncu": [0, 1], "row": [10, 11]}), 1, ())
    roof = roofline(work, match=match)
    k = roof.kernels
    assert k["time_source"].tolist()[:3] == ["ncu", "nsys", "ncu"]
    assert k["rate_time_ns"].iloc[0] == k["time_ns"].iloc[0] and k["rate_time_ns"].iloc[1] == avg[1]
    assert any("for 1 kernel(s) ncu's cold-cache counts over the nsys time would pass a ceiling" in w
               for w in roof.warnings)


def test_iteration_flops_weigh_each_kernel_by_the_steps_that_launch_it() -> None:
    """Hand-made match over 15 steps: kernel 0 in every step, kernel 1 in 5, the others in none."""
    work = measure(read_ncu_csv(ncu_csv("resnet_amp")))
    _, _, rows = raw_csv("resnet_amp")
    n = len(work.kernels)
    count = np.zeros(n, dtype=np.int64)
    count[:2] = [15, 5]
    match = KernelMatch(np.array(["demangled name"] * 2 + [""] * (n - 2), dtype=object), np.full(n, np.nan), count,
                        np.r_[10, 11, np.full(n - 2, -1)], np.array(["k0", "k1"] + [""] * (n - 2), dtype=object),
                        pd.DataFrame({"ncu": [0, 1], "row": [10, 11]}), 15, ())
    flops = [oracle(r)["flops_fp64"] + oracle(r)["flops_fp32"] + oracle(r)["flops_fp16"] + oracle(r)["flops_tensor"]
             for r in rows[:2]]
    assert iteration_flops(roofline(work, match=match), match) == pytest.approx(flops[0] + flops[1] / 3, rel=1e-12)
    assert iteration_flops(roofline(work)) == sum(
        oracle(r)["flops_fp64"] + oracle(r)["flops_fp32"] + oracle(r)["flops_fp16"] + oracle(r)["flops_tensor"]
        for r in rows)
    assert main_compute(roofline(work))[0] == "Tensor FP16"


def test_a_ceiling_below_what_a_kernel_did_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "low.json"
    path.write_text(json.dumps({"ceilings": {"dram_bytes_per_s": 1.0e12}}))
    work = measure(read_ncu_csv(ncu_csv("resnet_amp")))
    roof = roofline(work, apply_peaks(work.ceilings, load_peaks(path)))
    warning = next(w for w in roof.warnings if "ran faster than" in w)
    assert "the DRAM ceiling (low.json: ceilings.dram_bytes_per_s)" in warning and "raise it" in warning


# --- ceilings from a peaks file ---------------------------------------------------------------

def test_fixture_peaks_file_replaces_the_ceilings_it_names() -> None:
    peaks = load_peaks(BUNDLED / "ncu" / "peaks.json")
    raw = json.loads((BUNDLED / "ncu" / "peaks.json").read_text())["measured"]
    assert peaks.values["DRAM"] == max(v for k, v in raw.items() if k.startswith("dram_bytes_per_s"))
    assert peaks.values["Tensor FP16"] == raw["matmul_fp16_flop_per_s"]
    assert peaks.values["FP32"] == max(raw["matmul_fp32_simt_no_tf32_flop_per_s"], raw["fp32_ffma_triton_flop_per_s"])
    assert "L2" not in peaks.values  # not measured: ncu's own stays
    work = measure(read_ncu_csv(ncu_csv("resnet_amp")))
    ceilings = apply_peaks(work.ceilings, peaks)
    assert (ceilings.values["DRAM"] == peaks.values["DRAM"]).all()
    assert ceilings.values["L2"].equals(work.ceilings.values["L2"])
    assert ceilings.sources["DRAM"].startswith("peaks.json: measured.dram_bytes_per_s")
    assert ceilings.sources["L2"].startswith("ncu: lts__t_bytes.sum.peak_sustained")


def test_documented_peaks_format_and_percent_of_ceiling(tmp_path: Path) -> None:
    path = tmp_path / "peaks.json"
    path.write_text(json.dumps({"ceilings": {"dram_bytes_per_s": 4.0e12, "tensor_fp16_flop_per_s": 5.0e14}}))
    work = measure(read_ncu_csv(ncu_csv("resnet_amp")))
    roof = roofline(work, apply_peaks(work.ceilings, load_peaks(path)))
    _, _, rows = raw_csv("resnet_amp")
    table = kernel_table(roof)
    by_key = {(r["Kernel Name"], r["Grid Size"], r["Block Size"]): r for r in rows}
    dram_bound = table[(table["Bound"] == "DRAM") & (table["Invocations"] == 1)]
    assert len(dram_bound) > 5
    for _, row in dram_bound.iterrows():
        raw = by_key[(row["Long Kernel Name"], row["Grid"], row["Block"])]
        expected = 100 * num(raw["dram__bytes.sum"]) / 4.0e12 / (num(raw["gpu__time_duration.sum"]) * 1e-9)
        assert row["% of Ceiling"] == pytest.approx(expected, rel=1e-9)
        assert row["Binding Ceiling (/s)"] == pytest.approx(4.0e12, rel=1e-12)


@pytest.mark.parametrize(("content", "says"), [
    ("{not json", "is not valid JSON"),
    ('{"ceilings": {"dram_bandwidth": 4e12}}', 'unknown ceiling "dram_bandwidth"'),
    ('{"ceilings": {"dram_bytes_per_s": -1}}', "must be a positive number"),
    ('{"ceilings": {"dram_bytes_per_s": "fast"}}', "must be a positive number"),
    ('{"peaks": {}}', 'has no "ceilings" object'),
    ('{"measured": {"how": "notes only"}}', "names no ceiling"),
])
def test_bad_peaks_file_gets_one_line(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "peaks.json"
    path.write_text(content)
    with pytest.raises(InputError) as error:
        load_peaks(path)
    assert says in str(error.value) and "\n" not in str(error.value) and str(path) in str(error.value)


# --- bad and partial input --------------------------------------------------------------------

def _truncated(tmp_path: Path) -> Path:
    text = gzip.decompress(ncu_csv("resnet_amp").read_bytes())
    return _write(tmp_path / "truncated.csv", text[:len(text) * 2 // 3])


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


BAD_INPUTS = {
    "truncated": (_truncated, "may be truncated"),
    "truncated_gzip": (lambda t: _write(t / "cut.csv.gz", ncu_csv("resnet_amp").read_bytes()[:50_000]),
                       "gzip file is damaged"),
    "details_page": (lambda t: _write(t / "details.csv", '"ID","Kernel Name","Section Name","Metric Name",'
                                      '"Metric Unit","Metric Value"\n"0","k","SOL","Duration","ns","1,024"\n'),
                     "details page"),
    "nsys_stats": (lambda t: _write(t / "gpukernsum.csv",
                                    (BUNDLED / "nsys-2022.4" / "resnet_amp" / "resnet_amp_gpukernsum.csv").read_text()),
                   "not an Nsight Compute raw-page CSV"),
    "sqlite": (lambda t: _write(t / "run.csv", recording("cuda_basic").read_bytes()[:4096]), "raw-page CSV"),
    "empty": (lambda t: _write(t / "empty.csv", ""), "empty"),
    "no_kernels": (lambda t: _write(t / "none.csv", '"ID","Kernel Name","dram__bytes.sum"\n"","","byte"\n'),
                   "no profiled kernel"),
    "missing": (lambda t: t / "absent.csv", "no such file"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_csv_gets_one_clear_line(case: str, tmp_path: Path) -> None:
    make, says = BAD_INPUTS[case]
    path = make(tmp_path)
    with pytest.raises(InputError) as error:
        read_ncu_csv(path)
    message = str(error.value)
    assert says in message and "\n" not in message and str(path) in message


def test_missing_metrics_leave_their_columns_empty_and_say_which(tmp_path: Path) -> None:
    def drop(column: str) -> bool:
        return (column.startswith(("lts__t_bytes", "sm__ops_path_tensor", "sm__inst_executed_pipe_tensor"))
                or "_op_dadd_" in column)

    path = without_columns("resnet_amp", tmp_path / "partial.csv", drop)
    work = measure(read_ncu_csv(path))
    _, _, rows = raw_csv("resnet_amp")
    expected = pd.DataFrame([oracle(r) for r in rows])
    k = work.kernels
    for column in ("flops_fp32", "flops_fp16", "bytes_dram", "bytes_l1", "time_ns"):
        np.testing.assert_array_equal(k[column].to_numpy(), expected[column].to_numpy(), err_msg=column)
    for column in ("bytes_l2", "flops_fp64", "flops_tensor", "tensor_fp16"):
        assert k[column].isna().all(), column
    assert k["uses_tc"].isna().all()
    warning = next(w for w in work.warnings if "lacks metrics" in w)
    assert "L2 bytes (collect with --metrics lts__t_bytes.sum)" in warning
    assert "FP64 FLOPs" in warning and "sm__sass_thread_inst_executed_op_dadd_pred_on.sum" in warning
    assert "SpeedOfLight_HierarchicalTensorRooflineChart" in warning
    assert any("cannot tell Tensor Core use" in w for w in work.warnings)
    ceilings = next(w for w in work.warnings if "no ncu ceiling for" in w)
    assert "for L2 (collect with --metrics lts__t_bytes.sum.peak_sustained" in ceilings
    assert "Tensor FP16, Tensor BF16" in ceilings  # tensor work unknown: its ceilings matter
    # partial results: the roofline of what is known, the rest empty
    table = kernel_table(roofline(work))
    assert table["L2 Bytes"].isna().all() and table["AI L2 (FLOP/B)"].isna().all()
    assert table["DRAM Bytes"].sum() == expected["bytes_dram"].sum()
    assert table["Uses TC (measured)"].isna().all()
    assert table["Bound"].isin(["DRAM", "L1", "FP32", "FP16", ""]).all() and (table["Bound"] != "").any()
    assert ((table["% of Ceiling"].dropna() > 0) & (table["% of Ceiling"].dropna() <= 100)).all()


def test_counts_are_rebuilt_from_the_sections_rates_when_the_counters_are_absent(tmp_path: Path) -> None:
    """What --set roofline collects: per-cycle rates, not the .sum counters of the NERSC list."""
    def drop(column: str) -> bool:
        return column.startswith("sm__sass_thread_inst_executed_op_") and column.endswith("_pred_on.sum") \
            or column.startswith("sm__ops_path_tensor_src_fp16.sum") and column == "sm__ops_path_tensor_src_fp16.sum"

    path = without_columns("resnet_amp", tmp_path / "rates.csv", drop)
    work = measure(read_ncu_csv(path))
    totals = json.loads((ncu_dir("resnet_amp") / "meta.json").read_text())["totals"]
    k = work.kernels
    assert k["flops_fp32"].sum() == pytest.approx(totals["sass_flops_by_precision"]["fp32"], rel=1e-5)
    assert k["flops_fp16"].sum() == pytest.approx(totals["sass_flops_by_precision"]["fp16"], rel=1e-5)
    assert k["tensor_fp16"].sum() == pytest.approx(totals["tensor_ops_by_source_type"][
        "sm__ops_path_tensor_src_fp16.sum"], rel=1e-5)
    assert any("FP32 FLOPs derived from rates" in w for w in work.warnings)
    assert not any("lacks metrics" in w for w in work.warnings)


def test_units_row_scales_every_metric(tmp_path: Path) -> None:
    """ncu's default units: prefixed bytes, durations in usecond, clocks in cycle/nsecond."""
    header = ["ID", "Kernel Name", "Grid Size", "Block Size", "Device", "gpu__time_duration.sum", "dram__bytes.sum",
              "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second", SASS.format("ffma"),
              SASS.format("fadd"), SASS.format("fmul")]
    units = ["", "", "", "", "", "usecond", "Mbyte", "byte/cycle", "cycle/nsecond", "Kinst", "inst", "inst"]
    rows = [["0", "void k<2>(float *)", "(4, 1, 1)", "(128, 1, 1)", "0", "2.50", "1,250.5", "1,504", "3.20",
             "1.5", "1,000", "0"]]
    work = measure(read_ncu_csv(write_csv(tmp_path / "units.csv", header, units, rows)))
    k = work.kernels.iloc[0]
    assert k["time_ns"] == 2500.0 and k["bytes_dram"] == 1_250_500_000.0
    assert k["flops_fp32"] == 1000 + 2 * 1500.0
    assert work.ceilings.values["DRAM"].iloc[0] == pytest.approx(1504 * 3.2e9)
    assert math.isnan(k["flops_fp16"]) and math.isnan(k["bytes_l2"])
    assert (k["grid_x"], k["block_x"]) == (4, 128)


@pytest.mark.parametrize(("unit", "scale"), [
    ("", 1.0), ("%", 1.0), ("byte", 1.0), ("Kbyte", 1e3), ("Gbyte", 1e9), ("ns", 1.0), ("nsecond", 1.0),
    ("usecond", 1e3), ("msecond", 1e6), ("second", 1e9), ("hz", 1.0), ("Ghz", 1e9), ("cycle/nsecond", 1e9),
    ("cycle/usecond", 1e6), ("byte/second", 1.0), ("Tbyte/second", 1e12), ("byte/s", 1.0), ("inst/cycle", 1.0),
    ("Kinst", 1e3), ("byte/cycle", 1.0), ("Xbyte", None), ("B/ns!", None),
])
def test_unit_scale(unit: str, scale: float | None) -> None:
    assert unit_scale(unit) == scale


# --- the picture ------------------------------------------------------------------------------

def test_chart_spec_draws_ceilings_and_one_dot_per_kernel_and_level(matched) -> None:
    name, _, _, roof, _ = matched
    table = kernel_table(roof)
    spec = chart_spec(table, roof.ceilings, title=name, top=5)
    plot = spec["vconcat"][0]
    lines = plot["layer"][0]["data"]["values"]
    drawn = {line["ceiling"] for line in lines}
    tensor = "Tensor FP16"
    assert {"DRAM", "L2", "L1", "FP64", "FP32", "FP16", tensor} == drawn
    points = next(layer for layer in plot["layer"] if layer["mark"]["type"] == "point")["data"]["values"]
    with_flops = table[table["Achieved FLOP/s"] > 0]
    expected = sum(int((with_flops[f"AI {lv} (FLOP/B)"] > 0).sum()) for lv in ("DRAM", "L2", "L1"))
    assert len(points) == expected
    shares = {p["name"]: p["share"] for p in points}
    assert max(shares, key=shares.__getitem__) == with_flops.iloc[0]["Kernel Name"]
    listing = spec["vconcat"][1]["data"]["values"]
    assert [entry["rank"] for entry in listing] == [1, 2, 3, 4, 5]
    assert listing[0]["text"].startswith(f"1  {with_flops.iloc[0]['Kernel Name'][:30]}")
    typical = roof.ceilings.typical()
    dram = [line for line in lines if line["ceiling"] == "DRAM"]
    assert dram[0]["y"] / dram[0]["x"] == pytest.approx(typical["DRAM"])


def test_png_renders() -> None:
    roof, _ = analyse(ncu_csv("resnet_amp"))
    png = render_png(chart_spec(kernel_table(roof), roof.ceilings, title="resnet_amp"), scale=1)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
