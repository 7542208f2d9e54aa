"""Plausible damage that made impossible numbers: NVTX push/pop ranges that cross, ends that are
missing, times that are not whole nanoseconds; and input and output names no file can have.

Each case is a real recording copied and mutated in the test; the expected figures come from SQL
over the mutated file (or from the case itself), never from dlagg's output.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from dlagg.cli import main

from .conftest import recording
from .invariants import impossible_numbers, load_reports
from .test_damage import KERNEL, NVTX, assert_clean_run, damaged, run, warnings

AMP = "resnet_amp"
KEY = "train_step"


def sql(db: Path, query: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(query).fetchone()[0] or 0)


def span(db: Path) -> int:
    """The profile's span by SQL: first start to last end over the kernels, API calls and NVTX ranges."""
    tables = (KERNEL, "CUPTI_ACTIVITY_KIND_RUNTIME", NVTX)
    first = min(sql(db, f"SELECT min(start) FROM {t} WHERE typeof(start) = 'integer' AND start >= 0") for t in tables)
    last = max(sql(db, f'SELECT max("end") FROM {t} WHERE typeof("end") = \'integer\'') for t in tables)
    return last - first


def assert_possible_op_times(db: Path, out: Path) -> None:
    """No op is longer than the profile; all ops together are no longer than the profile on every thread
    that has push/pop ranges (ops of one thread never overlap)."""
    reports = load_reports(out)
    assert not impossible_numbers(reports)
    bound = span(db)
    threads = sql(db, f"SELECT count(DISTINCT globalTid) FROM {NVTX} WHERE eventType = 59")
    summary = next(t for t in reports["summary"]["tables"] if t["title"] == "All Ops")
    cpu_at = [f["title"] for f in summary["fields"]].index("CPU Time (ns)")
    all_ops = next(row for row in summary["rows"] if row[0] == "All ops")
    assert all_ops[cpu_at] <= threads * bound, (all_ops, threads, bound)
    op_type = reports["op_type"]["tables"][0]
    at = [f["title"] for f in op_type["fields"]].index("Max CPU Time (ns)")
    assert max(row[at] for row in op_type["rows"]) <= bound


def test_crossing_push_pop_ranges_are_left_out_and_op_times_stay_possible(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f'UPDATE {NVTX} SET "end" = "end" + 5000000 WHERE rowid % 3 = 0', name=AMP)
    out = tmp_path / "out"
    code, err = run(capsys, db, out, f"--key_node={KEY}")
    assert code == 0, err
    assert_possible_op_times(db, out)
    named = [w for w in warnings(err) if "end after the end of the range they began in" in w]
    assert len(named) == 1 and NVTX in named[0] and "left them out" in named[0], err


def test_ranges_without_an_end_inside_closed_ones_are_left_out(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f'UPDATE {NVTX} SET "end" = NULL WHERE rowid % 7 = 0', name=AMP)
    out = tmp_path / "out"
    code, err = run(capsys, db, out, f"--key_node={KEY}")
    assert code == 0, err
    assert_possible_op_times(db, out)
    # a push/pop range without an end begun inside a closed range of its thread cannot be open at the end
    # (the latest end of the closed ranges its thread began strictly before it: max ignores the NULL ends)
    inside = sql(db, f"""SELECT count(*) FROM (SELECT "end" IS NULL AS open, start, max("end") OVER (
        PARTITION BY globalTid ORDER BY start RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
        FROM {NVTX} WHERE eventType = 59) WHERE open AND reach > start""")
    named = [w for w in warnings(err) if "no end although" in w]
    assert inside > 0 and len(named) == 1 and f"{NVTX} {inside:,}" in named[0], err


@pytest.mark.parametrize("name, damage", [("cuda_basic", "start = start + 0.5 WHERE rowid % 5 = 0"),
                                          (AMP, "start = start + 0.5 WHERE rowid % 5 = 0"),
                                          (AMP, "start = 1.5 WHERE rowid % 5 = 0")])
def test_times_with_a_fraction_are_dropped_and_counted(name: str, damage: str, tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"UPDATE {KERNEL} SET {damage}", name=name)
    out = tmp_path / "out"
    code, err = run(capsys, db, out, f"--key_node={KEY}")
    assert code == 0, err
    reports = load_reports(out)
    assert not impossible_numbers(reports)
    values = {f["title"]: v for t in reports["summary"]["tables"] if t.get("key_value") and t["rows"]
              for f, v in zip(t["fields"], t["rows"][0], strict=True)}
    kept = sql(db, f'SELECT sum("end" - start) FROM {KERNEL} WHERE typeof(start) = \'integer\'')
    assert values["GPU Utilization %"] <= 100 * kept / values["Wall Clock Time (ns)"] + 0.05
    kernels = next(t for t in reports["summary"]["tables"] if t["title"] == "All Kernels")
    gpu_at = [f["title"] for f in kernels["fields"]].index("GPU Time (ns)")
    rows = {row[0]: row[gpu_at] for row in kernels["rows"]}  # (All kernels counts copies and memsets too)
    assert rows["Kernels using TC"] + rows["All other kernels"] <= kept
    fractions = sql(db, f"SELECT count(*) FROM {KERNEL} WHERE typeof(start) = 'real' "
                        "AND start != CAST(start AS INTEGER)")
    named = [w for w in warnings(err) if "not an integer" in w]
    assert fractions > 0 and len(named) == 1 and f"{KERNEL}.start {fractions:,}" in named[0], err
    if name == "cuda_basic":  # (tests/invariants.py's SQL kernel totals hold for this recording)
        assert_clean_run(db, out)


# --- names no file can have ---------------------------------------------------------------------------

def one_line_error(capsys, code: int, expected: int, *words: str) -> None:  # noqa: ANN001
    err = capsys.readouterr().err
    assert code == expected and err.count("\n") == 1 and "internal error" not in err, err
    assert all(w in err for w in words), err


def test_a_symlink_loop_is_one_clear_error_given_named_in_a_folder_or_by_a_glob(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    os.symlink("b.sqlite", folder / "a.sqlite")
    os.symlink("a.sqlite", folder / "b.sqlite")
    for given in (folder / "a.sqlite", folder, folder / "*.sqlite"):
        code = main([f"--nsys_database={given}", "-b", f"--output_path={tmp_path / 'out'}"])
        one_line_error(capsys, code, 1, "loop", ".sqlite")
    assert not (tmp_path / "out").exists()


def test_an_input_name_over_the_filesystem_limits_is_one_clear_error(tmp_path: Path, capsys) -> None:
    long_part = tmp_path / ("x" * 300 + ".sqlite")
    long_path = Path(tmp_path, *(["y" * 200] * 25), "a.sqlite")
    for given in (long_part, long_path):
        code = main([f"--nsys_database={given}", "-b", f"--output_path={tmp_path / 'out'}"])
        one_line_error(capsys, code, 1, "--nsys_database")


def test_an_output_name_over_the_filesystem_limits_is_an_option_error(tmp_path: Path, capsys) -> None:
    db = tmp_path / "run.sqlite"
    shutil.copy(recording("cuda_basic"), db)
    for option in (f"--output_path={tmp_path / ('o' * 300)}", f"--output_path={Path(tmp_path, *(['p' * 200] * 21))}",
                   "--profile_name=" + "n" * 300):
        code = main([f"--nsys_database={db}", "-b", "--formats=csv", option] +
                    ([f"--output_path={tmp_path / 'out'}"] if "profile_name" in option else []))
        one_line_error(capsys, code, 2, option.split("=")[0])
    assert not (tmp_path / "out").exists()
