"""The damage classes, one test each, on a real recording copied and mutated in the test.

Every damaged export gives a clear one-line error (exit 1) or a run whose warnings name what was
dropped, never an internal error (exit 3), never an impossible number; when the run succeeds the
kernel totals equal a direct SQL sum over the rows the reader must keep (tests/invariants.py).
"""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dlagg.cli import main

from .conftest import ROOT, recording
from .invariants import check_run, impossible_numbers, load_reports, sql_expected

KEY = "train_step"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"


def damaged(tmp_path: Path, *statements: str, name: str = "cuda_basic") -> Path:
    path = tmp_path / f"{name}.sqlite"
    shutil.copy(recording(name), path)
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    return path


def loosened(table: str) -> tuple[str, ...]:
    """SQL rebuilding `table` without its NOT NULL constraints (as a hand-made export may be)."""
    return (f"CREATE TABLE loose AS SELECT * FROM {table}", f"DROP TABLE {table}",
            f"ALTER TABLE loose RENAME TO {table}")


def run(capsys, db: Path, out: Path, *extra: str) -> tuple[int, str]:
    code = main([f"--nsys_database={db}", "--reports=all", "--formats=json", "-b", f"--output_path={out}", *extra])
    err = capsys.readouterr().err
    assert code != 3 and "internal error" not in err and "Traceback" not in err, err
    return code, err


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("dlagg: warning: ")]


def assert_clean_run(db: Path, out: Path) -> None:
    problems = check_run(out, sql_expected(db, KEY))
    assert not problems, problems


NOT_KEY = f"COALESCE(text, '') != '{KEY}'"
ROW_DAMAGE = {
    # class: (statements, words of the one warning, table and column it names)
    "text in an integer column": ((f"UPDATE {KERNEL} SET start = 'abc' WHERE rowid % 5 = 0",),
                                  "not an integer", f"{KERNEL}.start"),
    "huge real in an integer column": ((f'UPDATE {KERNEL} SET "end" = 1e300 WHERE rowid % 9 = 0',),
                                       "not an integer", f"{KERNEL}.end"),
    "blob in an integer column": ((f"UPDATE {RUNTIME} SET globalTid = x'00ff' WHERE rowid % 4 = 0",),
                                  "not an integer", f"{RUNTIME}.globalTid"),
    "NaN text in NVTX": ((f"UPDATE {NVTX} SET start = 'NaN' WHERE rowid % 3 = 0 AND {NOT_KEY}",),
                         "not an integer", f"{NVTX}.start"),
    "NULL end": ((*loosened(KERNEL), f'UPDATE {KERNEL} SET "end" = NULL WHERE rowid % 6 = 0'),
                 "NULL where a value is required", f"{KERNEL}.end"),
    "NULL thread of an API call": ((*loosened(RUNTIME), f"UPDATE {RUNTIME} SET globalTid = NULL WHERE rowid = 2"),
                                   "NULL where a value is required", f"{RUNTIME}.globalTid"),
    "end before start": ((f'UPDATE {KERNEL} SET "end" = start - 1000 WHERE rowid % 7 = 0',),
                         "end before the start", KERNEL),
    "2**63-1 end": ((f'UPDATE {KERNEL} SET "end" = 9223372036854775807 WHERE rowid = 7',),
                    "after the end of the session", KERNEL),
    "negative time": ((f"UPDATE {KERNEL} SET start = -5000 WHERE rowid = 9",), "negative time", KERNEL),
    "NVTX end after the session": ((f'UPDATE {NVTX} SET "end" = 9223372036854775807 WHERE rowid = 5 AND {NOT_KEY}',),
                                   "ended them with the profile", NVTX),
    "duplicated kernels": ((f"INSERT INTO {KERNEL} SELECT * FROM {KERNEL}",), "exact copy", KERNEL),
    "duplicated NVTX rows": ((f"INSERT INTO {NVTX} SELECT * FROM {NVTX}",), "exact copy", NVTX),
}


@pytest.mark.parametrize("case", list(ROW_DAMAGE))
def test_damaged_rows_are_dropped_counted_and_named(case: str, tmp_path: Path, capsys) -> None:
    statements, cause, where = ROW_DAMAGE[case]
    db = damaged(tmp_path, *statements)
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0, err
    named = [w for w in warnings(err) if cause in w]
    assert len(named) == 1 and where in named[0], err  # one warning for the cause, naming table (and column)
    assert_clean_run(db, tmp_path / "out")


def test_clean_recording_has_no_damage_warning(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path)
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0 and not [w for w in warnings(err) if "damaged" in w or "lacks" in w], err
    assert_clean_run(db, tmp_path / "out")


def test_non_utf8_text_is_replaced(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"UPDATE {NVTX} SET text = CAST(x'41ff42fe' AS TEXT) WHERE rowid % 3 = 0 AND {NOT_KEY}",
                 "UPDATE StringIds SET value = CAST(x'ff00c3' AS TEXT) WHERE id % 5 = 0")
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0, err
    assert_clean_run(db, tmp_path / "out")


def test_missing_runtime_table_is_named_with_what_reports_lose(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"DROP TABLE {RUNTIME}")
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0
    named = [w for w in warnings(err) if f"no {RUNTIME} table" in w]
    assert len(named) == 1 and "CPU (API) times are 0" in named[0]
    assert_clean_run(db, tmp_path / "out")


