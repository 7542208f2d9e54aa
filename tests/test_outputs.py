"""All-or-nothing outputs (output/staging.py): staged and moved into place together, --force replacing a profile's
set as a whole, killed runs (kill -9 at random moments of real runs), a real file-size limit, and the paths a
run may write to."""

from __future__ import annotations

import errno
import io
import os
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from dlagg.errors import OptionsError, OutputError
from dlagg.log import Log
from dlagg.options import Options
from dlagg.output import staging as staging_module
from dlagg.output import writes as writes_module
from dlagg.output.staging import HOST, JOURNAL, STAGING, Staging, output_error
from dlagg.output.writes import WriteTask
from dlagg.pipeline import run
from dlagg.reports import Report, Table
from dlagg.reports.figures import Field
from dlagg.writers import RunInfo

from .conftest import dlagg, recording
from .outputs import TRIGGERS, Plan, Trial, dlagg_command, draw, kill_trials, snapshot, strays, timed_run, which

DB = "cuda_basic"
# The old set differs from the new one in every report's figures and in its event runs (a before_iter_start run).
OLD = ["--iter_start=3"]
EVERYTHING = ["--reports=all", "--formats=all"]
INFO = RunInfo(source="x.sqlite", nsys_version="2022.4", key_node="step", key_node_reason="given", iterations_total=1,
               iter_start=0, iter_stop=0, iteration_window_ns=(0, 1), profile_name="dlagg", dlagg_version="0")


def args_for(folder: Path, *extra: str) -> list[str]:
    return [f"--nsys_database={recording(DB)}", f"--output_path={folder}", *EVERYTHING, *extra]


def options(folder: Path, **given: object) -> Options:
    return Options(**{"nsys_database": recording(DB), "reports": ("all",), "formats": ("all",),
                      "output_path": folder, "verbosity": "quiet", **given})


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[str, Path]:
    """The old and the new complete sets, each written alone into an empty folder (in this process)."""
    folders = {name: tmp_path_factory.mktemp(name) for name in ("old", "new")}
    run(options(folders["old"], iter_start=3))
    run(options(folders["new"]))
    return folders


