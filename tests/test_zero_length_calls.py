"""Zero-length host-blocking CUDA calls: every cuda*Synchronize* call of a rank given end == start (a
clock too coarse, an export's rounding) is a rank whose calls blocked the host for no time, not an internal error
(`expert/facts.py`'s `_host_blocked` indexed the empty union of its calls); and one such rank in a multi-rank job
does not end the job."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from .conftest import dlagg

ZERO = ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end=start WHERE nameId IN "
        "(SELECT id FROM StringIds WHERE value LIKE 'cuda%Synchronize%')")


def zero_length_copy(source: Path, folder: Path) -> Path:
    """A copy of `source` in `folder` with its synchronising calls zero-length."""
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / source.name
    shutil.copyfile(source, copy)
    with sqlite3.connect(copy) as db:
        assert db.execute(ZERO).rowcount > 0
    db.close()
    return copy


@pytest.fixture(scope="module")
def ranks(multi, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """ddp2_gpt_per_rank's two files, rank 1's synchronising calls zero-length."""
    given = multi("ddp2_gpt_per_rank")
    folder = tmp_path_factory.mktemp("zero_length")
    for path in sorted(given.glob("*.sqlite")):
        if "rank1" in path.name:
            zero_length_copy(path, folder)
        else:
            shutil.copyfile(path, folder / path.name)
    return folder


def test_a_rank_whose_blocking_calls_are_all_zero_length_is_reduced(ranks: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dlagg(capsys, f"--nsys_database={next(ranks.glob('*rank1.sqlite'))}", "--reports=all",
                         "--formats=json", f"--output_path={tmp_path}")
    assert code == 0, err
    assert "internal error" not in err and "IndexError" not in err
    assert (tmp_path / "dlagg_expert_systems.json").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_one_such_rank_does_not_end_a_multi_rank_job(ranks: Path, tmp_path: Path, workers: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dlagg(capsys, f"--nsys_database={ranks}", "--reports=all", "--formats=json",
                         f"--output_path={tmp_path}", f"--workers={workers}")
    assert code == 0, err
    assert "internal error" not in err
    summary = json.loads((tmp_path / "dlagg_ranks.json").read_text())
    assert summary  # both ranks reported
