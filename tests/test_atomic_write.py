"""Outputs are written atomically: a failure while writing leaves the old file (or none) and no temp file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlagg.writers.base import atomic_write


def failing(error: BaseException) -> Iterator[str]:
    yield "Kernel Report\n"
    yield "Kernel Name,Calls\n"
    raise error


@pytest.mark.parametrize("error", [RuntimeError("a report failed half-way"), KeyboardInterrupt(), MemoryError()],
                         ids=["error", "ctrl-c", "out-of-memory"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "overwrite"])
def test_a_failing_writer_leaves_no_temp_file_and_the_old_output(tmp_path: Path, error: BaseException,
                                                                  existing: bool) -> None:
    target = tmp_path / "dlagg_kernel.csv"
    if existing:
        target.write_text("old report\n")
    with pytest.raises(type(error)):
        atomic_write(target, failing(error))
    assert sorted(p.name for p in tmp_path.iterdir()) == (["dlagg_kernel.csv"] if existing else [])
    if existing:
        assert target.read_text() == "old report\n"


def test_pieces_of_text_and_bytes_become_one_file_with_the_usual_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    atomic_write(target, iter(["a,", b"b\n", memoryview(b"1,2\n")]))
    assert target.read_bytes() == b"a,b\n1,2\n"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
