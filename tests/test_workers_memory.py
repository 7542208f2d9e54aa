"""How many processes reduce ranks at once, against the cores and the memory the machine (or the job's cgroup, or its
CPU affinity) gives, and a worker process that the system kills.

Memory figures are hand-built files laid out as Linux shows them (/proc/meminfo, /proc/self/cgroup, cgroup v1 and
v2 folders), with their expected room worked out here by hand; one test runs dlagg in a real cgroup with a memory
limit where the machine allows it (root, a memory controller to write to). Workers are killed for real: by the
signal the out-of-memory killer sends (SIGKILL), from inside a stand-in rank and from outside a real run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlagg.errors import WorkerLost
from dlagg.limits import available_memory, processes_that_fit, usable_cores
from dlagg.ranks import reduce as reduce_module
from dlagg.ranks.pool import worker_lost
from dlagg.ranks.reduce import local_pool, map_ranks, plan_processes

from .conftest import ROOT

GB, MB = 1 << 30, 1 << 20
PER = "ddp2_gpt_per_rank"


def layout(root: Path, files: dict[str, str]) -> Path:
    """Files under `root` (paths relative to it), as /proc and /sys/fs/cgroup show them."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def meminfo(available_kb: int) -> str:
    return f"MemTotal:       33554432 kB\nMemFree:         1048576 kB\nMemAvailable:   {available_kb} kB\n"


def test_without_a_cgroup_limit_the_room_is_the_systems_available_memory(tmp_path: Path) -> None:
    """This machine's kind: cgroup v1's memory controller beside an empty unified hierarchy, with no limit set (v1
    writes 2^63 rounded down to a page)."""
    root = layout(tmp_path, {
        "proc/meminfo": meminfo(8 * 1024 * 1024),
        "proc/self/cgroup": "4:memory:/process_api/abc\n1:cpu:/\n0::/\n",
        "cg/memory/process_api/abc/memory.limit_in_bytes": "9223372036854771712\n",
        "cg/memory/process_api/abc/memory.usage_in_bytes": "322916352\n",
        "cg/memory/process_api/abc/memory.stat": "cache 1000\ntotal_inactive_file 1000\n",
        "cg/memory/memory.limit_in_bytes": "9223372036854771712\n",
        "cg/unified/cgroup.procs": "",
    })
    assert available_memory(root / "proc", root / "cg") == 8 * GB


def test_a_cgroup_v1_limit_above_the_process_leaves_its_room(tmp_path: Path) -> None:
    """A Slurm job's limit on the job's cgroup holds for the step's below it: 2 GB less 1 GB used, of which 256 MB
    is file cache the kernel can drop, leaves 1.25 GB."""
    root = layout(tmp_path, {
        "proc/meminfo": meminfo(8 * 1024 * 1024),
        "proc/self/cgroup": "4:memory:/slurm/job1/step0\n0::/\n",
        "cg/memory/slurm/job1/step0/memory.limit_in_bytes": "9223372036854771712\n",
        "cg/memory/slurm/job1/memory.limit_in_bytes": f"{2 * GB}\n",
        "cg/memory/slurm/job1/memory.usage_in_bytes": f"{GB}\n",
        "cg/memory/slurm/job1/memory.stat": f"cache {300 * MB}\ntotal_inactive_file {256 * MB}\nrss 1\n",
    })
    assert available_memory(root / "proc", root / "cg") == 2 * GB - (GB - 256 * MB)


def test_a_cgroup_v2_limit_and_a_containers_own_cgroup(tmp_path: Path) -> None:
    """cgroup v2 mounted alone: 4 GB on the job's cgroup, 1.5 GB used of which 0.5 GB droppable file cache, leaves 3 GB
    (the step below it has no limit: "max"). In a container (a cgroup namespace) the process's cgroup is "/", the
    container's own, with its limit at the mount's top."""
    root = layout(tmp_path, {
        "proc/meminfo": meminfo(16 * 1024 * 1024),
        "proc/self/cgroup": "0::/job/step\n",
        "cg/cgroup.controllers": "cpu memory pids\n",
        "cg/job/step/memory.max": "max\n",
        "cg/job/memory.max": f"{4 * GB}\n",
        "cg/job/memory.current": f"{3 * GB // 2}\n",
        "cg/job/memory.stat": f"anon {GB}\nfile {GB // 2}\ninactive_file {GB // 2}\n",
    })
    assert available_memory(root / "proc", root / "cg") == 3 * GB
    container = layout(tmp_path / "container", {
        "proc/meminfo": meminfo(16 * 1024 * 1024),
        "proc/self/cgroup": "0::/\n",
        "cg/cgroup.controllers": "memory\n",
        "cg/memory.max": f"{GB}\n",
        "cg/memory.current": f"{GB // 4}\n",
        "cg/memory.stat": "inactive_file 0\n",
    })
    assert available_memory(container / "proc", container / "cg") == 3 * GB // 4


