"""what a name may cost. A kernel or NVTX name is repeated in every report row, page and event file
naming it; names beyond `NAME_BOUND` bytes are shown cut, with a marker of the bytes left out (docs/input.md)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from dlagg.reader.nsys import NAME_BOUND, bounded_names

from .conftest import ROOT, recording

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MB = 1_000_000


def test_bounded_names_cuts_long_texts_with_a_marker() -> None:
    texts = pa.array(["short", "x" * (NAME_BOUND + 904), None, "é" * NAME_BOUND, "y" * NAME_BOUND])
    cut = bounded_names(texts).to_pylist()
    assert cut[0] == "short" and cut[2] is None and cut[4] == "y" * NAME_BOUND
    assert cut[1] == "x" * NAME_BOUND + "…[+904 bytes]"
    assert cut[3].startswith("é") and cut[3].endswith(" bytes]") and len(cut[3].encode()) <= NAME_BOUND + 32
    kept = cut[3].split("…")[0]
    assert cut[3].endswith(f"…[+{2 * NAME_BOUND - len(kept.encode())} bytes]")


def test_megabyte_kernel_names_cost_bounded_output_and_memory(tmp_path: Path) -> None:
    db = tmp_path / "long_names.sqlite"
    shutil.copy(recording("cuda_basic"), db)
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE StringIds SET value = printf('%.*c', {MB}, 'x') || id WHERE id IN "
                 f"(SELECT demangledName FROM {KERNEL} UNION SELECT shortName FROM {KERNEL})")
    conn.commit()
    conn.close()
    out = tmp_path / "out"
    script = ("import resource, sys; from dlagg.cli import main; code = main(sys.argv[1:]); "
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code)")
    done = subprocess.run([sys.executable, "-c", script, f"--nsys_database={db}", "--reports=all",
                           "--formats=all", f"--output_path={out}"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    peak_kb, code = map(int, done.stdout.split()[-2:])
    assert code == 0, done.stderr
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert written < 20 * MB, written  # names of 1 MB each: hundreds of MB without the bound
    assert peak_kb < 1_500_000, peak_kb
    text = b"".join(p.read_bytes() for p in out.rglob("*.json"))
    assert b"bytes]" in text and b"x" * (NAME_BOUND + 1) not in text
