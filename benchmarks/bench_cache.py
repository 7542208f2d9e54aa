"""The read cache's benchmark: a second run on the same large export, with other iteration bounds, against the first.

On an export tiled from the bundled GPT-like recording (``ddp2_gpt_per_rank`` rank 0, 11 MB; ``--copies 50``
gives 538 MB, the default ``--copies 10`` 107 MB), it runs ``python -m dlagg`` in fresh processes:

1. first run, cold cache: every iteration (the reader's model is written to a new cache folder);
2. second run: other ``--iter_start``/``--iter_stop``, which reads the model back from the cache;
3. the same run as 2 with ``--cache=false``, for scale.

It prints each run's wall time (the best of ``--repeat``, each with a cold cache first) and peak RSS (``wait4``),
and the second run's time as a share of the first (goal: at most MAX_SHARE), and checks that the second run's CSV
and JSON outputs are the same bytes as the uncached run's. The package is run from a copy taken at the start
(`_snapshot`), and the page cache is warmed (the file read once) first. Timings are printed, never asserted
(``--strict`` exits 1 when the goal or the byte check fails).

    python benchmarks/bench_cache.py [--copies 10] [--repeat 3] [--workdir DIR] [--reports summary,expert_systems]
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from tile_export import tile  # noqa: E402

SOURCE = REPO / "fixtures" / "nsys-2022.4-multi" / "ddp2_gpt_per_rank" / "ddp2_gpt_per_rank_rank0.sqlite.gz"
MAX_SHARE = 0.30  # the second run's wall time at most this share of the first's
ITERATIONS = re.compile(r": (\d+) iterations, aggregating")


def _source(workdir: Path, copies: int) -> Path:
    """The tiled export (made once per size in `workdir`)."""
    plain = workdir / "source.sqlite"
    if not plain.exists():
        with gzip.open(SOURCE, "rb") as packed, plain.open("wb") as out:
            shutil.copyfileobj(packed, out)
    target = workdir / f"tiled_x{copies}.sqlite"
    if not target.exists():
        tile(plain, target, copies)
    return target


def _warm(path: Path) -> None:
    with path.open("rb") as handle:
        while handle.read(16 << 20):
            pass


def _snapshot(workdir: Path) -> Path:
    """A copy of the package that the runs import: an entry's key holds a digest of the reader's source, so an edit
    to the working tree between the runs would be a miss, not a second look. Its bytecode is compiled by a run on the
    smallest fixture first, so that the first measured run does not pay for it."""
    code = workdir / "code"
    shutil.rmtree(code, ignore_errors=True)
    shutil.copytree(REPO / "dlagg", code / "dlagg", ignore=shutil.ignore_patterns("__pycache__"))
    smallest = REPO / "fixtures" / "nsys-2022.4" / "cuda_basic" / "cuda_basic.sqlite"
    _run([f"--nsys_database={smallest}", "--reports=all", "--formats=csv,json", "--force=true", "--cache=false",
          f"--output_path={workdir / 'warm_up'}"], code)
    return code


def _run(words: list[str], code: Path) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stderr) of ``python -m dlagg words``, with the package at `code`."""
    began = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # the warm-up's bytecode is kept
    child = subprocess.Popen([sys.executable, "-m", "dlagg", *words], cwd=code, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=env)
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"dlagg failed ({child.returncode}): {err[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, err


def _outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.suffix in (".csv", ".json")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=10, help="size of the tiled export (default 10)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dlagg-bench-cache")
    parser.add_argument("--reports", default="summary,expert_systems")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind; the best is shown (default 3)")
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    export = _source(args.workdir, args.copies)
    _warm(export)
    cache = args.workdir / "cache"
    base = [f"--nsys_database={export}", f"--reports={args.reports}", "--formats=csv,json", "--force=true",
            f"--cache_dir={cache}"]
    code = _snapshot(args.workdir)
    firsts, second_runs, uncached_runs = [], [], []
    bounds: list[str] = []
    for _ in range(args.repeat):  # the best of each, as bench_dlagg.py does: a shared machine is noisy
        shutil.rmtree(cache, ignore_errors=True)  # a cold cache for the first run
        firsts.append(_run([*base, f"--output_path={args.workdir / 'first'}"], code))
        found = ITERATIONS.search(firsts[-1][2])
        count = int(found.group(1)) if found else 4
        bounds = [f"--iter_start={count // 4}", f"--iter_stop={max(count // 4, count // 2)}"]
        second_runs.append(_run([*base, *bounds, f"--output_path={args.workdir / 'second'}"], code))
        uncached_runs.append(_run([*base, *bounds, "--cache=false", f"--output_path={args.workdir / 'uncached'}"],
                                  code))
    first, second, uncached = (min(runs, key=lambda r: r[0]) for runs in (firsts, second_runs, uncached_runs))
    same = _outputs(args.workdir / "second") == _outputs(args.workdir / "uncached")
    share = second[0] / first[0]
    size = export.stat().st_size / 2**20
    print(f"export: {export.name}, {size:,.0f} MB, {count} iterations; reports {args.reports}, csv+json")
    print(f"{'run':<44} {'wall s':>7} {'peak MB':>8}")
    for name, (seconds, peak, _) in (("first (cold cache, all iterations)", first),
                                     (f"second (cached, {' '.join(bounds)})", second),
                                     ("the same with --cache=false", uncached)):
        print(f"{name:<44} {seconds:>7.2f} {peak:>8,.0f}")
    print(f"second / first: {share:.2f} (goal at most {MAX_SHARE:.2f}); second / uncached: "
          f"{second[0] / uncached[0]:.2f}; outputs the same bytes as uncached: {same}")
    print(f"cache entry: {sum(p.stat().st_size for p in cache.rglob('*') if p.is_file()) / 2**20:,.0f} MB")
    return 1 if args.strict and (share > MAX_SHARE or not same) else 0


if __name__ == "__main__":
    sys.exit(main())
