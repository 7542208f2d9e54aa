"""output conflicts said before the work, with their real reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlagg.cli import main
from dlagg.output.staging import HOST

from .conftest import ROOT, recording


def _inputs(tmp_path: Path) -> str:
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(recording("cuda_basic"), a)
    shutil.copy(recording("cuda_graph"), b)
    return f"{a},{b}"


def test_per_rank_with_an_event_folder_named_as_a_rank_folder_says_why(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = main([f"--nsys_database={_inputs(tmp_path)}", "--per_rank", "--tb_dir=.", "--profile_name=rank0",
                 f"--output_path={out}", "--formats=html"])
    err = capsys.readouterr().err
    assert code != 0 and "cannot write" not in err, err
    assert "--per_rank writes rank 0's reports" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_run_finds_another_run_making_the_same_outputs_before_its_work(tmp_path: Path, capsys) -> None:
    """A run going on (its staging folder claims the profile name) stops a second one before it reads."""
    out = tmp_path / "out"
    out.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        claimed = out / f".dlagg-staging.{HOST}.{sleeper.pid}.abc123"
        (claimed / "files").mkdir(parents=True)
        (claimed / "profile").write_text("dlagg", encoding="utf-8")
        code = main([f"--nsys_database={recording('cuda_basic')}", "--reports=all", "--formats=json", "-b",
                     f"--output_path={out}", "--verbosity=normal"])
        err = capsys.readouterr().err
        assert code != 0 and f"process {sleeper.pid}" in err and "another dlagg run" in err, err
        assert "reduced" not in err and "iterations" not in err, err  # refused before the work
        assert sorted(p.name for p in out.iterdir()) == [claimed.name]  # its own staging folder gone
        code = main([f"--nsys_database={recording('cuda_basic')}", "--reports=summary", "--formats=json", "-b",
                     f"--output_path={out}", "--profile_name=other"])
        assert code == 0, capsys.readouterr().err
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.processes
def test_concurrent_runs_into_one_folder_refuse_early(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [sys.executable, "-m", "dlagg", f"--nsys_database={recording('resnet_amp')}", "--reports=all",
            "--formats=json", "-b", f"--output_path={out}"]
    runs = [subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errs = [(run.wait(timeout=600), run.stderr.read()) for run in runs]  # type: ignore[union-attr]
    assert sum(code == 0 for code, _ in errs) >= 1, errs
    for code, err in errs:
        assert code in (0, 1) and "Traceback" not in err, err
        if code:
            assert "another dlagg run" in err or "already exists" in err, err
