"""data no writer committed is refused, never read as valid.

A writer killed mid-transaction leaves a hot rollback journal beside the file; a live writer holds the file's
write lock. Either way the main file may hold half-written pages that SQLite itself would roll back or hide, and
dlagg, which opens the file immutable (no locks, no journal), would read them: it refuses, with the fix.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dlagg.cli import main

from .conftest import recording

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
# A writer in rollback-journal mode that changes rows (its cache of one page spills them into the main file),
# says so, and waits, mid-transaction, to be killed.
WRITER = f"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = DELETE")
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("UPDATE StringIds SET value = 'HALF_WRITTEN_' || id")
conn.execute('UPDATE {KERNEL} SET "end" = "start" + 999999999')
print("ready", flush=True)
time.sleep(600)
"""


def _writer(db: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def _run(capsys, db: Path, out: Path) -> tuple[int, str]:
    code = main([f"--nsys_database={db}", "--reports=all", "--formats=json", "-b", f"--output_path={out}"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return code, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "cuda_basic.sqlite"
    shutil.copy(recording("cuda_basic"), path)
    return path


def test_hot_journal_of_a_killed_writer_is_refused_with_the_fix(db: Path, tmp_path: Path, capsys) -> None:
    writer = _writer(db)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    journal = db.with_name(db.name + "-journal")
    assert journal.stat().st_size > 0
    before = db.read_bytes(), journal.read_bytes()
    code, err = _run(capsys, db, tmp_path / "out")
    assert code == 1 and err.count("\n") == 1, err
    assert f"{db.name}-journal" in err and "hot rollback journal" in err and "sqlite3 /tmp/" in err
    assert (db.read_bytes(), journal.read_bytes()) == before  # never changed
    assert not (tmp_path / "out").exists()
    # the fix the line gives works: a copy opened once by sqlite is rolled back and reads as the original
    copy = tmp_path / "fixed"
    copy.mkdir()
    shutil.copy(db, copy / db.name)
    shutil.copy(journal, copy / journal.name)
    sqlite3.connect(copy / db.name).execute("PRAGMA quick_check").fetchall()
    assert not (copy / journal.name).exists()
    code, err = _run(capsys, copy / db.name, tmp_path / "out")
    assert code == 0, err
    assert not any(b"HALF_WRITTEN" in p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())


def test_live_writer_holding_the_write_lock_is_refused(db: Path, tmp_path: Path, capsys) -> None:
    writer = _writer(db)
    try:
        code, err = _run(capsys, db, tmp_path / "out")
        assert code == 1 and err.count("\n") == 1, err
        assert "is being written now" in err and "wait until the writer has finished" in err
    finally:
        writer.kill()
        writer.wait()


def test_leftover_zeroed_journal_is_no_hot_journal(db: Path, tmp_path: Path, capsys) -> None:
    """journal_mode=PERSIST leaves a journal whose header is zeroed: committed, nothing to roll back."""
    db.with_name(db.name + "-journal").write_bytes(bytes(4096))
    code, err = _run(capsys, db, tmp_path / "out")
    assert code == 0, err
