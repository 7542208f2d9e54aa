"""Run the reader fuzz target for N minutes and print executions and crashes.

Copies the seed corpus to a work folder (the repo's corpus stays as committed) and runs
``fuzz_reader.py`` under libFuzzer (atheris) until the time is up. libFuzzer stops at a crash
(it writes the input as ``crash-<sha1>`` in the work folder); the run then goes on from the
corpus grown so far, so one run collects every crash it finds. At the end it prints the
executions done, the crash files and the first line each raised. Copy a crash file to
``tests/fuzz/crashes/`` and fix its cause: tests/test_fuzz_regressions.py replays every file there.

    pip install atheris
    python tests/fuzz/run_fuzz.py --minutes 10 [--workdir /tmp/dlagg-fuzz]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dlagg-fuzz")
    args = parser.parse_args()
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: pip install atheris", file=sys.stderr)
        return 2
    work = args.workdir
    corpus = work / "corpus"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(HERE / "corpus", corpus)
    deadline = time.monotonic() + args.minutes * 60
    executions, runs, log = 0, 0, work / "fuzz.log"
    with log.open("w") as out:
        while (left := int(deadline - time.monotonic())) > 0:
            runs += 1
            command = [sys.executable, str(HERE / "fuzz_reader.py"), str(corpus), f"-max_total_time={left}",
                       "-max_len=131072", "-len_control=0", "-timeout=60", "-rss_limit_mb=4096",
                       f"-artifact_prefix={work}/"]
            done = subprocess.run(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
            text = done.stdout.decode(errors="replace")
            out.write(text)
            # libFuzzer's status lines start "#<executions>"; each run counts from 0
            counts = [int(n) for n in re.findall(r"^#(\d+)", text, flags=re.MULTILINE)]
            executions += max(counts, default=0)
    text = log.read_text(errors="replace")
    crashes = sorted(work.glob("crash-*")) + sorted(work.glob("timeout-*")) + sorted(work.glob("oom-*"))
    print(f"executions: {executions:,} in {args.minutes:g} min ({runs} libFuzzer run(s)); crashes: {len(crashes)}")
    for crash in crashes:
        print(f"  {crash}")
    for error in sorted(set(re.findall(r"^\w*(?:Error|Exception): .*$", text, flags=re.MULTILINE)))[:20]:
        print(f"  raised: {error[:200]}")
    print(f"log: {log}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
