"""Many-ranks benchmark: ``dlagg --reports=all`` on 1, 16 and 64 rank files, with 1 and 2 workers.

The rank files are copies of the 2-GPU per-rank recording (``nsys-2022.4-multi/ddp2_gpt_per_rank``,
10.9 MB each): copy k of rank r becomes rank 2k + r, with its device id, process and thread ids
shifted so every rank is a process of its own on a GPU of its own, and its session start shifted by a
few milliseconds (so clock alignment has work to do). The copies keep each rank's events, so every
rank has the 60 collectives of the original and they match across ranks.

dlagg runs as installed (``pip install .``: its bytecode compiled once, not at every start). It prints,
from one run: the wall time of ``python -m dlagg --reports=all`` (a subprocess, start-up and imports
included: until the command exits, as a shell waits for it; dlagg's default outputs, the CSV reports and
TensorBoard event files, unless ``--formats`` or ``--no-tensorboard`` say otherwise) on 1 rank; 16 ranks
with 1 worker (in process) and with 2 workers (this process and a pool of one worker process; the
machine has two cores); 64 ranks with 2 workers; the peak RSS of the parent (``ru_maxrss`` of the dlagg
process, from wait4) and of the largest worker process (what the worker processes report at -v
detailed for the ranks they reduced), and the time after the last rank is reduced (the merge and the
writes: from that log line, read as it comes, to the exit). Then the bars of the ranks issue: 2 workers
at least MIN_SPEEDUP times faster than 1, time linear in the number of ranks, parent peak under
MAX_PARENT_MB at 64 ranks. Timing results are printed, never asserted (``--strict`` exits 1 if a bar
fails). ``--large N`` then runs N ranks with 2 workers once (256: 2.8 GB of rank files, about 80 s). ``--big FILE``
runs instead 16 ranks made of copies of FILE, a one-process export, with 1 worker and with 2: the speed-up where a
rank's work, not the start-up, is most of the run.

Every timed run starts with its files in the page cache: its rank files, and the modules and libraries a dlagg
run loads (listed once by a Python that imports them), are read just before it. Some virtual machines page out what
has not been touched for a while (this one runs a DAMON pageout scheme: about a minute untouched, and its page cache
is also dropped now and then): a run would then wait for the disk, by chance, for up to a second, which says nothing
about dlagg.
What each run still waited for the disk is printed (Linux's pressure stall information, /proc/pressure/io: the time
some task of the machine was stalled on I/O during the run).

With 1 worker the command's CPU time over its wall time says how many cores it keeps busy: more than one,
as the reader runs a rank's table reads on threads at once; 2 workers are then at most the machine's ceiling
(below) over that many times as fast.

The cases run in rounds (each round runs the four, one after the other), and a ratio is taken within a
round, then the median over rounds: on a shared machine the speed drifts over minutes (the same case may
take half as long again a few minutes later), so a ratio of times measured minutes apart
would say more about the neighbours than about dlagg. The time printed per case is its fastest run.

Each round also measures what the machine itself gives two processes: the same pure-Python loop (no
I/O, no memory traffic, nothing shared) run twice one after the other, then twice at once, three times
over, interleaved. The ratio
is the machine's ceiling for any 2-worker speed-up in that round: a virtual machine's two cores may be
one physical core's two hardware threads, or share a host with busy neighbours, and then no program
gets 2x. dlagg's speed-up is printed with its share of that ceiling. A CPU loop shares nothing but the
cores, though, and dlagg's work (pandas, many small operations) slows down more when another process
runs beside it. So each round also runs dlagg's own work both ways: the 16 ranks' two halves (8 rank
files each, linked into two folders), each by a 1-worker dlagg, one after the other, then both at once.
That ratio is the ceiling for the 2-worker run, which does the same work in two processes. The halves at once pay
the start-up twice, in parallel, where the 1-worker run pays it once, so their time is printed too, with the 2-worker
run's time over it: about 1 when dlagg's two processes lose nothing to sharing one job (the queue, the merge).

Neither ceiling counts the start-up, which every run pays before its first rank and a second process does not
shorten: the interpreter's start and dlagg's imports. Each round times it (the fastest of three starts that import
what ``python -m dlagg`` imports and exit) and prints the most 2 workers can then gain (Amdahl's law): the
1-worker run's time over the start-up plus the CPU time that run spent after its start-up, shared by two processes
at the CPU loop's ceiling. The faster the machine reduces a rank, the larger the start-up's share, and the lower
this bound.

    python benchmarks/bench_ranks.py [--workdir /tmp/dlagg-ranks] [--repeat 3] [--large 256] [--big FILE]
                                     [--formats csv,json] [--no-tensorboard]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDING = Path("nsys-2022.4-multi") / "ddp2_gpt_per_rank"
SOURCES = [REPO.parent / "shared" / "fixtures" / RECORDING / f"ddp2_gpt_per_rank_rank{r}.sqlite" for r in (0, 1)]
BUNDLED = [REPO / "fixtures" / RECORDING / f"ddp2_gpt_per_rank_rank{r}.sqlite.gz" for r in (0, 1)]
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "dlagg-ranks"

MIN_SPEEDUP = 1.7  # 2 workers against 1, 16 ranks
MAX_PARENT_MB = 1024  # parent peak RSS at 64 ranks
LINEAR_SLACK = 1.2  # the 64/16 time ratio may exceed 4 by this factor
PID_SHIFT = 24

LAST_RANK = re.compile(r"reduced in [\d.]+ s \((\d+)/\1\)")  # "... reduced in 0.41 s (16/16)"
WORKER_PEAK = re.compile(r"peak memory of the process that reduced it \(a worker process\) ([\d,]+) MB")


def unpacked(path: Path, workdir: Path) -> Path:
    """`path`, or its unpacked copy in `workdir` when it is gzipped (made once)."""
    if path.suffix != ".gz":
        return path
    import gzip

    target = workdir / path.name[:-3]
    if not target.exists():
        with gzip.open(path, "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


def source_files(workdir: Path) -> list[Path]:
    if all(p.exists() for p in SOURCES):
        return SOURCES
    return [unpacked(packed, workdir) for packed in BUNDLED]


def make_rank(source: Path, target: Path, rank: int) -> None:
    """A copy of `source` as rank `rank`: device `rank`, its own process, a shifted session start."""
    shutil.copy(source, target)
    conn = sqlite3.connect(target)
    (old_pid,) = conn.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    new_pid = old_pid + ((1000 + rank) << PID_SHIFT)
    shift = new_pid - old_pid
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        conn.execute(f"UPDATE {table} SET globalPid = globalPid + ?, deviceId = ?", (shift, rank))
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        conn.execute(f"UPDATE {table} SET globalTid = globalTid + ? WHERE globalTid >= ? AND globalTid < ?",
                     (shift, old_pid, old_pid + (1 << PID_SHIFT)))
    conn.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (1_000_000 * rank,))
    conn.commit()
    conn.close()


def make_job(workdir: Path, ranks: int, sources: list[Path] | None = None, name: str = "ranks") -> Path:
    """`ranks` rank files in `workdir`/<name><ranks>: copies of `sources` in turn (default: the per-rank recording's
    two files), made once."""
    folder = workdir / f"{name}{ranks}"
    if folder.exists() and len(list(folder.glob("*.sqlite"))) == ranks:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sources = sources or source_files(workdir)
    for rank in range(ranks):  # a benchmark's setup: one copy per rank
        make_rank(sources[rank % len(sources)], folder / f"rank{rank:03d}.sqlite", rank)
    return folder


def compile_dlagg() -> None:
    """Bytecode for the dlagg the runs import, as ``pip install .`` writes it. An editable install under
    PYTHONDONTWRITEBYTECODE (set in some sandboxes and CI images) has none, and every run would compile dlagg's
    80 modules again at start (about 0.2 s that no installed copy pays)."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("dlagg")
    for folder in spec.submodule_search_locations if spec and spec.submodule_search_locations else ():
        compileall.compile_dir(folder, quiet=1)


