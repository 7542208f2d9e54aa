"""Dask benchmark: the ranks reduced on Dask workers as dlagg finds them against workers that preload
``dlagg.dask_preload`` (set up as dlagg's own processes: dlagg/ranks/tuning.py).

As found, under pandas 3 and Dask's defaults, a worker keeps the text pandas infers in Arrow, and its nanny fixes
glibc's heap thresholds (MALLOC_TRIM_THRESHOLD_=65536), which maps every array over 128 KB on its own. Two
``distributed.LocalCluster``s of 2 worker processes with one thread each, one of each kind, run
``dlagg --nsys_database=<16 rank files> --reports=all --scheduler=...`` in turns (the rank files of
bench_ranks.py). It prints, per kind, the median time a rank took to reduce on a worker (dlagg's log line
"reduced in ... s" of each rank, read at -v detailed) and the median time of the whole command, and the ratio
of the two kinds. The reports are the same bytes either way (tests/test_ranks.py); this measures the time only.

    python benchmarks/bench_dask.py [--workdir /tmp/dlagg-ranks] [--repeat 5] [--ranks 16]
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ranks import DEFAULT_WORKDIR, compile_dlagg, make_job  # noqa: E402

REDUCED = re.compile(r"rank \d+ \(.*\): .* reduced in ([\d.]+) s")


def run(folder: Path, scheduler: str, out: Path) -> tuple[float, list[float]]:
    """One timed dlagg run on the cluster at `scheduler`: the command's wall time, and each rank's reduce time."""
    began = time.perf_counter()
    # --cache=false: the cluster's workers would read the ranks from the cache an earlier run wrote
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={folder}", "--reports=all", "-f",
                           f"--scheduler={scheduler}", f"--output_path={out}", "-v", "detailed", "--cache=false"],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"dlagg failed on {folder}: {done.stderr}")
    ranks = [float(m.group(1)) for m in REDUCED.finditer(done.stderr)]
    return seconds, ranks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--repeat", type=int, default=5, help="rounds, each running both kinds (default 5)")
    parser.add_argument("--ranks", type=int, default=16)
    args = parser.parse_args()
    import distributed

    from dlagg.ranks.tuning import slow_setup

    logging.getLogger("distributed").setLevel(logging.ERROR)  # the clusters' closing lines

    compile_dlagg()
    folder = make_job(args.workdir, args.ranks)
    kinds = {"as found": [], "preloaded dlagg.dask_preload": ["dlagg.dask_preload"]}
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    ranks: dict[str, list[float]] = {kind: [] for kind in kinds}
    clusters = {kind: distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               dashboard_address=":0", preload=preload, silence_logs=logging.ERROR)
                for kind, preload in kinds.items()}
    try:
        found = {}
        for kind, cluster in clusters.items():
            with distributed.Client(cluster) as client:
                found[kind] = sorted(set(client.run(slow_setup).values()))
            print(f"{kind}: what slows a rank on its workers: {found[kind]}")
        if found["preloaded dlagg.dask_preload"] != [()] or found["as found"] == [()]:
            print("nothing to compare")
            return 0
        order = list(kinds)
        for round_ in range(args.repeat):
            for kind in order if round_ % 2 == 0 else order[::-1]:  # in turns, each kind first in every other round
                took, per_rank = run(folder, clusters[kind].scheduler_address, args.workdir / "out_dask")
                seconds[kind].append(took)
                ranks[kind].extend(per_rank)
                print(f"round {round_ + 1}: {kind}: {took:.2f} s, a rank {statistics.median(per_rank):.3f} s "
                      "(median)", flush=True)
    finally:
        for cluster in clusters.values():
            cluster.close()
    rank = {kind: statistics.median(values) for kind, values in ranks.items()}
    command = {kind: statistics.median(values) for kind, values in seconds.items()}
    for kind in order:
        print(f"{kind:>30}: a rank {rank[kind]:.3f} s (median of {len(ranks[kind])}), the command "
              f"{command[kind]:.2f} s (median of {len(seconds[kind])})")
    arrow, objects = order
    print(f"a rank on workers as found takes {rank[arrow] / rank[objects]:.2f}x its time on preloaded "
          f"workers; the command {command[arrow] / command[objects]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