def dead_pid() -> int:
    """The pid of a process that has ended (a kill -9'ed run's)."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_a_run_leaves_only_its_outputs(references: dict[str, Path]) -> None:
    new = references["new"]
    assert strays(new) == []
    assert sorted(p.name for p in new.iterdir() if p.name.startswith(".")) == []
    assert snapshot(new) != snapshot(references["old"])
    changed = {k for k in snapshot(new) if snapshot(new)[k] != snapshot(references["old"]).get(k)}
    assert {"dlagg_summary.csv", "dlagg_kernel.json", "dlagg_report.html"} <= changed


def test_force_replaces_the_profile_set_as_a_whole_and_nothing_else(tmp_path: Path, references) -> None:
    out = tmp_path / "out"
    shutil.copytree(references["old"], out)
    others = {"notes.txt": "mine", "other_kernel.csv": "another profile", "dlagg_notes.txt": "not a dlagg output",
              "event_files/other/x.txt": "another run"}
    for name, text in others.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    run(options(out, reports=("summary", "kernel"), formats=("csv",), force=True))
    assert sorted(snapshot(out)) == ["dlagg_kernel.csv", "dlagg_summary.csv", "event_files/dlagg/events.out.tfevents.*"]
    for name in ("dlagg_kernel.csv", "dlagg_summary.csv"):  # the new run's, not the old ones
        assert snapshot(out)[name] == snapshot(references["new"])[name]
    assert {name: (out / name).read_text() for name in others} == others
    run(options(out, reports=("summary",), formats=("csv",), force=True, suppress_tb_files=True))
    assert sorted(snapshot(out)) == ["dlagg_summary.csv"]  # -b: the old event files are not part of the set
    assert sorted(p.name for p in (out / "event_files").iterdir()) == ["other"]
    assert strays(out) == []


def test_without_force_nothing_is_overwritten_even_at_the_commit(tmp_path: Path) -> None:
    """A file that appears between the first check and the end of the run stops the commit; nothing moves."""
    built = run(options(tmp_path / "first", reports=("summary",), formats=("csv",), suppress_tb_files=True))
    out = tmp_path / "out"
    with Staging(out, out / "event_files", "dlagg", force=False, events=False, suffixes=["summary"],
                 log=Log(0)) as staging:
        written = staging.write("csv", list(built.reports), out, INFO)
        assert written == [out / "dlagg_summary.csv"] and not written[0].exists()
        written[0].write_text("appeared meanwhile")
        with pytest.raises(OutputError, match=r"dlagg_summary.csv: already exists; pass --force=true"):
            staging.commit()
    assert (out / "dlagg_summary.csv").read_text() == "appeared meanwhile"
    assert strays(out) == [] and sorted(p.name for p in out.iterdir()) == ["dlagg_summary.csv"]


def test_a_run_that_fails_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """The output folder (and its parents) that a run made for its staging folder goes when the run fails before its
    commit, unless something else was put there meanwhile; a folder that was there before stays, even empty."""
    def fails(out: Path, meanwhile=lambda out: None) -> None:
        with pytest.raises(RuntimeError, match="a rank failed"), Staging(
                out, out / "event_files", "dlagg", force=False, events=False, suffixes=["summary"],
                log=Log(0)) as staging:
            staging.scratch()  # made at the start of a job of ranks on the local pool
            assert out.is_dir()
            meanwhile(out)
            raise RuntimeError("a rank failed")

    fails(tmp_path / "new" / "out")
    assert list(tmp_path.iterdir()) == []
    fails(tmp_path / "new" / "out", lambda out: (out / "theirs.txt").write_text("another program's"))
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")] == ["new", "new/out", "new/out/theirs.txt"]
    (tmp_path / "there").mkdir()
    fails(tmp_path / "there")
    assert (tmp_path / "there").is_dir() and list((tmp_path / "there").iterdir()) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_that_fails_after_its_checks_leaves_no_output_folder(tmp_path: Path, multi, capsys, workers: int) -> None:
    """--output_path is checked before the work but made by the first write: a job that fails while its ranks are
    reduced (here an --iter_start past rank 1's iterations) leaves no folder, with 1 process or with the pool."""
    out = tmp_path / "new" / "out"
    code, _, err = dlagg(capsys, f"--nsys_database={multi('ddp2_gpt_per_rank')}", "--reports=all", "--iter_start=50",
                         f"--workers={workers}", f"--output_path={out}")
    assert code == 2 and "--iter_start=50 is out of range" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error", [RuntimeError("a report failed"), MemoryError(), KeyboardInterrupt()],
                         ids=["error", "out-of-memory", "ctrl-c"])
def test_a_run_that_fails_half_way_leaves_the_previous_set(tmp_path: Path, references, monkeypatch,
                                                           error: BaseException) -> None:
    out = tmp_path / "out"
    shutil.copytree(references["old"], out)
    before = snapshot(out)
    from dlagg.writers import json_writer

    real = json_writer.report_chunks
    calls = []

    def fails_on_the_third(report, info, rows=None):
        calls.append(report.name)
        if len(calls) == 3:
            raise error
        return real(report, info, rows)

    monkeypatch.setattr(json_writer, "report_chunks", fails_on_the_third)
    with pytest.raises(type(error)):
        run(options(out, force=True))
    assert len(calls) > 3  # the other reports were written (staged) all the same, and never moved into place
    assert snapshot(out) == before and strays(out) == []


