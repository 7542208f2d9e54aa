"""Against the peers, same run: dlagg, ``nsys stats`` and nsys-ai's ``diagnose`` on one Nsight Systems export.

Three commands, each timed as a fresh process on the same SQLite export, in rounds (one run of each per round, so a
machine whose speed drifts slows all three alike), and the best of ``--repeats`` rounds counts:

- dlagg: ``python -m dlagg --nsys_database=X --reports=all --formats=csv --output_path=OUT --force`` (interpreter
  start-up and imports included; TensorBoard event files are written too, dlagg's default), with an empty read cache
  of its own each run (``DLAGG_CACHE_DIR``): the run a user gets the first time on an export.
- nsys stats: ``nsys stats --report nvtxkernsum,gpukernsum --format csv --output OUT X`` (NVIDIA Nsight Systems'
  CLI: the kernel summary and the kernels under each NVTX range, the closest of its reports to dlagg's).
- nsys-ai: ``nsys-ai diagnose X`` (the PyPI package ``nsys-ai``: runs its default skill pack on the export and prints
  ranked findings), from an empty folder (it writes its session folder, ``.nsys-ai``, in the current one).

The peers may write where they read: nsys stats can add tables to an export (2022.4 left the ones here unchanged),
nsys-ai writes its cache beside the export and, on its plain-SQLite fallback, indexes into it. So each peer run gets
a fresh copy of the export, made before the clock starts (a later run would find what an earlier one left); dlagg
reads its own copy, which no peer touches. The source is never written (a ``.sqlite.gz`` is unpacked into the work
folder first). Every copy is read once before its run, so all three are measured with a warm page cache.
``--cached`` also times each tool's second run on the same copy (dlagg's and nsys-ai's caches then hit).

It prints each wall time, the ratios peer/dlagg and the goals (``GOALS``: dlagg at least 8x faster than nsys stats
and 5x faster than nsys-ai diagnose), then the floor of any dlagg run on the export (`floor`: the libraries' import
and SQLite's scan of the columns read) next to the time each goal allows. Timings are printed, never asserted
(``--strict`` exits 1 when a measured goal fails). A peer that is not installed is reported as such, with how to
install it; a peer whose run fails is reported with its last line of stderr.

Installing the peers (each outside dlagg's venv):

- nsys-ai, in a venv of its own, with DuckDB's SQLite extension from PyPI (without it, and without a network to fetch
  it, nsys-ai tries to download it, then falls back to plain SQLite: 3.5 to 8x slower here; the benchmark notes
  when a run did)::

      python3 -m venv /tmp/nsysai-venv
      /tmp/nsysai-venv/bin/pip install nsys-ai duckdb==1.5.5 duckdb-extensions duckdb-extension-sqlite-scanner==1.5.5
      /tmp/nsysai-venv/bin/python -c "from duckdb_extensions import import_extension as i; i('sqlite_scanner')"

- nsys: Debian 12's ``nsight-systems`` (2022.4) from the non-free component. ``apt-get install nsight-systems`` also
  wants the NVIDIA driver's ``libcuda1`` (non-free and contrib); ``nsys stats`` needs none of it, so unpacking the two
  packages is enough (as root, ``Components: main non-free`` in /etc/apt/sources.list.d/debian.sources)::

      apt-get update && apt-get download nsight-systems nsight-systems-target
      for deb in nsight-systems*.deb; do dpkg -x "$deb" /opt/nsight-systems-2022.4; done
      # then: --nsys /opt/nsight-systems-2022.4/usr/bin/nsys

    python benchmarks/bench_peers.py [--source X.sqlite[.gz]] [--repeats 3] [--nsys PATH] [--nsys-ai PATH]
                                     [--cached] [--strict]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_dlagg import READ_CHUNK, SHARED_SOURCE, scan, warm  # noqa: E402 - the same export, read the same way

GOALS = {"nsys stats": 8.0, "nsys-ai diagnose": 5.0}  # dlagg at least this many times faster than the peer
INSTALL = {
    "nsys stats": "Debian 12 non-free: apt-get download nsight-systems nsight-systems-target, dpkg -x each "
                  "(see this script's docstring), then --nsys PATH",
    "nsys-ai diagnose": "python3 -m venv /tmp/nsysai-venv && /tmp/nsysai-venv/bin/pip install nsys-ai "
                        "(plus DuckDB's SQLite extension: see this script's docstring), then --nsys-ai PATH",
}
FALLBACK = "falling back to SQLite"  # nsys-ai's note when DuckDB cannot read the export
REPEATS = 3

# Prepares one run in its own empty folder (untimed: copies, warming) and returns (command, cwd, environment).
Setup = Callable[[Path], tuple[list[str], Path, dict[str, str]]]


@dataclass
class Tool:
    name: str
    setup: Setup | None  # None: not installed
    version: str = ""
    cache: bool = False  # keeps a cache of what it read: --cached times a second run
    times: list[float] = field(default_factory=list)  # first run on a copy, one per round
    second: list[float] = field(default_factory=list)  # the same command again on that copy (--cached)
    failure: str = ""  # the last stderr line of a failed run
    notes: set[str] = field(default_factory=set)


def prepare_input(source: Path, workdir: Path) -> Path:
    """dlagg's copy of the export in the work folder (unpacked when ``.gz``), read once: the peers copy it."""
    target = workdir / "input" / source.name.removesuffix(".gz")
    target.parent.mkdir()
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst, READ_CHUNK)
    warm(target)
    return target