OUTPUTS: list[str] = []  # dlagg's own default (CSV and TensorBoard event files); main() may set others
LOADED: list[Path] = []  # the modules and libraries a dlagg run loads (main() lists them)
PRESSURE = Path("/proc/pressure/io")

LIST_LOADED = """import os, sys
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
import concurrent.futures.process, multiprocessing.forkserver, dlagg.cli, dlagg._forkserver
files = {getattr(m, a, None) for m in list(sys.modules.values()) for a in ("__file__", "__cached__")}
if os.path.exists("/proc/self/maps"):  # Linux: the shared libraries mapped
    files |= {line.split()[-1] for line in open("/proc/self/maps") if line.rstrip().endswith(".so") or ".so." in line}
print("\\n".join(sorted(f for f in files if f and os.path.isfile(f))))"""


def loaded_files() -> list[Path]:
    """The files a dlagg run reads as it starts: the modules it imports (source and bytecode) and the shared libraries
    they load, as a Python that imports them lists them."""
    listed = subprocess.run([sys.executable, "-c", LIST_LOADED], capture_output=True, text=True, check=True)
    return [Path(line) for line in listed.stdout.splitlines()]


def warm(paths: list[Path]) -> None:
    """Read `paths` whole, so that a timed run finds them in the page cache."""
    for path in paths:
        with path.open("rb") as handle:
            while handle.read(1 << 20):
                pass