def test_memory_unknown_where_linux_does_not_say(tmp_path: Path) -> None:
    assert available_memory(tmp_path / "proc", tmp_path / "cg") is None
    root = layout(tmp_path / "damaged", {"proc/meminfo": "MemAvailable: lots\n", "proc/self/cgroup": "garbage\n"})
    assert available_memory(root / "proc", root / "cg") is None


def test_processes_that_fit_take_the_largest_ranks_first() -> None:
    """Each process takes one of the largest ranks: 180 MB plus 1.5 bytes per export byte (docs/memory.md), and the
    parent keeps 2 MB of figures per rank. Ranks of 3, 2, 1 and 1 GB need 4,788, 3,252, 1,716 and 1,716 MB."""
    shares = [GB, 3 * GB, GB, 2 * GB]
    parent = 4 * 2
    assert processes_that_fit(shares, (4788 + 3252 + 1716 + parent) * MB) == 3
    assert processes_that_fit(shares, (4788 + 3252 + 1716 + parent) * MB - 1) == 2
    assert processes_that_fit(shares, (4788 + 3252 + parent) * MB - 1) == 1
    assert processes_that_fit(shares, 100 * MB) == 1  # one process always: this one
    assert processes_that_fit(shares, 64 * GB) == 4


def test_by_default_no_more_processes_than_memory_holds(monkeypatch) -> None:
    """Sixteen ranks of 1 GB (1,716 MB each at once) on 8 cores: 5 GB (5,120 MB, of which 32 MB the parent's
    figures) holds 2 at once. Asked for 8 (--workers), dlagg runs 8 and warns, naming what fits."""
    monkeypatch.setattr(reduce_module, "default_workers", lambda: 8)
    shares = [GB] * 16
    monkeypatch.setattr(reduce_module, "available_memory", lambda: 5 * GB)
    count, note, warn = plan_processes(None, shares)
    assert (count, warn) == (2, False)
    assert note.startswith("2 processes reduce the ranks at once, not one per core (8): 5.0 GB of memory is "
                           "available and the largest ranks need about 1.7 GB each")
    count, note, warn = plan_processes(8, shares)
    assert (count, warn) == (8, True)
    assert note.startswith("--workers=8: reducing 8 ranks at once needs about 13.4 GB of memory and 5.0 GB is "
                           "available") and note.endswith("--workers=2 fits")
    assert plan_processes(2, shares) == (2, "", False)
    monkeypatch.setattr(reduce_module, "available_memory", lambda: 64 * GB)
    assert plan_processes(None, shares) == (8, "", False)
    monkeypatch.setattr(reduce_module, "available_memory", lambda: None)  # not Linux: one per core
    assert plan_processes(None, shares) == (8, "", False)
    assert plan_processes(None, [GB] * 3) == (3, "", False)  # one per rank at most


def test_the_cores_are_the_affinity_mask_within_the_cgroup_cpu_quota(tmp_path: Path, monkeypatch) -> None:
    """A job pinned to 8 of a node's cores (Slurm, taskset) has 8; a cgroup quota of 1.5 cores above it (v2 cpu.max,
    "max" below) gives 2, rounded up; cgroup v1's quota of 300 ms per 100 ms period (mounted as cpu,cpuacct) gives 3;
    without a quota, the affinity mask."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    v2 = layout(tmp_path / "v2", {
        "proc/self/cgroup": "0::/job/step\n",
        "cg/cgroup.controllers": "cpu memory\n",
        "cg/job/step/cpu.max": "max 100000\n",
        "cg/job/cpu.max": "150000 100000\n",
    })
    assert usable_cores(v2 / "proc", v2 / "cg") == 2
    v1 = layout(tmp_path / "v1", {
        "proc/self/cgroup": "3:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
        "cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
        "cg/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "cg/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "cg/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    assert usable_cores(v1 / "proc", v1 / "cg") == 3
    assert usable_cores(tmp_path / "none" / "proc", tmp_path / "none" / "cg") == 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert usable_cores(v1 / "proc", v1 / "cg") == 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="CPU affinity (Linux) and two cores")
@pytest.mark.processes
def test_a_run_pinned_to_one_core_reduces_its_ranks_in_one_process(multi, tmp_path: Path) -> None:
    """dlagg started on one core of this machine (its affinity mask, as Slurm or taskset sets it) runs one process
    by default, not one per core of the machine: both ranks are reduced in this process."""
    one_core = partial(os.sched_setaffinity, 0, {min(os.sched_getaffinity(0))})
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={multi(PER)}", "--reports=ranks",
                           f"--output_path={tmp_path / 'out'}", "-v", "detailed"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, preexec_fn=one_core)
    assert done.returncode == 0, done.stderr
    where = [line for line in done.stderr.splitlines() if "peak memory of the process that reduced it" in line]
    assert len(where) == 2 and all("(this process)" in line for line in where), done.stderr


def killed_in_a_worker(source: SimpleNamespace, parent: int, starts: Path, how: str) -> SimpleNamespace:
    """Stands for reduce_rank: in a worker process it notes its rank, then dies as `how` says (SIGKILL, as the
    out-of-memory killer sends, or an exit status); in this process it returns the rank's figures."""
    if os.getpid() != parent:
        (starts / str(source.rank)).touch()
        if how == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    time.sleep(0.05)
    return SimpleNamespace(source=source, iterations=SimpleNamespace(count=1), seconds=0.05, peak_mb=1.0)


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # no lane may die unheard
@pytest.mark.parametrize(("how", "said", "workers"), [("SIGKILL", "was killed by signal 9 (SIGKILL)", 2),
                                                      ("exit", "exited with status 3", 2),
                                                      ("SIGKILL", "was killed by signal 9 (SIGKILL)", 3)])
