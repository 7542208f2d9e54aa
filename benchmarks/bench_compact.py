"""Cost of dropping rows from the NVTX columns (``dlagg/reader/nsys.py``, ``_compact``), by rows dropped.

The reader fills the NVTX columns over the table's row-id span and, at the end, drops the rows that held
no usable range (domain rows, row-id gaps, damage). Up to ``FEW_GAPS`` dropped rows ``_compact`` moves the
runs of kept rows down in place: a Python loop over the runs, up to ``FEW_GAPS`` + 1 block moves per
column, and no copy of a column; beyond it, each column is selected with the boolean mask (a transient
copy of one column). This prints, for ROWS rows in the eight columns the reader keeps (8.5 M rows: the
ranges of a 160 MB emit_nvtx export), the time of ``_compact`` and of the boolean selection of every
column, at several numbers of dropped rows spread evenly over the table; best of REPEATS, in ms.

    python benchmarks/bench_compact.py [--rows 8500000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dlagg.reader.nsys import FEW_GAPS, _compact  # noqa: E402

# The columns the reader keeps per NVTX row, with their dtypes (reader/nsys.py, _NvtxRead).
COLUMNS = {"start": np.int64, "end": np.int64, "global_tid": np.int64, "domain_id": np.int32,
           "crosses_thread": np.bool_, "row": np.int32, "text_id": np.int32, "seq": np.int32}


def columns(rows: int) -> dict[str, np.ndarray]:
    return {name: np.arange(rows).astype(dtype) for name, dtype in COLUMNS.items()}


def best(fn, rows: int, keep: np.ndarray, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """Fastest of `repeats` runs of fn(columns, keep), in ms (fresh columns each time: _compact moves rows)."""
    times = []
    for _ in range(repeats):
        data = columns(rows)
        began = time.perf_counter()
        fn(data, keep)
        times.append(time.perf_counter() - began)
        del data
    return 1000 * min(times)


def select(data: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {name: values[keep] for name, values in data.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8_500_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{args.rows:,} rows, {len(COLUMNS)} columns, FEW_GAPS = {FEW_GAPS:,}; best of {args.repeats}, ms")
    print(f"{'dropped':>10} {'_compact':>10} {'selection':>10}")
    for dropped in sorted({1, 10, 100, 1_000, 3_000, FEW_GAPS // 2, FEW_GAPS, 10 * FEW_GAPS}):
        keep = np.ones(args.rows, dtype=bool)
        keep[np.linspace(0, args.rows - 1, dropped).astype(np.int64)] = False
        print(f"{dropped:>10,} {best(_compact, args.rows, keep, args.repeats):>10.1f} "
              f"{best(select, args.rows, keep, args.repeats):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