def test_a_commit_killed_half_way_is_finished_by_the_next_run(tmp_path: Path, references, monkeypatch) -> None:
    """The state a kill among the commit's renames leaves (the journal written, one unit moved), made
    deterministic; the next run, of another profile, finishes the moves and removes the old set's rest."""
    out = tmp_path / "out"
    shutil.copytree(references["old"], out)
    moved = []
    real = staging_module._move

    class Killed(BaseException):
        """Stops the commit where a kill -9 would (nothing of dlagg's runs after it)."""

    def moves_one(staged: Path, final: Path, trash: Path) -> None:
        if moved:
            raise Killed
        moved.append(final)
        real(staged, final, trash)

    monkeypatch.setattr(staging_module, "_move", moves_one)
    with pytest.raises(Killed):
        run(options(out, force=True, suppress_tb_files=True))
    monkeypatch.undo()
    (folder,) = [p for p in out.iterdir() if p.name.startswith(STAGING)]
    assert (folder / JOURNAL).exists()
    new = snapshot(references["new"])
    new = {k: v for k, v in new.items() if not k.startswith("event_files/")}
    assert which(snapshot(out), snapshot(references["old"]), new) == "mixed"  # one moved, the rest not yet
    dead = folder.with_name(f"{STAGING}.{HOST}.{dead_pid()}.abcdefgh")
    folder.rename(dead)  # as if its process had been killed
    said = io.StringIO()
    run(options(out, reports=("summary",), formats=("csv",), profile_name="next", suppress_tb_files=True),
        Log(stream=said))
    assert "finished moving into place the outputs of a run killed while it moved them" in said.getvalue()
    assert snapshot(out) == new and strays(out) == []
    assert not (out / "event_files").exists()  # the old set's event folder was removed: the set is -b's


def test_stale_staging_folders_and_old_temp_files_are_cleaned_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pid = dead_pid()
    killed = out / f"{STAGING}.{HOST}.{pid}.k1lled00"
    (killed / "files" / "event_files" / "dlagg").mkdir(parents=True)
    (killed / "files" / "dlagg_kernel.csv").write_text("half a report")
    running = out / f"{STAGING}.{HOST}.{os.getpid()}.running"  # this process: still running
    elsewhere = out / f"{STAGING}.otherhost.{pid}.remote00"  # another host's: cannot be checked from here
    for folder in (running, elsewhere):
        (folder / "files").mkdir(parents=True)
    legacy = [out / ".dlagg_kernel.csv.ab12cd34.tmp", out / "event_files" / ".dlagg.ab12cd34.tmp",
              out / "event_files" / ".dlagg.old.ab12cd34"]
    legacy[0].write_text("x")
    for folder in legacy[1:]:
        (folder / "sub").mkdir(parents=True)
    kept = [out / ".other_kernel.csv.ab12cd34.tmp", out / ".dlagg_kernel.csv.tmp"]  # another profile's; not ours
    for path in kept:
        path.write_text("x")
    said = io.StringIO()
    run(options(out, reports=("summary",), formats=("csv",)), Log(stream=said))
    text = said.getvalue()
    assert f"removed {killed.name}, the unfinished outputs of a run that was killed (process {pid})" in text
    assert f"left {elsewhere.name} alone: a run on host otherhost made it" in text
    assert "removed 3 temporary file(s) left by killed dlagg runs" in text
    assert not killed.exists() and not any(p.exists() for p in legacy)
    assert running.exists() and elsewhere.exists() and all(p.exists() for p in kept)
    old = time.time() - staging_module.OTHER_HOST_S - 60
    os.utime(elsewhere, (old, old))  # a day later: that run is over, whatever happened to it
    shutil.rmtree(running)
    run(options(out, reports=("summary",), formats=("csv",), force=True), Log(stream=io.StringIO()))
    assert not elsewhere.exists()


def test_a_reused_pid_does_not_keep_a_killed_runs_folder(tmp_path: Path) -> None:
    """The staging folder's pid is now this process's (pids are reused, in containers at once): it started
    after the folder was made, so the folder is a dead run's."""
    out = tmp_path / "out"
    folder = out / f"{STAGING}.{HOST}.{os.getpid()}.reused00"
    (folder / "files").mkdir(parents=True)
    started = staging_module.process_start(os.getpid())
    assert started is not None and abs(started - time.time()) < 24 * 3600
    made = started - 60  # a minute before this process started
    os.utime(folder, (made, made))
    run(options(out, reports=("summary",), formats=("csv",), suppress_tb_files=True), Log(stream=io.StringIO()))
    assert not folder.exists()


