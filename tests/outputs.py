"""Helpers for the output tests: a folder's outputs as a comparable snapshot, kill -9 trials of real runs.

A snapshot maps each file's path under the folder to its SHA-256, except TensorBoard event files, whose
names and records carry the wall time, host and pid of the run that wrote them: they count by folder
(``<dir>/events.out.tfevents.*`` -> how many), which tells an aggregated range with sub-runs from one
without.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dlagg.log import Log
from dlagg.options import Options
from dlagg.output.staging import JOURNAL, STAGING
from dlagg.pipeline import run

EVENTS = "events.out.tfevents."
REPORT_FILES = (".csv", ".json", ".html", ".png")
# What a killed run may leave: a staging folder, and the temporary files of older dlagg versions.
STRAY = re.compile(r"\.dlagg-staging\..*|\..*\.tmp|\..*\.old\..*")


def snapshot(folder: Path, profile_name: str = "dlagg", tb_dir: str = "event_files") -> dict[str, str]:
    """The profile's outputs under `folder` (its report files, its rank<N>/ ones, its event folder): path -> digest."""
    found: dict[str, str] = {}
    events: Counter[str] = Counter()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        ours = (path.name.startswith(f"{profile_name}_") and path.suffix in REPORT_FILES) or \
            rel.startswith(f"{tb_dir}/{profile_name}/")
        if not path.is_file() or not ours or rel.startswith(STAGING):
            continue
        if path.name.startswith(EVENTS):
            events[f"{path.parent.relative_to(folder).as_posix()}/{EVENTS}*"] += 1
        else:
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    found.update({k: f"{n} event file(s)" for k, n in events.items()})
    return found


def strays(folder: Path) -> list[str]:
    """Entries a killed run may leave behind, anywhere under `folder`."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if STRAY.fullmatch(p.name))


def which(state: dict[str, str], old: dict[str, str], new: dict[str, str]) -> str:
    """'old', 'new' (or 'old=new' when they are the same) when `state` is exactly one of them, else 'mixed'."""
    matches = [name for name, ref in (("old", old), ("new", new)) if state == ref]
    return "=".join(matches) if matches else "mixed"


def dlagg_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "dlagg", *args]


# What a trial's kill waits for before its delay: the start of the run, the staging folder's appearance
# (the first report written), the staged event folder's (the last writer: the commit follows within a few ms)
# or the journal's (the commit's renames, polled every 0.1 ms: they take a few ms).
TRIGGERS = ("start", "staging", "events", "journal")
POLL_S = 0.001
JOURNAL_POLL_S = 0.0001  # the journal lives a few ms


@dataclass(frozen=True)
class Plan:
    folder: Path  # the run's --output_path, prepared by the caller (empty, or holding the old set)
    args: list[str]
    trigger: str  # one of TRIGGERS
    delay: float  # seconds after the trigger
    old: dict[str, str]  # the set in the folder before the run (empty, or the old reference's)


@dataclass(frozen=True)
class Trial:
    plan: Plan
    finished: bool  # the run ended before the kill
    phase: str  # what the kill left: 'no staging', 'staging', 'journal', or 'done'
    after_kill: str  # the profile's outputs right after the kill: old, new, mixed (only with a journal)
    after_next_run: str  # ... once the next run (another profile, same folder) has cleaned up
    cleanup_said: bool  # the next run said what it cleaned (info line)


def _triggered(folder: Path, trigger: str) -> bool:
    if trigger == "start":
        return True
    staging = [p for p in folder.iterdir() if p.name.startswith(STAGING)]
    if trigger == "journal":
        return any((p / JOURNAL).exists() for p in staging)
    return bool(staging) if trigger == "staging" else any((p / "files" / "event_files").exists() for p in staging)


def kill_run(plan: Plan) -> bool:
    """Run dlagg with `plan.args`, kill -9 it `plan.delay` seconds after its trigger; whether it had ended."""
    process = subprocess.Popen(dlagg_command(plan.args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while process.poll() is None and not _triggered(plan.folder, plan.trigger):
        time.sleep(JOURNAL_POLL_S if plan.trigger == "journal" else POLL_S)
    killed_at = time.perf_counter() + plan.delay
    while process.poll() is None and time.perf_counter() < killed_at:
        time.sleep(POLL_S)
    finished = process.poll() is not None
    if not finished:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return finished


def look(plan: Plan, finished: bool, new: dict[str, str], db: Path) -> Trial:
    """What the killed run left in its folder, and what is left once the next run (profile 'next', in the
    same folder) has cleaned up."""
    staging = [p for p in plan.folder.iterdir() if p.name.startswith(STAGING)]
    phase = "done" if finished else ("journal" if any((s / JOURNAL).exists() for s in staging)
                                     else "staging" if staging else "no staging")
    after_kill = which(snapshot(plan.folder), plan.old, new)
    log = io.StringIO()
    run(Options(nsys_database=db, reports=("summary",), output_path=plan.folder, profile_name="next",
                suppress_tb_files=True, force=True), Log(stream=log))
    said = bool(re.search(r"removed \.dlagg-staging|finished moving into place", log.getvalue()))
    return Trial(plan, finished, phase, after_kill, which(snapshot(plan.folder), plan.old, new), said)


def kill_trials(plans: list[Plan], new: dict[str, str], db: Path, parallel: int) -> list[Trial]:
    """The runs of `plans`, `parallel` at a time, each killed as planned; then each folder looked at."""
    with ThreadPoolExecutor(max_workers=parallel) as pool:  # threads that wait on processes
        finished = list(pool.map(kill_run, plans))
    return [look(plan, done, new, db) for plan, done in zip(plans, finished, strict=True)]


# Seconds after each trigger within which the kill falls, drawn at random (uniform): after the start, anywhere
# in the run and a little after (1.1 x its length, measured); after the staging folder appears, within the
# writing (about a second here); after the staged event folder appears, within the event files' last writes
# (the journal appears 4-8 ms after the event folder, more under load); after the journal appears, within its
# renames and the staging folder's removal.
SPANS = {"staging": 1.0, "events": 0.015, "journal": 0.002}


def draw(trigger: str, chance: random.Random, seconds: float) -> float:
    return chance.uniform(0.0, 1.1 * seconds if trigger == "start" else SPANS[trigger])


def timed_run(args: list[str]) -> float:
    """Wall time of one complete run of the command (seconds); it must succeed."""
    began = time.perf_counter()
    done = subprocess.run(dlagg_command(args), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - began
