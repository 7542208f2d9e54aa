"""A damaged export's pages are found before its figures are shown (docs/input.md, "Pages SQLite finds damaged").

Two pages of a real recording swapped in a copy: the file still opens and most of its rows still read, so only
SQLite's own page check tells. dlagg refuses it with one line naming the file, writes nothing and leaves the file
as it was; ``--check=false`` reads what can still be read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

import dlagg
from dlagg.errors import DlaggError
from dlagg.reader import integrity

from .conftest import dlagg as run_dlagg
from .conftest import recording


def _swap_pages(path: Path, first: int, second: int) -> None:
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")  # the database header's page size
    a, b = slice(first * size, (first + 1) * size), slice(second * size, (second + 1) * size)
    data[a], data[b] = data[b], data[a]
    path.write_bytes(bytes(data))


def _quick_check(path: Path) -> list[tuple[str]]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as connection:
        connection.text_factory = lambda raw: raw.decode("utf-8", "replace")
        return connection.execute("PRAGMA quick_check").fetchall()


@pytest.fixture
def swapped(tmp_path: Path) -> Path:
    path = tmp_path / "resnet_amp.sqlite"
    shutil.copy(recording("resnet_amp"), path)
    pages = path.stat().st_size // 4096
    _swap_pages(path, pages // 3, 2 * pages // 3)
    assert _quick_check(path) != [("ok",)]  # the damage is one SQLite itself sees
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sound_export_passes_the_check() -> None:
    assert _quick_check(recording("resnet_amp")) == [("ok",)]


def test_swapped_pages_are_refused_with_one_line_and_no_output(swapped: Path, tmp_path: Path, capsys) -> None:
    before = _digest(swapped)
    out = tmp_path / "out"
    code, _, err = run_dlagg(capsys, f"--nsys_database={swapped}", "--reports=all", "--formats=all",
                             f"--output_path={out}")
    errors = [line for line in err.splitlines() if line.startswith("dlagg: error:")]
    assert code == 1 and len(errors) == 1, err
    assert str(swapped) in errors[0] and "damaged" in errors[0] and "--check=false" in errors[0]
    assert "Traceback" not in err
    assert not out.exists() or not any(out.rglob("*.*")), sorted(out.rglob("*"))
    assert _digest(swapped) == before


def test_check_false_reads_what_can_still_be_read(swapped: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, _, err = run_dlagg(capsys, f"--nsys_database={swapped}", "--reports=summary", "--check=false",
                             f"--output_path={out}")
    assert code == 0, err
    assert (out / "dlagg_summary.csv").exists()


def test_one_damaged_rank_file_stops_the_job(multi, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "ranks"
    shutil.copytree(multi("ddp2_gpt_per_rank"), folder)
    damaged = sorted(folder.glob("*rank1.sqlite"))[0]
    pages = damaged.stat().st_size // 4096
    _swap_pages(damaged, pages // 3, 2 * pages // 3)
    assert _quick_check(damaged) != [("ok",)]
    code, _, err = run_dlagg(capsys, f"--nsys_database={folder}", "--reports=summary,ranks", "--workers=1",
                             f"--output_path={tmp_path / 'out'}")
    assert code == 1 and damaged.name in err and "damaged" in err, err


def test_the_library_takes_the_same_switch(swapped: Path) -> None:
    with pytest.raises(DlaggError, match="damaged"):
        dlagg.analyze(swapped, reports="summary")
    assert len(dlagg.analyze(swapped, reports="summary", check=False).summary)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a nice value per thread is Linux's")
def test_the_check_takes_only_the_cores_the_run_leaves_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's thread runs at the lowest priority (a nice value of its own), the run's threads at theirs."""
    seen: list[int] = []

    def priority_of_the_checking_thread(path: Path) -> None:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    monkeypatch.setattr(integrity, "_quick_check", priority_of_the_checking_thread)
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    integrity.PageCheck([recording("resnet_amp")]).verdict()
    assert seen == [19] and os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
