"""files that may not be the ranks of one run are said (a copy given as a second rank; sessions that
do not overlap in time)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from dlagg.cli import main
from dlagg.reader.discover import discover

from .conftest import recording


def _copies(tmp_path: Path, *names: str) -> list[Path]:
    paths = []
    for name in names:
        path = tmp_path / name
        shutil.copy(recording("cuda_basic"), path)
        paths.append(path)
    return paths


def test_a_copy_of_one_rank_given_as_a_second_is_said(tmp_path: Path, capsys) -> None:
    first, second = _copies(tmp_path, "rank0.sqlite", "rank1.sqlite")
    job = discover([first, second])
    assert len(job.sources) == 2
    assert any("rank1.sqlite: has the same content as rank0.sqlite" in note for note in job.notes), job.notes
    code = main([f"--nsys_database={first},{second}", "--reports=summary", "--formats=json", "-b",
                 f"--output_path={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 0 and "warning: " in err and "copy of one rank" in err, err


def test_ranks_whose_sessions_do_not_overlap_are_said(tmp_path: Path) -> None:
    first, second = _copies(tmp_path, "rank0.sqlite", "rank1.sqlite")
    conn = sqlite3.connect(second)
    conn.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 3750 * 1000000000")
    conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = 'elsewhere' WHERE name = 'Hostname'")
    conn.commit()
    conn.close()
    notes = discover([first, second]).notes
    assert not any("same content" in n for n in notes), notes
    assert any("rank1.sqlite: its session began" in n and "do not overlap in time" in n and "elsewhere" in n
               for n in notes), notes


def test_ranks_of_one_run_are_not_doubted(tmp_path: Path) -> None:
    first, second = _copies(tmp_path, "rank0.sqlite", "rank1.sqlite")
    conn = sqlite3.connect(second)
    conn.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 2 * 1000000000")
    conn.commit()
    conn.close()
    assert discover([first, second]).notes == ()
