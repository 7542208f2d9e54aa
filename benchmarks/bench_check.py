"""What the page check (SQLite's ``PRAGMA quick_check``, on by default, ``--check=false`` skips it) costs a run.

On an export tiled from the shared transformer_amp_large recording (``--copies 4``: about 650 MB, close to the
577 MB export the start of this check was decided on), it prints, each the best of ``--repeat`` runs in fresh
processes, interleaved so that a drift of the machine's speed touches both alike:

- ``PRAGMA quick_check`` alone (the page cache warm, as for the runs);
- ``dlagg --reports=all --formats=csv`` with ``--check=true`` and with ``--check=false``: wall and CPU seconds
  (the run's and its children's), and the ratio of each with the check to without.

The check runs in a thread beside the read, so on two cores or more its wall cost is what the read leaves of the
second core; its CPU cost is the quick_check's.

    python benchmarks/bench_check.py [--source X.sqlite[.gz]] [--copies 4] [--repeat 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from bench_dlagg import DEFAULT_WORKDIR, SHARED_SOURCE, source_database, warm
from tile_export import tile

CASES = {"--check=true": "true", "--check=false": "false"}


def quick_check(path: Path) -> float:
    start = time.perf_counter()
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True) as connection:
        verdict = connection.execute("PRAGMA quick_check").fetchall()
    if verdict != [("ok",)]:
        raise SystemExit(f"bench: {path} is damaged: {verdict[:3]}")
    return time.perf_counter() - start


def run(path: Path, out: Path, check: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one dlagg run in a fresh process, its children's CPU included."""
    # The read cache off: with it, a run on a file found sound before skips the check (and the read).
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={path}", "--reports=all", "--formats=csv",
                    f"--output_path={out}", "--force=true", f"--check={check}", "--cache=false", "-v", "minimal"],
                   check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SHARED_SOURCE)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    source = source_database(args.source, args.workdir)
    path = args.workdir / f"{source.stem}_x{args.copies}.sqlite"
    if not path.exists():
        tile(source, path, args.copies)
    warm(path)
    size = path.stat().st_size / 2**20
    best = {case: (float("inf"), float("inf")) for case in CASES}
    check_alone = min(quick_check(path) for _ in range(args.repeat))
    for _ in range(args.repeat):
        for case, value in CASES.items():
            wall, cpu = run(path, args.workdir / "out_check", value)
            best[case] = (min(best[case][0], wall), min(best[case][1], cpu))
    on, off = best["--check=true"], best["--check=false"]
    print(f"export: {path.name}, {size:.0f} MB; {os.cpu_count()} CPUs")
    print(f"PRAGMA quick_check alone: {check_alone:.2f} s")
    for case, (wall, cpu) in best.items():
        print(f"dlagg {case}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"with the check / without: wall {on[0] / off[0]:.3f}x, CPU {on[1] / off[1]:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
