"""Speed and memory benchmark for PyTorch profiler (Kineto) traces: ``dlagg --trace`` against Holistic Trace Analysis.

For a long Kineto trace (by default the bundled GPT-like DDP rank 0 trace, 10 steps, tiled 15 times in time by
``tile_trace.py`` into a 150-step trace of about 29 MB gzipped; or any trace given with ``--trace``) it prints, from
the same machine and run:

- dlagg: wall time of ``python -m dlagg --trace=FILE --reports=all --formats=csv --force=true`` in a subprocess
  (interpreter start-up and imports included), best of ``--repeat`` runs; the peak RSS (``wait4`` rusage of the
  child) is the highest of those runs.
- HTA (with ``--hta-python``, a Python that has HolisticTraceAnalysis installed): wall time and peak RSS, measured
  the same way, of a subprocess that constructs ``TraceAnalysis(trace_dir=DIR)`` on a folder holding only that
  trace (HTA reads every trace of a folder). Its version and the time spent inside the constructor are printed too.
  Without ``--hta-python`` the figures quoted for HTA 0.5.0 on a 25 MB-gzip trace on a 2-core machine
  (QUOTED_HTA_S, QUOTED_HTA_RSS) stand in as the reference, and are printed as quoted, not measured.
- the goals: dlagg at least SPEEDUP_GOAL times faster than HTA, with at most MEMORY_GOAL of HTA's peak RSS, each
  said PASS or FAIL. Results are printed, never asserted (``--strict`` exits 1 if a goal fails).

Peak RSS is that of the largest process of each child's tree (what ``ru_maxrss`` of a waited child tells), not a
sum over worker processes. The trace is read once before the runs, so both tools are measured with a warm page
cache. The dlagg child may write bytecode: ``PYTHONDONTWRITEBYTECODE`` would otherwise make every run compile
dlagg's modules again.

    python benchmarks/bench_kineto.py [--trace X.pt.trace.json.gz | --source X --copies 15] [--repeat 3]
        [--hta-python /path/to/hta-venv/bin/python] [--workdir /tmp/dlagg-kineto-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from tile_trace import tile  # noqa: E402

SHARED_SOURCE = REPO / "fixtures" / "kineto" / "ddp2" / "rank0.1795836054557423750.pt.trace.json.gz"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "dlagg-kineto-bench"
DEFAULT_COPIES = 15  # 10 recorded steps -> a 150-step trace, the size the HTA figures were quoted for
REPEATS = 3
READ_CHUNK = 16 << 20  # bytes per read when warming the page cache

# The goals, against HTA's TraceAnalysis construction on the same trace.
SPEEDUP_GOAL = 10.0  # dlagg's wall time at most a tenth of HTA's
MEMORY_GOAL = 1 / 3  # dlagg's peak RSS at most a third of HTA's
# HTA 0.5.0 as quoted (not measured here): TraceAnalysis on a 25 MB-gzip trace, 2-core machine.
QUOTED_HTA_S = 54.5
QUOTED_HTA_RSS = 2.26e9  # bytes
QUOTED_HTA_NOTE = "HTA 0.5.0 as quoted (not measured): 25 MB-gzip trace, 2-core machine"

# Run by the HTA interpreter: construct TraceAnalysis on a folder, report on the last line of stdout.
HTA_SNIPPET = """\
import json, sys, time
from importlib.metadata import version
began = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
done = time.perf_counter()
print(json.dumps({"version": version("HolisticTraceAnalysis"), "import_s": imported - began,
                  "construct_s": done - imported}))
