"""No process of a run outlives it: a multi-rank run killed (SIGKILL, SIGTERM) once its pool's workers
exist leaves neither the fork server, nor a worker, nor the resource tracker alive, and nothing is written in its
output folder (the staging folder included) once it is gone.

Each run is a subprocess in a session of its own: its processes are the session's (the fork server and the resource
tracker are its children, the pool's workers the fork server's). Everything is polled against a deadline, never
slept for a fixed time, so a loaded machine slows the test down without making it race."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlagg.ranks.pool import watch_parent

from .conftest import ROOT, fixture_path

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")

DEADLINE = 90.0  # seconds: a whole run on a loaded two-core machine takes a few


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent, session) of process `pid`; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1]), int(fields[3])


def session(sid: int) -> dict[int, int]:
    """The live processes of session `sid` (zombies, which have ended, left out): pid -> parent pid."""
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[2] == sid and stat[0] not in ("Z", "X"):
                found[int(entry.name)] = stat[1]
    return found


def workers_up(pid: int) -> bool:
    """Whether the run `pid` has a pool worker: a process of its session whose parent is the run's child (the fork
    server)."""
    processes = session(pid)
    children = {p for p, parent in processes.items() if parent == pid}
    return any(parent in children for parent in processes.values())


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under `folder`: (size, modification time in ns)."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(root, name)
            try:
                stat = path.lstat()
            except FileNotFoundError:
                continue
            found[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns)
    return found


def wait_until(condition, deadline: float, what: str) -> None:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < deadline, f"{what} after {deadline:.0f} s"
        time.sleep(0.005)


def kill_once_workers_exist(args: list[str], out: Path, signum: int) -> tuple[int, str]:
    """Run dlagg with `args` in a session of its own, send `signum` once its pool's worker is up, and check that the
    session is empty soon after the run ends and that `out` did not change once it had; (status, stderr)."""
    command = [sys.executable, "-m", "dlagg", *args, "--reports=all", "--formats=all", f"--output_path={out}",
               "--workers=2"]
    log = out.parent / "stderr.txt"  # a file, not a pipe: a pipe's reader would wait for every process holding it
    with log.open("w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True, cwd=ROOT)
    try:
        wait_until(lambda: process.poll() is not None or workers_up(process.pid), DEADLINE, "no pool worker")
        assert process.poll() is None, f"the run ended before its pool's worker was seen: {log.read_text()}"
        process.send_signal(signum)
        process.wait(timeout=DEADLINE)
        written = files(out)  # the moment it is gone: from here on nothing may change
        wait_until(lambda: not session(process.pid), 10.0,
                   f"processes of the killed run still alive: {session(process.pid)}")
        assert files(out) == written, "written into the output folder after the run was gone"
        return process.returncode, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in session(process.pid):  # (a failed test leaves nothing behind either)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _nsys_folder(multi) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"--nsys_database={multi('ddp2_gpt_one_session')}"]


def _nsys_file(multi) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"--nsys_database={multi('ddp2_gpt_one_session') / 'ddp2_gpt_one_session.sqlite'}"]


def _kineto(_multi) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"--trace={fixture_path('kineto/ddp2/truth_rank0.json', 'Kineto fixture ddp2').parent}"]


INPUTS = {
    "nsys folder (fork server started before the imports)": _nsys_folder,
    "nsys file of two ranks (fork server started by the pool)": _nsys_file,
    "kineto traces": _kineto,
}


@needs_proc
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("given", list(INPUTS))
@pytest.mark.processes
def test_a_killed_multi_rank_run_leaves_no_process_and_writes_nothing_after(given: str, signum: int, multi,
                                                                             tmp_path: Path) -> None:
    code, stderr = kill_once_workers_exist(INPUTS[given](multi), tmp_path / "out", signum)
    assert code in (-signum, 128 + signum, 0), stderr  # 0: the run ended as the signal came
    assert "Traceback" not in stderr and "leaked" not in stderr, stderr
    if signum == signal.SIGTERM and code == 128 + signum:
        assert stderr.endswith("no partial output was left behind\n"), stderr


def _sleeper(parent: int) -> subprocess.Popen[str]:
    """A process that watches `parent` (pool.watch_parent) and would otherwise sleep a minute."""
    script = (f"import time; from dlagg.ranks.pool import watch_parent\nassert watch_parent({parent}, None)\n"
              "print('watching', flush=True); time.sleep(60)")
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)


@needs_proc
def test_a_worker_watching_a_process_ends_when_it_ends() -> None:
    """The watch a pool's worker keeps on dlagg's process, whoever its own parent is: it ends within moments of the
    process watched, and a process that has already ended is reported so (the worker then ends before any task)."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watcher = _sleeper(watched.pid)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "watching\n"
        assert watcher.poll() is None
        watched.kill()
        watched.wait()
        assert watcher.wait(timeout=30) == 1
    finally:
        for process in (watched, watcher):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not watch_parent(watched.pid, None)