def fresh_copy(base: Path, folder: Path) -> Path:
    copy = folder / base.name
    shutil.copyfile(base, copy)
    warm(copy)
    return copy


def find_tool(given: str | None, name: str) -> Path | None:
    found = shutil.which(given or name)
    return Path(found) if found else None


def tool_version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except OSError:
        return "?"
    return (done.stdout.strip().splitlines() or ["?"])[-1]


def nsys_ai_version(script: Path) -> str:
    """nsys-ai has no --version: ask the interpreter its script runs under."""
    first = script.read_bytes()[:200].split(b"\n")[0].decode(errors="replace")
    python = first[2:].strip() if first.startswith("#!") else sys.executable
    ask = "import importlib.metadata as m; print(m.version('nsys-ai'))"
    return "nsys-ai " + tool_version([*python.split(), "-c", ask])


def dlagg_tool(base: Path) -> Tool:
    def setup(folder: Path) -> tuple[list[str], Path, dict[str, str]]:
        command = [sys.executable, "-m", "dlagg", f"--nsys_database={base}", "--reports=all", "--formats=csv",
                   f"--output_path={folder / 'out'}", "--force"]
        # An empty read cache of its own; bytecode may be written (an installed package has it), as bench_dlagg.py.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["DLAGG_CACHE_DIR"] = str(folder / "cache")
        return command, REPO, env

    return Tool("dlagg", setup, tool_version([sys.executable, "-m", "dlagg", "--version"]), cache=True)


def nsys_tool(nsys: Path | None, base: Path) -> Tool:
    def setup(folder: Path) -> tuple[list[str], Path, dict[str, str]]:
        copy = fresh_copy(base, folder)
        command = [str(nsys), "stats", "--report", "nvtxkernsum,gpukernsum", "--format", "csv",
                   "--output", str(folder / "out"), str(copy)]
        return command, folder, dict(os.environ)

    if nsys is None:
        return Tool("nsys stats", None)
    return Tool("nsys stats", setup, tool_version([str(nsys), "--version"]).replace("NVIDIA Nsight Systems ", "nsys "))


def nsys_ai_tool(nsys_ai: Path | None, base: Path) -> Tool:
    def setup(folder: Path) -> tuple[list[str], Path, dict[str, str]]:
        copy = fresh_copy(base, folder)
        return [str(nsys_ai), "diagnose", str(copy)], folder, dict(os.environ)  # its .nsys-ai folder goes in cwd

    if nsys_ai is None:
        return Tool("nsys-ai diagnose", None)
    return Tool("nsys-ai diagnose", setup, nsys_ai_version(nsys_ai), cache=True)


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, str]:
    """(wall seconds, exit status, stderr) of one fresh process; its standard output is discarded."""
    with tempfile.TemporaryFile("w+", errors="replace") as err:
        began = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        elapsed = time.perf_counter() - began
        err.seek(0)
        return elapsed, done.returncode, err.read()


def run_once(tool: Tool, folder: Path, cached: bool) -> None:
    """One round of a tool in an empty folder: the first run on its copy and, with ``cached``, a second one."""
    assert tool.setup is not None
    folder.mkdir()
    command, cwd, env = tool.setup(folder)
    for times in (tool.times, tool.second) if cached and tool.cache else (tool.times,):
        seconds, status, err = timed(command, cwd, env)
        if status != 0:
            last = (err.strip().splitlines() or ["(no stderr)"])[-1]
            tool.failure = f"exit {status}: {last[:200]}"
            return
        if FALLBACK in err:
            tool.notes.add("ran on plain SQLite: DuckDB's SQLite extension is missing (see the docstring)")
        times.append(seconds)


def measure(tools: list[Tool], workdir: Path, repeats: int, cached: bool) -> None:
    for round_ in range(repeats):
        for tool in tools:
            if tool.setup is None or tool.failure:
                continue
            folder = workdir / f"{tool.name.split()[0]}-{round_}"
            print(f"bench: round {round_ + 1}/{repeats}: {tool.name} ...", flush=True)
            run_once(tool, folder, cached)
            shutil.rmtree(folder, ignore_errors=True)  # the copy and the outputs: keep the disk use to one copy