"""


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float  # user + system CPU time of the child and the children it waited for
    peak_rss: int  # bytes
    stdout: str


@dataclass(frozen=True)
class Measure:
    label: str
    wall_s: float  # best of the runs
    cpu_s: float  # of the fastest run
    peak_rss: int  # highest of the runs
    runs: int
    note: str = ""


def warm(path: Path) -> None:
    with path.open("rb") as handle:
        while handle.read(READ_CHUNK):
            pass


def run_child(command: list[str], what: str, env: dict[str, str] | None = None) -> Run:
    """Wall time, CPU time and peak RSS of one subprocess (``wait4`` on exactly that child)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, cwd=REPO, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode != 0:
        tail = "\n".join(stderr.splitlines()[-20:])
        raise SystemExit(f"bench: {what} failed (exit {child.returncode}): {' '.join(command)}\n{tail}")
    return Run(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, stdout)  # Linux: KiB


def measure(label: str, runs: list[Run], note: str = "") -> Measure:
    fastest = min(runs, key=lambda r: r.wall_s)
    return Measure(label, fastest.wall_s, fastest.cpu_s, max(r.peak_rss for r in runs), len(runs), note)


def measure_dlagg(trace: Path, workdir: Path, repeat: int, flag: str) -> Measure:
    out = workdir / "dlagg_out"
    command = [sys.executable, "-m", "dlagg", f"{flag}={trace}", "--reports=all", "--formats=csv",
               f"--output_path={out}", "--force=true"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for index in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="cache-", dir=workdir) as cache:  # every run a first look
            runs.append(run_child(command, "dlagg", {**env, "DLAGG_CACHE_DIR": cache}))
        print(f"bench: dlagg run {index + 1}: {runs[-1].wall_s:.2f} s, {runs[-1].peak_rss / 1e6:,.0f} MB", flush=True)
    return measure("dlagg", runs)


def hta_folder(trace: Path, workdir: Path) -> Path:
    """A folder holding only ``trace`` (a hard link, or a copy across file systems)."""
    folder = workdir / "hta_trace"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        os.link(trace, folder / trace.name)
    except OSError:
        shutil.copyfile(trace, folder / trace.name)
    return folder


def measure_hta(python: str, trace: Path, workdir: Path, repeat: int) -> Measure:
    folder = hta_folder(trace, workdir)
    runs, reports = [], []
    for index in range(repeat):
        runs.append(run_child([python, "-c", HTA_SNIPPET, str(folder)], "HTA"))
        reports.append(json.loads(runs[-1].stdout.strip().splitlines()[-1]))
        print(f"bench: HTA run {index + 1}: {runs[-1].wall_s:.2f} s (TraceAnalysis {reports[-1]['construct_s']:.2f} s),"
              f" {runs[-1].peak_rss / 1e6:,.0f} MB", flush=True)
    fastest = min(range(repeat), key=lambda i: runs[i].wall_s)
    report = reports[fastest]
    note = (f"HTA {report['version']} measured: TraceAnalysis(trace_dir=...) {report['construct_s']:.2f} s "
            f"of {runs[fastest].wall_s:.2f} s (imports {report['import_s']:.2f} s)")
    return measure(f"HTA {report['version']}", runs, note)