def io_stalled_us() -> int:
    """Microseconds that some task of the machine has been stalled on I/O since boot (0 without PSI)."""
    try:
        some = next(line for line in PRESSURE.read_text().splitlines() if line.startswith("some"))
    except (OSError, StopIteration):
        return 0
    return int(some.rsplit("total=", 1)[1])


def run_files(*folders: Path) -> list[Path]:
    """What runs on `folders` read: their rank files, and the modules and libraries dlagg loads."""
    return [*(path for folder in folders for path in sorted(folder.glob("*.sqlite"))), *LOADED]


def run(folder: Path, workers: int, out: Path, warmed: bool = False) -> dict:
    """One timed dlagg run; its files are read first unless the caller has (`warmed`)."""
    shutil.rmtree(out, ignore_errors=True)
    if not warmed:
        warm(run_files(folder))
    stalled = io_stalled_us()
    args = [f"--nsys_database={folder}", "--reports=all", *OUTPUTS, "-f", f"--workers={workers}",
            f"--output_path={out}", "-v", "detailed"]
    lines: list[tuple[float, str]] = []  # stderr, each line with when it came (read as it comes, by a thread)
    cache = tempfile.mkdtemp(prefix="cache-", dir=out.parent)  # an empty read cache: every run a first look
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "dlagg", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "DLAGG_CACHE_DIR": cache})
    reader = threading.Thread(target=lambda: lines.extend((time.perf_counter(), line) for line in child.stderr))
    reader.start()
    _, status, usage = os.wait4(child.pid, 0)  # and the command's own peak RSS (KiB on Linux)
    ended = time.perf_counter()
    reader.join()
    shutil.rmtree(cache, ignore_errors=True)
    stderr = "".join(line for _, line in lines)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"dlagg failed on {folder}: {stderr}")
    # the command's own CPU time (with 2 workers not its pool's, whose processes are the fork server's children)
    figures = {"seconds": ended - began, "parent_kb": usage.ru_maxrss, "cpu": usage.ru_utime + usage.ru_stime,
               "io_stall": (io_stalled_us() - stalled) / 1e6}
    # after the ranks: from the log line of the last rank reduced to the exit (the merge, the writes)
    reduced = [at for at, line in lines if LAST_RANK.search(line)]
    figures["after_ranks"] = ended - reduced[-1] if reduced else 0.0
    # a worker process's peak: what the pool's workers report for the ranks they reduced (none in process)
    peaks = [float(m.group(1).replace(",", "")) for m in WORKER_PEAK.finditer(stderr)]
    figures["worker_mb"] = max(peaks) if workers > 1 and peaks else 0.0
    return figures


CEILING_LOOP = "def f():\n    s = 0\n    for i in range(20_000_000): s += i\nf()"  # most of a second of one core


