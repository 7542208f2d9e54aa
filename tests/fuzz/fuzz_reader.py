"""Byte-level fuzzing of the reader's entry points with atheris, on mutated real exports.

The target (target.py) reads an input through every reader entry point. Each input is a seed
export from ``tests/fuzz/corpus/`` (small real nsys recordings, make_corpus.py) with bytes
changed by libFuzzer's mutator, guided by the coverage of dlagg's own Python code. Anything but
a profile, an `InputError` or a `MemoryError` is a crash, saved by libFuzzer as
``crash-<sha1>``; copied to ``tests/fuzz/crashes/`` it becomes a regression test
(tests/test_fuzz_regressions.py).

    python tests/fuzz/run_fuzz.py --minutes 10          # the driver: executions and crashes
    python tests/fuzz/fuzz_reader.py tests/fuzz/corpus  # libFuzzer directly (its own flags apply)

atheris is not a dependency of dlagg: ``pip install atheris`` (or ``pip install '.[fuzz]'``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

try:  # coverage of dlagg's own code guides the mutations; without atheris, plain imports
    import atheris

    with atheris.instrument_imports(include=["dlagg", "target"]):
        from target import read_export
except ImportError:
    atheris = None
    from target import read_export  # noqa: E402

_TMP = Path(tempfile.mkdtemp(prefix="dlagg-fuzz-"))
_DB = _TMP / "input.sqlite"


def one_input(data: bytes) -> None:
    """`data` as an export file, read by every reader entry point (target.py)."""
    _DB.write_bytes(data)
    read_export(_DB)


def main() -> None:
    if atheris is None:
        sys.exit("atheris is not installed: pip install atheris")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
