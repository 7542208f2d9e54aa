"""Every crash the reader fuzzer found (tests/fuzz/crashes/), replayed: a clear error or a profile.

Each file is an input saved by ``tests/fuzz/run_fuzz.py`` that once escaped the reader with an
exception other than `InputError`; it is read again through the fuzz target and through the
command line, which must end in a profile and reports or one clear error line (never exit 3).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from dlagg.cli import main

from .conftest import ROOT

CRASHES = sorted((ROOT / "tests" / "fuzz" / "crashes").glob("crash-*"))
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

from target import read_export  # noqa: E402


@pytest.mark.parametrize("crash", CRASHES, ids=lambda p: p.name[:14])
def test_fuzz_crash_is_a_clear_answer(crash: Path, tmp_path: Path, capsys) -> None:
    db = tmp_path / "input.sqlite"
    shutil.copy(crash, db)
    read_export(db)  # raises anything but InputError / MemoryError
    code = main([f"--nsys_database={db}", "--reports=all", "--formats=json", "-b", f"--output_path={tmp_path / 'o'}"])
    err = capsys.readouterr().err
    assert code in (0, 1) and "internal error" not in err, err
    if code == 1:
        assert [line for line in err.splitlines() if " error: " in line][0].startswith("dlagg: error: ")


def test_seed_corpus_reads_cleanly(tmp_path: Path, capsys) -> None:
    for seed in sorted((ROOT / "tests" / "fuzz" / "corpus").glob("*.sqlite")):
        code = main([f"--nsys_database={seed}", "--reports=all", "--formats=json", "-b",
                     f"--output_path={tmp_path / seed.stem}"])
        assert code == 0, capsys.readouterr().err
