"""Memory a run needs, by export size: peak RSS and the smallest address-space limit it runs under.

For each export, ``python -m dlagg --reports=all --formats=csv,json`` runs in a subprocess:

- once without a limit: wall time and peak RSS (``wait4`` rusage of the child);
- then under ``RLIMIT_AS`` (what ``ulimit -v`` and ``prlimit --as`` set), bisecting between the
  peak RSS and 8x it for the smallest limit (to 8 MB) at which the run still succeeds; the limit
  found is then confirmed by REPEATS more runs (threads make the address space vary a little).

It prints one table row per export and the estimate ``dlagg/limits.py`` gives for the same size,
which must lie above the smallest limit found. Exports: the bundled recordings by default, plus
any given (``.sqlite`` or ``.sqlite.gz``, e.g. the shared ``transformer_amp_large``).

    python benchmarks/bench_memory.py [--export X.sqlite[.gz] ...] [--workdir /tmp/dlagg-mem]
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlagg.limits import needed  # noqa: E402

BUNDLED = ("cuda_basic", "resnet_amp")
STEP = 8 << 20  # bisection resolution
REPEATS = 2


def run(db: Path, out: Path, limit: int | None) -> tuple[bool, float, int]:
    """(succeeded, seconds, peak RSS bytes) of one run under `limit` bytes of address space."""
    def apply() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="cache-", dir=out.parent) as cache:  # a first look: the read, not the cache
        began = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "dlagg", f"--nsys_database={db}", "--reports=all",
                                  "--formats=csv,json", f"--output_path={out}", "-v", "quiet"], cwd=REPO,
                                 preexec_fn=apply, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 env={**os.environ, "DLAGG_CACHE_DIR": cache})
        _, status, usage = os.wait4(child.pid, 0)
        child.stderr.close()  # type: ignore[union-attr]
    return os.waitstatus_to_exitcode(status) == 0, time.perf_counter() - began, usage.ru_maxrss * 1024


def smallest_limit(db: Path, out: Path, rss: int) -> int:
    lo, hi = rss, 8 * rss + (512 << 20)
    while hi - lo > STEP:
        mid = (lo + hi) // 2
        if run(db, out, mid)[0]:
            hi = mid
        else:
            lo = mid
    while not all(run(db, out, hi)[0] for _ in range(REPEATS)):
        hi += STEP
    return hi


def prepared(path: Path, work: Path) -> Path:
    if path.suffix != ".gz":
        return path
    target = work / path.with_suffix("").name
    if not target.exists():
        with gzip.open(path, "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, action="append", default=[])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dlagg-mem")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    exports = [REPO / "fixtures" / "nsys-2022.4" / n / f"{n}.sqlite" for n in BUNDLED]
    exports += [prepared(p, args.workdir) for p in args.export]
    print("| export | size | wall | peak RSS | smallest address-space limit | limit / RSS | limits.needed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    mb = 2**20
    for db in exports:
        out = args.workdir / "out"
        ok, seconds, rss = run(db, out, None)
        if not ok:
            print(f"| {db.name} | run failed without a limit |")
            continue
        limit = smallest_limit(db, out, rss)
        size = db.stat().st_size
        estimate = needed(size)
        print(f"| {db.name} | {size / mb:,.1f} MB | {seconds:.1f} s | {rss / mb:,.0f} MB | {limit / mb:,.0f} MB | "
              f"{limit / rss:.1f} | {estimate / mb:,.0f} MB{'' if estimate >= limit else ' (too low)'} |", flush=True)


if __name__ == "__main__":
    main()
