"""Start-up time of the ``dlagg`` command: --help, --version, an option error, the smallest run.

Goals on a 2-core machine: --help and option errors under 0.15 s and without importing pandas, pyarrow or numpy; the
smallest fixture's run (cuda_basic, --reports=summary) under 0.4 s. Each command is run REPEATS times as a fresh
process (``python -m dlagg``, what the installed ``dlagg`` script runs), and the best wall time is printed with its
ratio to the goal, next to the bare interpreter's start (``python -c pass``) and the floor of any run (the libraries
a run needs, imported alone) for scale. Then, for each command that
ends before a run starts, the heavy modules its process imported (``python -X importtime``): none is the goal.

    python benchmarks/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALLEST = ROOT / "fixtures" / "nsys-2022.4" / "cuda_basic" / "cuda_basic.sqlite"
HEAVY = ("pandas", "numpy", "pyarrow")
# Bytecode may be written and read, as an installed package's is: with PYTHONDONTWRITEBYTECODE set, every module edited
# since its bytecode was last written would be compiled again in every run.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
LIGHT_GOAL = 0.15  # seconds: --help, --version, an option error
RUN_GOAL = 0.4  # seconds: the smallest fixture's run


def commands(out: Path) -> dict[str, tuple[list[str], float | None]]:
    """name -> (the command's words after 'python', its goal in seconds or None)."""
    dlagg = ["-m", "dlagg"]
    return {
        "python -c pass": (["-c", "pass"], None),
        # The floor of any run: the libraries it reads and reduces with, imported alone. A run cannot start faster.
        "import pandas, pyarrow, numpy": (["-c", "import pandas, pyarrow, numpy"], None),
        "dlagg --help": ([*dlagg, "--help"], LIGHT_GOAL),
        "dlagg --version": ([*dlagg, "--version"], LIGHT_GOAL),
        "dlagg --output=x (unknown option)": ([*dlagg, "--output=x"], LIGHT_GOAL),
        "dlagg --workers=0 (bad value)": ([*dlagg, "--workers=0"], LIGHT_GOAL),
        "dlagg cuda_basic --reports=summary": ([*dlagg, f"--nsys_database={SMALLEST}", "--reports=summary",
                                                f"--output_path={out}", "--force=true"], RUN_GOAL),
    }


def best_wall(words: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, *words], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=ENV)
        times.append(time.perf_counter() - began)
    return min(times)


def heavy_imports(words: list[str]) -> tuple[list[str], float]:
    """The heavy top-level packages the command imported, and its imports' time (the top-level imports' cumulative
    times, s)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *words], cwd=ROOT, capture_output=True, text=True,
                          env=ENV)
    rows = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:")][1:]  # (header)
    top = sorted({name.strip().split(".")[0] for _, _, name in rows} & set(HEAVY))
    total = sum(int(cumulative) for _, cumulative, name in rows if not name.startswith("  "))  # unindented: top level
    return top, total / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        table = commands(Path(tmp) / "out")
        print(f"wall time of a fresh process, best of {args.repeats} ({sys.executable})")
        print(f"{'command':<38} {'best s':>7} {'goal s':>7} {'ratio':>6}")
        failed = 0
        for name, (words, goal) in table.items():
            seconds = best_wall(words, args.repeats)
            ratio = f"{seconds / goal:.2f}" if goal else ""
            failed += goal is not None and seconds > goal
            print(f"{name:<38} {seconds:>7.3f} {goal or '':>7} {ratio:>6}")
        print()
        print(f"{'command':<38} {'imports s':>9}  heavy modules imported (goal: none before a run)")
        for name, (words, goal) in table.items():
            if words[0] == "-m":
                top, total = heavy_imports(words)
                light = goal == LIGHT_GOAL
                failed += light and bool(top)
                print(f"{name:<38} {total:>9.3f}  {', '.join(top) or 'none'}{'' if light else ' (a run: expected)'}")
    print(f"\n{'all goals met' if not failed else f'{failed} goal(s) missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