def test_a_worker_that_dies_is_one_error_naming_its_rank(tmp_path: Path, how: str, said: str, workers: int) -> None:
    """A worker process that dies while it reduces a rank stops the map with one error: how it ended, which rank it
    was reducing (the one that noted it started in a worker), and what to do; SIGKILL is said to be most likely the
    out-of-memory killer. With two pool workers (both die here) the error names the ranks the two were on, which
    rank on which worker being unknown, and still knows how they ended (the first lane to shut the pool down does
    not leave the other without the pool's processes)."""
    sources = [SimpleNamespace(rank=rank, path=Path(f"rank{rank}.sqlite"), export_bytes=0) for rank in range(8)]
    job = SimpleNamespace(sources=tuple(sources))
    with local_pool(workers, [0] * len(sources)) as pool:
        for _ in range(workers - 1):
            pool.submit(time.sleep, 0.2)  # the worker processes are up: they take ranks
        pool.submit(os.getpid).result()
        with pytest.raises(WorkerLost) as raised:
            map_ranks(job, partial(killed_in_a_worker, parent=os.getpid(), starts=tmp_path, how=how),
                      pool=pool)  # type: ignore[arg-type]
    started = sorted(int(p.name) for p in tmp_path.iterdir())
    assert 1 <= len(started) <= workers - 1
    message = str(raised.value)
    named = [int(rank) for rank in re.findall(r"reducing rank (\d+) \(rank\1\.sqlite\)", message.split(":")[0])]
    assert message.startswith(f"a worker process {said} while reducing rank ")
    assert set(started) <= set(named) and len(named) <= workers - 1, (message, started)
    assert ("out-of-memory killer" in message) == (how == "SIGKILL")
    fewer = max(1, workers // 2)
    assert message.endswith(f"rerun with fewer processes at once (--workers={fewer}) or on a machine with more "
                            "memory (docs/memory.md)")


def dies_on_dask(source: SimpleNamespace, doomed: int) -> SimpleNamespace:
    """Stands for reduce_rank on a Dask worker: rank `doomed` kills the worker process (SIGKILL, as the system's
    out-of-memory killer does); the others return their figures."""
    if source.rank == doomed:
        os.kill(os.getpid(), signal.SIGKILL)
    return SimpleNamespace(source=source, iterations=SimpleNamespace(count=1), seconds=0.0, peak_mb=1.0)


@pytest.mark.processes
def test_a_rank_whose_dask_workers_die_is_one_error_naming_it() -> None:
    """On a real Dask cluster the scheduler gives up on a task whose workers die (KilledWorker, here after the first
    death; one task at a time on the worker, so that no other rank is on it when it dies): one error naming the rank,
    why it most likely happened and what to do, not an internal error."""
    distributed = pytest.importorskip("distributed")
    import dask

    sources = [SimpleNamespace(rank=rank, path=Path(f"rank{rank}.sqlite"), export_bytes=0) for rank in range(3)]
    job = SimpleNamespace(sources=tuple(sources))
    settings = {"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.worker-saturation": 1.0}
    with dask.config.set(settings), distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with pytest.raises(WorkerLost) as raised:
            map_ranks(job, partial(dies_on_dask, doomed=1), scheduler=cluster.scheduler_address)  # type: ignore
    assert str(raised.value).startswith("Dask gave up on rank 1 (rank1.sqlite): the workers that ran it died while "
                                        "it ran (KilledWorker), most likely for memory")
    assert "--memory-limit" in str(raised.value)


def children(pid: int) -> list[int]:
    """The child processes of `pid` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(p) for p in task.read_text().split()]
        except OSError:  # the thread ended
            pass
    return found


@pytest.mark.skipif(not Path("/proc/self/task").exists() or (os.cpu_count() or 1) < 2,
                    reason="Linux /proc and two cores (a pool worker beside this process)")
@pytest.mark.processes
def test_a_run_whose_worker_is_killed_ends_with_one_line_and_no_outputs(multi, tmp_path: Path) -> None:
    """The command line over the two ranks' files with 2 workers, its pool's worker killed with SIGKILL as soon as it
    exists (whatever it is doing then: starting, reducing a rank, writing): one error line, exit status 1, no
    traceback, and no output folder."""
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-m", "dlagg", f"--nsys_database={multi(PER)}", "--reports=all",
                            "--workers=2", f"--output_path={out}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    worker = None
    while worker is None and run.poll() is None and time.monotonic() < deadline:  # the fork server's child
        worker = next((w for server in children(run.pid) for w in children(server)), None)
        time.sleep(0.005)
    assert worker is not None, "no worker process appeared"
    os.kill(worker, signal.SIGKILL)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    lines = err.splitlines()
    assert lines[-1].startswith("dlagg: error: a worker process was killed by signal 9 (SIGKILL) while "), err
    assert "out-of-memory killer" in lines[-1] and "Traceback" not in err and "internal error" not in err
    assert not out.exists()


def memory_cgroup() -> Path | None:
    """A folder where a new memory cgroup can be made, when this process may (root): cgroup v1's, under this
    process's own cgroup; else cgroup v2's top, with the memory controller given to its children (a v2 cgroup
    below with processes in it could not give it). None otherwise."""
    if os.geteuid() != 0:
        return None
    v1 = Path("/sys/fs/cgroup/memory")
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        own = v1 / path.strip("/")
        if "memory" in controllers.split(",") and (own / "memory.limit_in_bytes").exists() and os.access(own, os.W_OK):
            return own
    v2 = Path("/sys/fs/cgroup")
    control = v2 / "cgroup.subtree_control"
    if control.exists() and "memory" in control.read_text().split() and os.access(v2, os.W_OK):
        return v2
    return None


@pytest.mark.skipif(memory_cgroup() is None or (os.cpu_count() or 1) < 2,
                    reason="root, a memory cgroup controller to write to, and two cores")
@pytest.mark.processes
def test_in_a_cgroup_with_memory_for_one_rank_one_process_reduces_them(multi, tmp_path: Path) -> None:
    """dlagg in a real cgroup whose limit (380 MB) holds one rank's process at a time (196 MB each for the 10.9 MB rank
    files, beside the run's own 100-150 MB): by default it runs one process, not one per core, says why, and
    succeeds within the limit."""
    top = memory_cgroup()
    assert top is not None
    group = top / f"dlagg-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / ("memory.max" if top == Path("/sys/fs/cgroup") else "memory.limit_in_bytes")).write_text(str(380 * MB))
        enter = partial((group / "cgroup.procs").write_text, "0")  # "0": the process that writes
        done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={multi(PER)}", "--reports=all",
                               f"--output_path={tmp_path / 'out'}", "-v", "detailed"], capture_output=True,
                              text=True, cwd=ROOT, timeout=300, preexec_fn=enter)
    finally:
        for _ in range(50):  # the process has left the group once it is reaped; the kernel may lag a little
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        else:
            shutil.rmtree(group, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert "dlagg: 1 process reduces the ranks at once, not one per core" in done.stderr
    where = [line for line in done.stderr.splitlines() if "peak memory of the process that reduced it" in line]
    assert len(where) == 2 and all("(this process)" in line for line in where), done.stderr
    assert (tmp_path / "out" / "dlagg_ranks.csv").exists()


def test_a_pool_with_a_killed_worker_says_how_it_ended() -> None:
    """`worker_lost` for a plain process pool whose worker was killed (as `Writes.results` raises it when a worker
    dies while it writes the outputs): the signal, what it most likely was, and one error class, exit status 1."""
    with ProcessPoolExecutor(1) as pool:
        os.kill(pool.submit(os.getpid).result(), signal.SIGKILL)
        with pytest.raises(BrokenExecutor):
            pool.submit(time.sleep, 5).result()  # the pool finds its worker dead
        error = worker_lost(pool, "writing the reports")
    assert str(error).startswith("a worker process was killed by signal 9 (SIGKILL) while writing the reports: "
                                 "most likely by the system's out-of-memory killer")
    assert isinstance(error, WorkerLost) and error.exit_code == 1