def test_per_rank_folders_are_part_of_the_set(tmp_path: Path, multi) -> None:
    db = multi("ddp2_gpt_one_session") / "ddp2_gpt_one_session.sqlite"
    out = tmp_path / "out"
    given = {"nsys_database": db, "reports": ("summary", "kernel"), "formats": ("csv",), "verbosity": "quiet",
             "suppress_tb_files": True, "output_path": out, "workers": 1}
    run(Options(**given, per_rank=True))
    ranks = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert ranks == ["rank0", "rank1"]
    assert sorted(p.name for p in (out / "rank0").iterdir()) == ["dlagg_kernel.csv", "dlagg_summary.csv"]
    (out / "rank1" / "mine.txt").write_text("kept")
    run(Options(**given, force=True))  # the new set has no per-rank files: the old ones go
    assert not (out / "rank0").exists() and sorted(p.name for p in (out / "rank1").iterdir()) == ["mine.txt"]
    assert sorted(snapshot(out)) == ["dlagg_kernel.csv", "dlagg_summary.csv"]


def test_ctrl_c_during_the_commit_lets_it_finish(tmp_path: Path, references, monkeypatch) -> None:
    out = tmp_path / "out"
    shutil.copytree(references["old"], out)
    real = staging_module._move
    interrupted = []

    def interrupted_once(staged: Path, final: Path, trash: Path) -> None:
        if not interrupted:
            interrupted.append(final)
            raise KeyboardInterrupt
        real(staged, final, trash)

    monkeypatch.setattr(staging_module, "_move", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        run(options(out, force=True, suppress_tb_files=True))
    new = {k: v for k, v in snapshot(references["new"]).items() if not k.startswith("event_files/")}
    assert snapshot(out) == new and strays(out) == []


@pytest.mark.parametrize(("code", "cause", "todo"), [
    (errno.ENOSPC, "the disk is full", "free some space or choose another --output_path"),
    (errno.EDQUOT, "the disk quota is used up", "free some space"),
    (errno.EFBIG, "a file would pass the file-size limit (ulimit -f)", "raise the limit (ulimit -f unlimited)"),
    (errno.EROFS, "the filesystem is read-only", "choose another --output_path"),
    (errno.EIO, os.strerror(errno.EIO), "choose another --output_path"),
])
def test_output_errors_name_the_folder_the_cause_and_what_to_do(code: int, cause: str, todo: str) -> None:
    message = str(output_error(OSError(code, os.strerror(code)), Path("/runs/out"), "the csv outputs"))
    assert message.startswith(f"/runs/out: cannot write the csv outputs: {cause}; the previous outputs are "
                              f"unchanged; {todo}") and "\n" not in message


def test_a_piece_or_part_that_cannot_be_saved_is_an_output_error(tmp_path: Path) -> None:
    """A report's TensorBoard piece, and a part of a big table, are saved in the staging folder by jobs of their
    own: an OSError there is the one output error that names the output folder, as for the files themselves."""
    fields = (Field("name", "Kernel Name"),)
    report = Report("kernel", "kernel", (Table("kernels", "Kernel Report", fields, pd.DataFrame({"name": ["k"]})),))
    gone = tmp_path / "staging-removed" / ".dlagg_kernel.tensorboard.piece"
    with pytest.raises(OutputError) as raised:
        writes_module.write_reports([], [report], tmp_path, Path("/runs/out"), INFO, None, {"tensorboard": gone})
    assert str(raised.value).startswith("/runs/out: cannot write the tensorboard outputs: ")
    part = writes_module.PartRows("csv", report.main, 0, 1, gone.with_suffix(".part"), Path("/runs/out"), INFO,
                                  ends=True)
    with pytest.raises(OutputError) as raised:  # so is a part of a big table, formatted by a job of its own
        writes_module.write_part(part)
    assert str(raised.value).startswith("/runs/out: cannot write the csv outputs: ")


# ---- a real file-size limit -------------------------------------------------------------------------------

def limited(limit: int):
    def set_limit() -> None:  # SIGXFSZ keeps its default action: dlagg itself must turn it into EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.parametrize("force", [True, False], ids=["force-over-a-set", "empty-folder"])
def test_a_file_size_limit_is_an_output_error_and_the_previous_set_stays(tmp_path: Path, references,
                                                                         force: bool) -> None:
    out = tmp_path / "out"
    if force:
        shutil.copytree(references["old"], out)
    before = snapshot(out) if force else {}
    sizes = sorted(p.stat().st_size for p in references["new"].glob("dlagg_*.*"))
    limit = sizes[len(sizes) // 2]  # some reports fit under it, the bigger ones do not
    done = subprocess.run(dlagg_command(args_for(out, "-b", "--formats=csv,json", "-v", "quiet",
                                                        *(["--force"] if force else []))),
                          capture_output=True, text=True, preexec_fn=limited(limit), timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"dlagg: error: {out}: cannot write the ") and \
        "a file would pass the file-size limit (ulimit -f); the previous outputs are unchanged; raise the limit" \
        in done.stderr, done.stderr
    assert (snapshot(out) if out.exists() else {}) == before and (not out.exists() or strays(out) == [])


@pytest.mark.parametrize("workers", [2, 1], ids=["pool-writes", "thread-writes"])
@pytest.mark.processes
def test_a_file_size_limit_in_a_job_of_ranks_is_one_output_error(tmp_path: Path, multi, workers: int) -> None:
    """A job of several ranks writes its reports on the pool's worker processes (--workers=2) or on a writer thread
    (--workers=1): past the limit both say the same one line, and nothing is left behind."""
    folder = multi("ddp2_gpt_per_rank")
    given = ["--reports=all", "--formats=csv,json", "-b", "-v", "quiet"]
    reference = tmp_path / "reference"
    done = subprocess.run(dlagg_command([f"--nsys_database={folder}", f"--output_path={reference}", *given]),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    sizes = sorted(p.stat().st_size for p in reference.glob("dlagg_*.*"))
    out = tmp_path / "out"
    done = subprocess.run(dlagg_command([f"--nsys_database={folder}", f"--output_path={out}", f"--workers={workers}",
                                         *given]), capture_output=True, text=True,
                          preexec_fn=limited(sizes[len(sizes) // 2]), timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"dlagg: error: {out}: cannot write the ") and \
        "a file would pass the file-size limit (ulimit -f); the previous outputs are unchanged" in done.stderr, \
        done.stderr
    assert not out.exists() or (snapshot(out) == {} and strays(out) == [])


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert condition()


STAGED_HERE = SimpleNamespace(folder=lambda out_dir: out_dir, record=lambda out_dir, paths: paths, commit=lambda: None)


def test_the_pool_writes_while_the_reports_are_merged_one_job_after_another(tmp_path: Path, monkeypatch) -> None:
    """On a pool of one worker process, a lane starts each write job as soon as the one before it has ended, while
    this process goes on merging (it never calls into the writes meanwhile); no two jobs run on the pool at once."""
    release = {name: threading.Event() for name in "abc"}
    started: list[str] = []

    def write(formats, reports, staged, out_dir, info, *rows_and_pieces):  # write_reports: waits to be released
        started.append(reports[0].name)
        assert release[reports[0].name].wait(30)
        return [("csv", [], 0.0)]

    monkeypatch.setattr(writes_module, "write_reports", write)
    with ThreadPoolExecutor(3) as pool, writes_module.Writes(Log(0), STAGED_HERE, pool, workers=1) as writes:
        for name in "abc":
            writes.submit(["csv"], [SimpleNamespace(name=name, tables=())], tmp_path, None)
        until(lambda: started == ["a"])
        time.sleep(0.05)
        assert started == ["a"]  # the pool has one process: b waits for a
        release["a"].set()
        until(lambda: started == ["a", "b"])  # started by the lane, not by a call of this process
        release["b"].set()
        until(lambda: started == ["a", "b", "c"])
        release["c"].set()
        writes.results(["csv"], list("abc"))
    assert started == ["a", "b", "c"]


def test_this_process_and_the_pool_share_the_waiting_jobs(tmp_path: Path, monkeypatch) -> None:
    """When the results are asked for, this process takes the waiting jobs too, from the lanes' queue: each job is
    written once, and the pool's worker goes on taking jobs while this process writes one (it never waits for
    this process)."""
    written: list[tuple[str, str]] = []  # report, thread that wrote it
    a_may_end = threading.Event()

    def write(formats, reports, staged, out_dir, info, *rows_and_pieces):  # stands for write_reports
        name = reports[0].name
        written.append((name, threading.current_thread().name))
        if name == "a":  # on the pool, until this process has taken b
            assert a_may_end.wait(30)
        if name == "b":  # in this process: the pool ends a and takes c meanwhile
            a_may_end.set()
            until(lambda: ("c", pool_thread) in written)
        return [("csv", [], 0.0)]

    monkeypatch.setattr(writes_module, "write_reports", write)
    with ThreadPoolExecutor(1) as pool, writes_module.Writes(Log(0), STAGED_HERE, pool, workers=1) as writes:
        pool_thread = pool.submit(lambda: threading.current_thread().name).result()
        for name in "abcd":
            writes.submit(["csv"], [SimpleNamespace(name=name, tables=())], tmp_path, None)
        until(lambda: [name for name, _ in written] == ["a"])
        writes.results(["csv"], list("abcd"))
    here = threading.main_thread().name
    assert sorted(name for name, _ in written) == list("abcd")
    assert dict(written)["a"] == pool_thread and dict(written)["b"] == here and dict(written)["c"] == pool_thread


def test_a_join_is_left_to_the_lane_while_a_job_of_this_process_waits(tmp_path: Path, monkeypatch) -> None:
    """The parts of a big report are all made while the pool's worker still writes another report, whose piece the
    TensorBoard job (a job only this process runs) waits for: this process leaves the join to the lane, free next,
    and runs its own job once the piece is made; it does not copy the parts while the lane waits."""
    ran: dict[str, str] = {}  # job -> thread that ran it

    def job(name: str, seconds: float = 0.0) -> Callable[..., list]:
        def task(*_: object) -> list:
            ran[name] = threading.current_thread().name
            time.sleep(seconds)
            return []
        return task

    join = job("join")
    monkeypatch.setattr(writes_module, "join_parts", join)
    part, piece = tmp_path / "part", tmp_path / "piece"
    with ThreadPoolExecutor(1) as pool, writes_module.Writes(Log(0), STAGED_HERE, pool, workers=1) as writes:
        pool_thread = pool.submit(lambda: threading.current_thread().name).result()
        writes._queue(WriteTask("collectives", tmp_path, job("collectives", 0.3), (), makes=(piece,)))
        until(lambda: "collectives" in ran)  # the lane is busy
        writes._queue(WriteTask("iteration", tmp_path, job("part"), (), makes=(part,)))  # for this process
        writes._queue(WriteTask("iteration", tmp_path, join, (), after=(part,)))
        writes._queue(WriteTask("tensorboard", tmp_path, job("tensorboard"), (), after=(piece,)))
        writes.results(["csv"], [])
    here = threading.main_thread().name
    assert ran["part"] == here and ran["join"] == pool_thread and ran["tensorboard"] == here


def test_writes_end_before_the_staging_folder_goes_when_the_run_fails(tmp_path: Path, monkeypatch) -> None:
    """A run that fails while a write job runs leaves the ``with`` of its writes only once that job has ended (the
    staging folder is removed next); the jobs not yet started never start."""
    started: list[str] = []
    ended: list[str] = []

    def write(formats, reports, staged, out_dir, info, *rows_and_pieces):  # stands for write_reports: a slow job
        started.append(reports[0].name)
        time.sleep(0.3)
        ended.append(reports[0].name)
        return []

    monkeypatch.setattr(writes_module, "write_reports", write)
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(RuntimeError, match="the merge failed"):
            with writes_module.Writes(Log(0), STAGED_HERE, pool, workers=1) as writes:
                for name in "ab":
                    writes.submit(["csv"], [SimpleNamespace(name=name, tables=())], tmp_path, None)
                deadline = time.monotonic() + 30
                while not started and time.monotonic() < deadline:
                    time.sleep(0.005)
                raise RuntimeError("the merge failed")
        assert ended == ["a"]  # ended before the with was left
    assert started == ["a"]

# ---- a real full disk ---------------------------------------------------------------------------------------

def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_full_disk_is_an_output_error_and_the_previous_set_stays(tmp_path: Path, references) -> None:
    """A real tmpfs too small for the new set, mounted in a user namespace (``unshare -rm``, no root needed
    where the kernel allows unprivileged namespaces; skipped where it does not): --force over the old set."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "-rm", "true"], capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no user namespaces here (unshare -rm): a small tmpfs cannot be mounted without root")
    disk = tmp_path / "disk"
    disk.mkdir()
    old_size, new_size = folder_bytes(references["old"]), folder_bytes(references["new"])
    size_kb = (old_size + new_size // 2) // 1024  # the old set fits, old and new together do not
    out = disk / "out"
    command = " ".join(f"'{a}'" for a in dlagg_command(args_for(out, "-v", "quiet", "--force")))
    script = (f"mount -t tmpfs -o size={size_kb}k tmpfs '{disk}' && cp -r '{references['old']}' '{out}' && "
              f"{command}; echo \"status=$?\"; cd '{out}' && find . -type f -exec md5sum {{}} + | sort")
    done = subprocess.run([unshare, "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert "status=1" in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"dlagg: error: {out}: cannot write the ") and "the disk is full" in done.stderr
    listed = done.stdout.split("status=1", 1)[1].split()
    after = dict(zip(listed[1::2], listed[0::2], strict=True))  # ./name -> md5 in the full tmpfs after the run
    old = subprocess.run(f"cd '{references['old']}' && find . -type f -exec md5sum {{}} + | sort", shell=True,
                         capture_output=True, text=True, check=True).stdout.split()
    assert after == dict(zip(old[1::2], old[0::2], strict=True))  # the old set, whole, and nothing else


# ---- kill -9 at random moments -----------------------------------------------------------------------------

def run_trials(tmp_path: Path, references: dict[str, Path], count: int, seed: int, triggers: tuple[str, ...],
               parallel: int) -> list[Trial]:
    """`count` real runs killed at random (seeded) moments after their `triggers` (in turn), `parallel` at a time:
    every other one with --force over the old set, the others into an empty folder; each folder checked after
    the kill and after the next run."""
    old, new = snapshot(references["old"]), snapshot(references["new"])
    seconds = timed_run(args_for(tmp_path / "timed")) if "start" in triggers else 0.0
    chance = random.Random(seed)
    plans = []
    for k in range(count):
        force, trigger = k % 2 == 0, triggers[(k // 2) % len(triggers)]
        folder = tmp_path / f"trial{k}"
        shutil.copytree(references["old"], folder) if force else folder.mkdir()
        plans.append(Plan(folder, args_for(folder, *(["--force"] if force else [])), trigger,
                          draw(trigger, chance, seconds), old if force else {}))
    trials = kill_trials(plans, new, recording(DB), parallel)
    for k, trial in enumerate(trials):
        assert trial.after_next_run in ("old", "new", "old=new"), (k, trial)
        if trial.phase != "journal":  # before the journal the old set is untouched; after the moves, the new one
            assert trial.after_kill == trial.after_next_run, (k, trial)
        if trial.phase in ("staging", "journal"):
            assert trial.cleanup_said, (k, trial)
        assert strays(trial.plan.folder) == [], (k, trial, strays(trial.plan.folder))
        shutil.rmtree(trial.plan.folder)
    return trials


@pytest.mark.processes
def test_kill_9_at_random_moments_leaves_one_complete_set(tmp_path: Path, references) -> None:
    """Four real runs at once (two with --force over the old set, two into an empty folder) killed at seeded
    random moments of their writing and of their commit (within 2 ms of the journal's appearance); the slow
    variant below covers whole runs."""
    trials = run_trials(tmp_path, references, count=4, seed=17, triggers=("staging", "journal"), parallel=4)
    assert len(trials) == 4 and all(t.plan.trigger in ("staging", "journal") for t in trials)


@pytest.mark.slow
def test_kill_9_many_trials(tmp_path: Path, references) -> None:
    """python -m pytest -m slow -s tests/test_outputs.py -k many: DLAGG_KILL_TRIALS trials (default 96, two at a
    time), a quarter each after the start, the staging folder's appearance, the staged event folder's and the
    journal's; prints what the kills hit."""
    count = int(os.environ.get("DLAGG_KILL_TRIALS", "96"))
    began = time.perf_counter()
    trials = run_trials(tmp_path, references, count=count, seed=int(os.environ.get("DLAGG_KILL_SEED", "1")),
                        triggers=TRIGGERS, parallel=2)
    tally: dict[str, int] = {}
    for trial in trials:
        force = "--force" in trial.plan.args
        named = {"old": "old" if force else "none"}  # into an empty folder, the "old set" is no file at all
        key = (f"{'--force over the old set' if force else 'empty folder':<24} kill after {trial.plan.trigger:<7}: "
               f"left {trial.phase:<10} {named.get(trial.after_kill, trial.after_kill):>5} -> after the next run "
               f"{named.get(trial.after_next_run, trial.after_next_run)}")
        tally[key] = tally.get(key, 0) + 1
    print(f"\n{len(trials)} kill -9 trials in {time.perf_counter() - began:.0f} s, each left one complete set:")
    for key, n in sorted(tally.items()):
        print(f"  {n:4d}  {key}")


# ---- paths ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../x", "sub/dir", "a\\b", "", ".", "..", "a\nb", "tab\there", "bell\x07",
                                  "/abs/x", "x" * 250])
def test_profile_name_is_a_file_name_prefix(tmp_path: Path, capsys, name: str) -> None:
    out = tmp_path / "deep" / "out"
    code, _, err = dlagg(capsys, f"--nsys_database={recording(DB)}", f"--output_path={out}", "--reports=all",
                         f"--profile_name={name}")
    assert code == 2 and err.count("\n") == 1 and err.startswith("dlagg: error: --profile_name"), err
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == []


def test_baseline_profile_name_is_checked_too(tmp_path: Path) -> None:
    from dlagg.options import Baseline

    with pytest.raises(OptionsError, match="--baseline_profile_name='../up'"):
        run(options(tmp_path, baseline=Baseline(recording(DB), profile_name="../up")))


@pytest.mark.parametrize("tb_dir", ["../x", "../../x", "a/../../x", ""])
def test_relative_tb_dir_stays_inside_the_output_folder(tmp_path: Path, capsys, tb_dir: str) -> None:
    out = tmp_path / "out"
    code, _, err = dlagg(capsys, f"--nsys_database={recording(DB)}", f"--output_path={out}", "--reports=summary",
                         f"--tb_dir={tb_dir}")
    assert code == 2 and err.count("\n") == 1 and err.startswith("dlagg: error: --tb_dir"), err
    assert list(tmp_path.iterdir()) == []


def test_tb_dir_inside_and_absolute(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, _, err = dlagg(capsys, f"--nsys_database={recording(DB)}", f"--output_path={out}", "--reports=summary",
                         "--tb_dir=tb/../runs")
    assert code == 0, err
    assert list((out / "runs" / "dlagg").glob("events.out.tfevents.*"))
    elsewhere = tmp_path / "shared_tb"
    code, _, err = dlagg(capsys, f"--nsys_database={recording(DB)}", f"--output_path={out}", "--reports=summary",
                         f"--tb_dir={elsewhere}", "--force")
    assert code == 0, err
    assert f"event files go to {elsewhere / 'dlagg'} (an absolute --tb_dir, outside --output_path)" in err
    assert len(list((elsewhere / "dlagg").glob("events.out.tfevents.*"))) == 1
    assert strays(elsewhere) == [] and strays(out) == [] and sorted(p.name for p in elsewhere.iterdir()) == ["dlagg"]
    # the profile's set is its event folder under the current --tb_dir: the one under the earlier --tb_dir stays
    assert (out / "runs" / "dlagg").is_dir()