def report(tools: list[Tool], cached: bool) -> list[str]:
    """Print the table and the goals; return the goals that do not hold."""
    dlagg = tools[0]
    base = min(dlagg.times) if dlagg.times else None
    print()
    print(f"{'command':<18}{'version':<34}{'best s':>8}  {'runs s':<24}"
          + (f"{'2nd run s':>10}" if cached else "") + f"{'peer/dlagg':>11}{'goal':>7}")
    failed = []
    for tool in tools:
        if tool.setup is None:
            print(f"{tool.name:<18}not installed: {INSTALL[tool.name]}")
            continue
        if not tool.times:
            print(f"{tool.name:<18}{tool.version[:33]:<34}failed ({tool.failure})")
            continue
        best = min(tool.times)
        runs = " ".join(f"{t:.2f}" for t in tool.times)
        second = f"{min(tool.second):>10.2f}" if tool.second else f"{'-':>10}"
        goal = GOALS.get(tool.name)
        ratio = best / base if base and goal else None
        print(f"{tool.name:<18}{tool.version[:33]:<34}{best:>8.2f}  {runs:<24}" + (second if cached else "")
              + (f"{ratio:>11.2f}{goal:>7.0f}" if ratio is not None and goal else ""))
        for note in sorted(tool.notes):
            print(f"{'':<18}note: {note}")
        if tool.failure:
            print(f"{'':<18}a later run failed ({tool.failure})")
        if ratio is not None and goal and ratio < goal:
            failed.append(f"dlagg {ratio:.2f}x as fast as {tool.name} (goal {goal:.0f}x)")
    missing = [t.name for t in tools[1:] if not t.times]
    verdict = "FAIL: " + "; ".join(failed) if failed else "none measured" if len(missing) == 2 else "hold"
    verdict += f" (not measured: {', '.join(missing)})" if missing else ""
    print(f"goals (dlagg at least {', '.join(f'{g:.0f}x faster than {n}' for n, g in GOALS.items())}): {verdict}")
    return failed


def floor(base: Path, repeats: int) -> tuple[float, float]:
    """(imports, scan) seconds: the libraries any dlagg run imports (``import pandas, pyarrow, numpy`` in a fresh
    process) and SQLite's own scan of the columns dlagg reads (bench_dlagg's), each the best of `repeats`: together
    the least a run on this export can take on this machine."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    imports = min(timed([sys.executable, "-c", "import pandas, pyarrow, numpy"], base.parent, env)[0]
                  for _ in range(repeats))
    warm(base)
    return imports, min(scan(base)[0] for _ in range(repeats))


def print_floor(imports: float, scanned: float, tools: list[Tool]) -> None:
    """The floor next to the time each goal allows dlagg."""
    allowed = ", ".join(f"{min(t.times) / GOALS[t.name]:.2f} s against {t.name}" for t in tools[1:] if t.times)
    print(f"floor of any run here: imports {imports:.2f} s + SQLite's scan of the columns read {scanned:.2f} s = "
          f"{imports + scanned:.2f} s" + (f"; the goals allow dlagg {allowed}" if allowed else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=SHARED_SOURCE,
                        help="the export, .sqlite or .sqlite.gz (default: the shared transformer_amp_large)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"rounds, the fastest run counts ({REPEATS})")
    parser.add_argument("--nsys", help="the nsys command (default: nsys on PATH)")
    parser.add_argument("--nsys-ai", dest="nsys_ai", help="the nsys-ai command (default: nsys-ai on PATH)")
    parser.add_argument("--cached", action="store_true",
                        help="also time a second run of dlagg and nsys-ai on the same copy (their caches hit)")
    parser.add_argument("--workdir", type=Path, help="where the copies and outputs go (default: a temporary folder)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a measured goal does not hold")
    args = parser.parse_args(argv)
    if not args.source.exists():
        print(f"bench: skipped: {args.source} not found (the shared fixtures live in ../shared next to the repo; "
              "pass --source to use another export)")
        return 0
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-peers-") as tmp:
        workdir = Path(tmp)
        base = prepare_input(args.source, workdir)
        nsys, nsys_ai = find_tool(args.nsys, "nsys"), find_tool(args.nsys_ai, "nsys-ai")
        tools = [dlagg_tool(base), nsys_tool(nsys, base), nsys_ai_tool(nsys_ai, base)]
        print(f"bench: dlagg: {sys.executable} -m dlagg; nsys: {nsys or 'not found'}; "
              f"nsys-ai: {nsys_ai or 'not found'}")
        print(f"bench: {args.source.name}: {base.stat().st_size / 1e6:,.1f} MB, best of {args.repeats} fresh "
              f"processes each, warm page cache; load average {os.getloadavg()[0]:.2f}", flush=True)
        measure(tools, workdir, max(1, args.repeats), args.cached)
        imports, scanned = floor(base, max(1, args.repeats))
    print(f"bench: load average after {os.getloadavg()[0]:.2f}")
    failed = report(tools, args.cached)
    print_floor(imports, scanned, tools)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