def report(trace: Path, dlagg: Measure | None, hta: Measure, load: float) -> list[str]:
    """Print the table and the goals; return the goals that do not hold."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print()
    print(f"trace {trace} ({trace.stat().st_size / 1e6:,.1f} MB), {cpus} CPUs here (load average {load:.1f} "
          "before the runs), warm page cache, wall time includes interpreter start-up")
    print(f"{'':<12}{'wall s':>9}{'cpu s':>9}{'peak RSS MB':>13}{'runs':>8}")
    for m in (dlagg, hta):
        if m is not None:
            cpu = f"{m.cpu_s:>9.2f}" if m.runs else f"{'-':>9}"
            print(f"{m.label:<12}{m.wall_s:>9.2f}{cpu}{m.peak_rss / 1e6:>13,.0f}{m.runs or 'quoted':>8}")
    print(hta.note)
    if dlagg is None:
        return []
    speedup = hta.wall_s / dlagg.wall_s
    memory = dlagg.peak_rss / hta.peak_rss
    failed = []
    fast = speedup >= SPEEDUP_GOAL
    small = memory <= MEMORY_GOAL
    verdict = {True: "PASS", False: "FAIL"}
    print(f"speed-up  {speedup:>7.1f}x  HTA wall / dlagg wall (goal >= {SPEEDUP_GOAL:.0f}x)    {verdict[fast]}")
    print(f"memory    {memory:>7.3f}   dlagg RSS / HTA RSS   (goal <= {MEMORY_GOAL:.3f}) {verdict[small]}")
    if hta.runs and dlagg.cpu_s > 0:
        ratio = hta.cpu_s / dlagg.cpu_s
        print(f"cpu       {ratio:>7.1f}x  HTA cpu / dlagg cpu   (no goal; steadier than wall on a busy machine)")
    if not fast:
        failed.append(f"speed-up {speedup:.1f}x < {SPEEDUP_GOAL:.0f}x")
    if not small:
        failed.append(f"memory {memory:.3f} of HTA's > {MEMORY_GOAL:.3f}")
    if not hta.runs:
        print("(against quoted HTA figures from another machine: measure HTA here with --hta-python for a fair ratio)")
    print("goals: " + ("all hold" if not failed else "FAIL: " + "; ".join(failed)))
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=None,
                        help="the trace to measure (default: tile --source --copies times into the workdir)")
    parser.add_argument("--source", type=Path, default=SHARED_SOURCE,
                        help="the 1x Kineto trace to tile (default: the shared ddp2 rank 0 trace)")
    parser.add_argument("--copies", type=int, default=DEFAULT_COPIES,
                        help=f"how many times to tile the source (default {DEFAULT_COPIES})")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                        help=f"where the tiled trace, HTA's folder and dlagg's outputs go (default {DEFAULT_WORKDIR})")
    parser.add_argument("--repeat", type=int, default=REPEATS,
                        help=f"runs per tool, the fastest counts, the highest RSS counts (default {REPEATS})")
    parser.add_argument("--hta-python", default=None, metavar="PYTHON",
                        help="a Python with HolisticTraceAnalysis installed: measure HTA here (default: quote it)")
    parser.add_argument("--skip-dlagg", action="store_true", help="measure HTA only (no ratios)")
    parser.add_argument("--dlagg-flag", default="--trace",
                        help="the dlagg option that takes the file (default --trace; e.g. --nsys_database with "
                             "--trace X.sqlite --skip-hta checks this harness on an nsys export)")
    parser.add_argument("--skip-hta", action="store_true", help="do not run HTA even when --hta-python is given")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal does not hold")
    args = parser.parse_args(argv)
    repeat = max(1, args.repeat)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.trace is not None:
        if not args.trace.is_file():
            print(f"bench: {args.trace}: no such file", file=sys.stderr)
            return 2
        trace = args.trace.resolve()
    else:
        if not args.source.is_file():
            print(f"bench: skipped: {args.source} not found (the shared fixtures live in ../shared next to the repo; "
                  "pass --source or --trace)")
            return 0
        trace = args.workdir / f"{args.source.name.split('.')[0]}_x{args.copies}.pt.trace.json.gz"
        if not trace.exists():
            print(f"bench: building the {args.copies}x tiled trace {trace}", flush=True)
            stats = tile(args.source, trace, args.copies, log=lambda _: None)
            first, last = stats.steps
            print(f"bench: {stats.events:,} events, steps #{first}..#{last}, {trace.stat().st_size / 1e6:,.1f} MB",
                  flush=True)
    warm(trace)
    load = os.getloadavg()[0]  # another job on the machine shows here: the wall times are then not comparable
    dlagg = None if args.skip_dlagg else measure_dlagg(trace, args.workdir, repeat, args.dlagg_flag)
    if args.hta_python and not args.skip_hta:
        hta = measure_hta(args.hta_python, trace, args.workdir, repeat)
    else:
        hta = Measure("HTA (quoted)", QUOTED_HTA_S, 0.0, int(QUOTED_HTA_RSS), 0, QUOTED_HTA_NOTE)
    failed = report(trace, dlagg, hta, load)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