def test_missing_nvtx_table_is_named_with_what_reports_lose(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"DROP TABLE {NVTX}")
    code, err = run(capsys, db, tmp_path / "out")
    assert code == 0
    assert any(f"no {NVTX} table" in w and "no ops" in w for w in warnings(err)), err
    assert not impossible_numbers(load_reports(tmp_path / "out"))


def test_renamed_kernel_table_means_no_kernel_reports(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"ALTER TABLE {KERNEL} RENAME TO SOMETHING_ELSE")
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0 and "no CUDA kernels" in err
    assert not (tmp_path / "out" / "dlagg_kernel.json").exists()
    assert not impossible_numbers(load_reports(tmp_path / "out"))


@pytest.mark.parametrize("action", ["DROP COLUMN start", 'RENAME COLUMN "end" TO finish'])
def test_kernel_table_without_a_required_column_is_one_clear_error(action: str, tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"ALTER TABLE {KERNEL} {action}")
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    column = "start" if "start" in action else "end"
    assert code == 1 and err.count("\n") == 1 and f"table {KERNEL} lacks column(s) {column}" in err


def test_dropped_optional_columns_take_their_defaults(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"ALTER TABLE {KERNEL} DROP COLUMN gridX", f"ALTER TABLE {KERNEL} DROP COLUMN shortName",
                 f"ALTER TABLE {NVTX} DROP COLUMN endGlobalTid")
    code, err = run(capsys, db, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0, err
    assert_clean_run(db, tmp_path / "out")


@pytest.mark.parametrize("column", ["value", "id"])
def test_strings_table_without_its_columns_is_one_clear_error(column: str, tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path, f"ALTER TABLE StringIds RENAME COLUMN {column} TO other")
    code, err = run(capsys, db, tmp_path / "out")
    assert code == 1 and err.count("\n") == 1
    assert "StringIds" in err and f"column(s) {column}" in err and db.name in err


@pytest.mark.parametrize("keep", [4096, 100_000, 300_000])
def test_truncated_export_is_one_clear_error(keep: int, tmp_path: Path, capsys) -> None:
    db = tmp_path / "truncated.sqlite"
    db.write_bytes(recording("cuda_basic").read_bytes()[:keep])
    code, err = run(capsys, db, tmp_path / "out")
    assert code == 1 and err.count("\n") == 1 and db.name in err, err


@pytest.mark.parametrize("seed", range(6))
def test_damaged_pages_give_an_error_or_sound_reports(seed: int, tmp_path: Path, capsys) -> None:
    import random

    data = bytearray(recording("cuda_basic").read_bytes())
    rng = random.Random(seed)
    page = 4096
    for _ in range(8):  # garbage over parts of random pages (not the header page)
        at, length = rng.randrange(page, len(data) - 64), rng.randrange(8, 64)
        data[at:at + length] = rng.randbytes(length)
    db = tmp_path / "pages.sqlite"
    db.write_bytes(bytes(data))
    code, err = run(capsys, db, tmp_path / "out")
    if code == 0:
        assert not impossible_numbers(load_reports(tmp_path / "out"))
    else:
        assert code == 1 and [line for line in err.splitlines() if "error" in line][0].startswith("dlagg: error: ")


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={fifo}", "--reports=all",
                           f"--output_path={tmp_path / 'out'}"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1 and "named pipe" in done.stderr and done.stderr.count("\n") == 1


def test_device_is_refused(tmp_path: Path, capsys) -> None:
    code, err = run(capsys, Path("/dev/null"), tmp_path / "out")
    assert code == 1 and "a device" in err


def test_symlink_to_an_export_is_read(tmp_path: Path, capsys) -> None:
    link = tmp_path / "link.sqlite"
    link.symlink_to(recording("cuda_basic"))
    code, err = run(capsys, link, tmp_path / "out", f"--key_node={KEY}")
    assert code == 0, err


def test_uncheckpointed_wal_is_refused_with_how_to_checkpoint(tmp_path: Path, capsys) -> None:
    db = damaged(tmp_path)
    writer = sqlite3.connect(db)
    try:
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute(f"DELETE FROM {KERNEL} WHERE rowid % 2 = 0")
        writer.commit()
        wal = db.with_name(db.name + "-wal")
        assert wal.stat().st_size > 0
        before = wal.read_bytes()
        code, err = run(capsys, db, tmp_path / "out")
        assert code == 1 and err.count("\n") == 1
        assert f"{db.name}-wal" in err and "PRAGMA wal_checkpoint" in err
        assert wal.read_bytes() == before  # never changed
    finally:
        writer.close()


def _limited(limit_mb: int):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))
    return apply


def test_runs_under_an_address_space_limit(tmp_path: Path) -> None:
    """Any `ulimit -v` used to end in SIGSEGV inside the ADBC driver (docs/memory.md)."""
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={recording('cuda_basic')}",
                           "--reports=all", f"--output_path={tmp_path / 'out'}"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, preexec_fn=_limited(1024))
    assert done.returncode == 0, done.stderr


def test_too_small_a_limit_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={recording('cuda_basic')}",
                           "--reports=all", f"--output_path={tmp_path / 'out'}"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, preexec_fn=_limited(220))
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "out of memory" in done.stderr and "Traceback" not in done.stderr