def ceiling(pairs: int = 3) -> float:
    """The machine's 2-process speed-up now: one CPU loop run twice one after the other, over twice at
    once; `pairs` of the two, interleaved, so that a slow second hits both alike."""
    def loop() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", CEILING_LOOP])

    serial = together = 0.0
    for _ in range(pairs):
        began = time.perf_counter()
        for _ in range(2):
            loop().wait()
        serial += time.perf_counter() - began
        began = time.perf_counter()
        for child in [loop(), loop()]:
            child.wait()
        together += time.perf_counter() - began
    return serial / together


START_UP = "import dlagg.__main__, dlagg.cli, os; os._exit(0)"  # what `python -m dlagg` loads, then its exit


def start_up(times: int = 3) -> tuple[float, float]:
    """What every dlagg run pays before its first rank, however many workers it has: the interpreter's start,
    dlagg.__main__'s process settings and dlagg's imports, then an exit as dlagg's (``os._exit``). The fastest of
    `times` runs: its wall seconds and CPU seconds (one thread: about the same)."""
    best = (float("inf"), float("inf"))
    for _ in range(times):
        began = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", START_UP])
        _, status, usage = os.wait4(child.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit("importing dlagg failed")
        best = min(best, (time.perf_counter() - began, usage.ru_utime + usage.ru_stime))
    return best


def amdahl(one_worker: dict, start: tuple[float, float], machine: float) -> float:
    """The most a 2-worker run can gain over `one_worker` (a 1-worker run's figures) on a machine that runs two
    CPU-bound processes at once `machine` times as fast as one after the other: its own start-up (`start`: the
    imports, which no second process shortens) and then, at best, the CPU time the 1-worker run spent after its
    start-up, shared evenly by two processes that each run at `machine` / 2 of one alone. That work is the same
    ranks, merge and writes; a 2-worker run adds to it (a second start-up, sending figures, lanes that end apart,
    a cache shared) and reads a rank on one thread instead of two (each with a share of the cores,
    `reader.read_threads`), which spares the threads' own overhead: a few per cent of the run's CPU
    (docs/benchmarks.md)."""
    wall, cpu = start
    return one_worker["seconds"] / (wall + max(0.0, one_worker["cpu"] - cpu) / machine)


def halves(workdir: Path, folder: Path) -> list[Path]:
    """The 16-rank job's files in two folders of 8 (links to the same files), for `own_ceiling`."""
    files = sorted(folder.glob("*.sqlite"))
    half = len(files) // 2
    out = []
    for k, part in enumerate((files[:half], files[half:])):
        target = workdir / f"{folder.name}_half{k}"
        if not (target.exists() and len(list(target.glob("*.sqlite"))) == len(part)):
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for path in part:  # 8 links
                (target / path.name).symlink_to(path.resolve())
        out.append(target)
    return out


def own_ceiling(parts: list[Path], workdir: Path) -> tuple[float, float]:
    """What the machine gives two dlagg processes doing this job's own work: the two halves of the 16 ranks, each
    reduced by a 1-worker dlagg (in process), one after the other, over both at once; and the seconds both at once
    took. The 2-worker run does the same work (the same ranks, a merge, the writes) in two processes, so it can be
    about this much faster than 1 worker, not more; the CPU loop of `ceiling` shares nothing but the cores, dlagg's
    work shares the caches too. The halves at once pay the start-up twice, in parallel, where the 1-worker run pays
    it once: their time, not the ratio, is what the 2-worker run can be held to."""
    outs = [workdir / f"out_half{k}" for k in range(len(parts))]
    warm(run_files(*parts))  # before each way, not inside it (twice at once, it would run beside a timed run)
    began = time.perf_counter()
    for part, out in zip(parts, outs, strict=True):
        run(part, 1, out, warmed=True)
    serial = time.perf_counter() - began
    warm(run_files(*parts))
    began = time.perf_counter()
    both = [threading.Thread(target=run, args=(part, 1, out, True)) for part, out in zip(parts, outs, strict=True)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    together = time.perf_counter() - began
    return serial / together, together


BIG_RANKS = 16


def big_ranks(source: Path, workdir: Path, repeat: int) -> None:
    """16 ranks made of copies of `source` (a one-process export: one rank), 1 worker against 2 in `repeat` rounds
    (each round with the CPU loop's ceiling and the start-up's bound): the speed-up where a rank's work, not the
    start-up, is most of the run."""
    folder = make_job(workdir, BIG_RANKS, [unpacked(source, workdir)], name=f"big_{source.name.split('.')[0]}_")
    size = sum(p.stat().st_size for p in folder.glob("*.sqlite")) / 1e6
    print(f"{BIG_RANKS} ranks of {source.name} ({size / BIG_RANKS:.0f} MB a rank):", flush=True)
    ratios, bounds = [], []
    for number in range(1, repeat + 1):
        one, two = run(folder, 1, workdir / "out"), run(folder, 2, workdir / "out")
        machine = ceiling()
        ratios.append(one["seconds"] / two["seconds"])
        bounds.append(amdahl(one, start_up(), machine))
        print(f"round {number}: 1 worker {one['seconds']:.2f} s, 2 workers {two['seconds']:.2f} s, 2 workers vs 1 "
              f"{ratios[-1]:.2f}x; the machine's ceiling {machine:.2f}x (a CPU loop), {bounds[-1]:.2f}x with the "
              f"start-up; worker peak {two['worker_mb']:.0f} MB", flush=True)
    print(f"{BIG_RANKS} ranks of {source.name}: 2 workers vs 1 {statistics.median(ratios):.2f}x, the median over "
          f"rounds (the start-up's bound {statistics.median(bounds):.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the four cases (default 3)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a bar fails")
    parser.add_argument("--large", type=int, default=0, metavar="N",
                        help="then N ranks with 2 workers, once (no bar; 11 MB of rank files per rank)")
    parser.add_argument("--big", type=Path, metavar="FILE",
                        help="instead of the four cases: 16 ranks made of copies of FILE (a one-process nsys export, "
                             ".sqlite or .sqlite.gz), 1 worker against 2 in --repeat rounds (no bar)")
    parser.add_argument("--formats", default="", help="dlagg's --formats (default: dlagg's own, CSV and TensorBoard)")
    parser.add_argument("--no-tensorboard", action="store_true",
                        help="no TensorBoard event files (dlagg -b); runs 1-21 of docs/benchmarks.md: "
                             "--formats=csv,json --no-tensorboard")
    args = parser.parse_args()
    OUTPUTS[:] = [*([f"--formats={args.formats}"] if args.formats else []), *(["-b"] if args.no_tensorboard else [])]
    print(f"dlagg --reports=all {' '.join(OUTPUTS)}".rstrip(), flush=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    compile_dlagg()
    LOADED[:] = loaded_files()
    if args.big:
        big_ranks(args.big, args.workdir, args.repeat)
        return 0
    cases = [(1, 1), (16, 1), (16, 2), (64, 2)]
    folders = {ranks: make_job(args.workdir, ranks) for ranks in (1, 16, 64)}
    parts = halves(args.workdir, folders[16])
    rounds, ceilings, owns, at_once, bounds = [], [], [], [], []  # per round: the four cases' figures; the ceilings
    for number in range(1, args.repeat + 1):  # rounds of the four cases, one after the other
        done = {(r, w): run(folders[r], w, args.workdir / "out") for r, w in cases}
        ceilings.append(ceiling())
        own, together = own_ceiling(parts, args.workdir)
        owns.append(own)
        at_once.append(done[16, 2]["seconds"] / together)
        start = start_up()
        bounds.append(amdahl(done[16, 1], start, ceilings[-1]))
        rounds.append(done)
        print(f"round {number}: " + ", ".join(f"{r} rank{'s' if r > 1 else ''}/{w} worker{'s' if w > 1 else ''} "
                                               f"{f['seconds']:.2f} s" for (r, w), f in done.items())
              + f", 2 workers vs 1 {done[16, 1]['seconds'] / done[16, 2]['seconds']:.2f}x; the machine's ceiling "
              f"{ceilings[-1]:.2f}x (a CPU loop), {owns[-1]:.2f}x (dlagg's work: its two halves at once took "
              f"{together:.2f} s), {bounds[-1]:.2f}x with its start-up ({start[0]:.2f} s); waited for the disk "
              f"{max(f['io_stall'] for f in done.values()):.2f} s at most", flush=True)
    for ranks, workers in cases:
        best = min((done[ranks, workers] for done in rounds), key=lambda f: f["seconds"])
        print(f"{ranks:>3} ranks, {workers} worker{'s' if workers > 1 else ' '}: {best['seconds']:7.2f} s (fastest)   "
              f"after the last rank {best['after_ranks']:5.2f} s   parent peak {best['parent_kb'] / 1024:7.0f} MB   "
              "worker peak " + (f"{best['worker_mb']:6.0f} MB" if best["worker_mb"] else "  (in process)"))
    speedup = statistics.median(d[16, 1]["seconds"] / d[16, 2]["seconds"] for d in rounds)
    growth = statistics.median(d[64, 2]["seconds"] / d[16, 2]["seconds"] for d in rounds)
    parent = max(d[64, 2]["parent_kb"] for d in rounds) / 1024
    machine = statistics.median(ceilings)
    own = statistics.median(owns)
    cores = statistics.median(d[16, 1]["cpu"] / d[16, 1]["seconds"] for d in rounds)
    stalls = [f["io_stall"] for d in rounds for f in d.values()]
    print(f"the machine: two CPU-bound processes at once run {machine:.2f}x as fast as one after the other, the "
          f"median over rounds; dlagg's 2 workers get {speedup / machine:.0%} of that")
    print(f"dlagg's work: two 1-worker runs of 8 of the 16 ranks each at once run {own:.2f}x as fast as one after "
          f"the other, the median over rounds; dlagg's 2 workers get {speedup / own:.0%} of that, and take "
          f"{statistics.median(at_once):.2f}x the time of those two runs at once (the median over rounds)")
    print(f"1 worker keeps {cores:.2f} cores busy at 16 ranks (CPU time over wall time, the median over rounds: the "
          f"reader's threads read a rank's tables at once); 2 workers can be at most {machine / cores:.2f}x as fast "
          "on this machine")
    bound = statistics.median(bounds)
    print(f"start-up and the machine: every run first starts and imports dlagg (`python -c '{START_UP}'`), which a "
          f"second process does not shorten; after it, the 1-worker run's CPU time shared by two processes at the "
          f"machine's ceiling would make 2 workers at most {bound:.2f}x as fast, the median over rounds; they got "
          f"{speedup / bound:.0%} of that")
    if PRESSURE.exists():
        print(f"waited for the disk during a timed run (its files read just before it): {max(stalls):.2f} s at most, "
              f"{statistics.median(stalls):.2f} s the median (/proc/pressure/io)")
    bars = [
        (f"2 workers vs 1 at 16 ranks: {speedup:.2f}x, the median over rounds (bar: at least {MIN_SPEEDUP}x)",
         speedup >= MIN_SPEEDUP),
        (f"64 vs 16 ranks with 2 workers: {growth:.2f}x the time for 4x the ranks, the median over rounds (bar: at "
         f"most {4 * LINEAR_SLACK:.1f}x)", growth <= 4 * LINEAR_SLACK),
        (f"parent peak at 64 ranks: {parent:.0f} MB, the largest over rounds (bar: under {MAX_PARENT_MB} MB)",
         parent < MAX_PARENT_MB),
    ]
    for text, ok in bars:
        print(f"{'holds' if ok else 'FAILS'}: {text}")
    if args.large:
        large = run(make_job(args.workdir, args.large), 2, args.workdir / "out")
        print(f"{args.large} ranks, 2 workers: {large['seconds']:.2f} s, of which {large['after_ranks']:.2f} s after "
              f"the last rank (the merge and the writes); parent peak {large['parent_kb'] / 1024:.0f} MB")
    return 1 if args.strict and not all(ok for _, ok in bars) else 0


if __name__ == "__main__":
    sys.exit(main())
