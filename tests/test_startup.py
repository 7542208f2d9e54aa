"""Start-up: what --help and a bad option load, and SIGINT or SIGTERM at any moment of a run (issues 45 §4, 46 §4).

Nothing here is timed (benchmarks/bench_startup.py measures): the import tests read which modules a process loaded,
and the signal tests send their signal at moments found by watching the process (its handlers in place, the export
open, outputs being staged), not after fixed sleeps alone, so that a loaded machine only makes them slower.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlagg.options import FILE_FORMATS, REPORT_DESCRIPTIONS
from dlagg.pipeline import format_choices
from dlagg.reports import REPORTS
from dlagg.reports.base import choices

from .conftest import recording

HEAVY = ("pandas", "numpy", "pyarrow")
LIGHT_RUNS = {  # command lines that end before any run starts, and their exit status
    "help": (["--help"], 0),
    "version": (["--version"], 0),
    "unknown option": (["--output=x"], 2),
    "bad value": (["--workers=0"], 2),
    "bad choice": (["--verbosity=loud"], 2),
    "needs baseline": (["--fail_if_slower=5"], 2),
    "nothing to read": ([], 2),
}
DEADLINE = 120.0  # seconds a watched run may take on the slowest machine before the test gives up on it


def test_the_help_lists_what_the_registries_hold() -> None:
    """--help's report list and --formats' choices are plain data (dlagg/options.py), so that the parser loads no
    report or writer module; they must say what the registries hold."""
    assert REPORT_DESCRIPTIONS == {name: REPORTS[name].description for name in choices()}
    assert list(FILE_FORMATS) == format_choices()


@pytest.mark.parametrize("case", sorted(LIGHT_RUNS))
def test_cli_main_without_a_run_loads_no_pandas_numpy_or_pyarrow(case: str) -> None:
    argv, code = LIGHT_RUNS[case]
    script = ("import sys, dlagg.cli\n"
              "try:\n"
              f"    code = dlagg.cli.main({argv!r})\n"
              "except SystemExit as exc:\n"
              "    code = exc.code\n"
              f"print('loaded', code, *sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE)
    last = done.stdout.splitlines()[-1].split()
    assert last[:2] == ["loaded", str(code)], done.stdout + done.stderr
    assert last[2:] == [], f"dlagg {' '.join(argv)} loaded {last[2:]}"


@pytest.mark.parametrize("case", sorted(LIGHT_RUNS))
def test_the_command_without_a_run_loads_no_pandas_numpy_or_pyarrow(case: str) -> None:
    """The whole command (``python -m dlagg``: its process settings, the pool's check, the CLI), read from
    -X importtime's list since the command ends with os._exit."""
    argv, code = LIGHT_RUNS[case]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlagg", *argv], capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == code, done.stderr
    loaded = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
              if line.startswith("import time:")}
    assert "dlagg" in loaded and not loaded & set(HEAVY), f"dlagg {' '.join(argv)} loaded {loaded & set(HEAVY)}"


# ---- SIGINT and SIGTERM ------------------------------------------------------------------------------------------

needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="watches the run through /proc")


def caught(pid: int) -> int:
    """The signals `pid` has handlers for (/proc/<pid>/status SigCgt); 0 once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)


def handlers_in_place(pid: int) -> bool:
    """dlagg's handlers are installed (the first thing dlagg/__main__.py does): SIGTERM is caught. Before that, the
    interpreter is still starting (about 30 ms) and no program of its own can say anything."""
    return bool(caught(pid) & (1 << (signal.SIGTERM - 1)))


def has_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # a descriptor closed meanwhile, or the process gone
        return False


def staging_with_files(out: Path) -> bool:
    try:
        return any(folder.name.startswith(".dlagg-staging") and any(folder.iterdir()) for folder in out.iterdir())
    except OSError:
        return False


Moment = Callable[[int, Path, Path, float], bool]  # (pid, export, output folder, seconds since the start): now?


def after(seconds: float) -> Moment:
    """`seconds` after the start, once dlagg's handlers are in place."""
    return lambda pid, _export, _out, elapsed: elapsed >= seconds and handlers_in_place(pid)


MOMENTS: dict[str, Moment] = {
    "0.05 s (start-up)": after(0.05),
    "0.2 s (importing pandas and pyarrow)": after(0.2),
    "reading the export": lambda pid, export, _out, _elapsed: handlers_in_place(pid) and has_open(pid, export),
    "writing the outputs": lambda _pid, _export, out, _elapsed: staging_with_files(out),
}


def interrupt(export: Path, out: Path, moment: Moment, signum: int, group: bool = False
              ) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run the command on `export` (in a session of its own), send `signum` at `moment` (polled) to it or, with
    `group`, to its whole process group as a terminal's Ctrl-C does, and wait for it; whether it was sent."""
    command = [sys.executable, "-m", "dlagg", f"--nsys_database={export}", "--reports=all", "--formats=all",
               f"--output_path={out}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    start = time.monotonic()
    sent = False
    try:
        while process.poll() is None and time.monotonic() - start < DEADLINE:
            if moment(process.pid, export, out, time.monotonic() - start):
                if group:
                    os.killpg(process.pid, signum)
                else:
                    process.send_signal(signum)
                sent = True
                break
            time.sleep(0.002)
        stdout, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        try:  # the pool's processes, if any outlived it (not this test's business)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), sent


def assert_one_line(done: subprocess.CompletedProcess[str], sent: bool, signum: int, out: Path) -> None:
    assert sent, f"the run ended (status {done.returncode}) before the moment came: {done.stderr[-500:]}"
    name = signal.Signals(signum).name
    line = f"dlagg: interrupted ({name}); no partial output was left behind"
    assert done.stderr.endswith(line + "\n") and done.stderr.count("interrupted") == 1, done.stderr
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr  # (the lines before: progress)
    assert done.returncode == 128 + signum
    assert done.stdout == ""
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert left == [], f"left behind in {out}: {left}"


@needs_proc
@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_at_any_moment_ends_the_run_with_one_line(moment: str, signum: int, tmp_path: Path) -> None:
    """SIGINT or SIGTERM, during the imports, the reading or the writing: one line, 128 + the signal (130, 143), no
    traceback, and no output left behind (the output folder, which did not exist, is not left either)."""
    export = recording("resnet_amp")  # the largest bundled recording: a run of about a second
    out = tmp_path / "out"
    done, sent = interrupt(export, out, MOMENTS[moment], signum)
    assert_one_line(done, sent, signum, out)


@needs_proc
@pytest.mark.processes
@pytest.mark.parametrize("moment", ["0.1 s (the fork server importing)", "reading the ranks"])
def test_ctrl_c_at_the_terminal_during_a_pooled_run_is_one_line(moment: str, multi, tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the pool's fork server too: while it imports dlagg it must not print a
    KeyboardInterrupt traceback (nor leave dlagg in status 3); dlagg says the one line."""
    folder = multi("ddp2_gpt_per_rank")  # two files: the fork server starts first thing (dlagg/__main__.py)
    rank0 = sorted(folder.glob("*.sqlite"))[0]
    moments: dict[str, Moment] = {
        "0.1 s (the fork server importing)": after(0.1),
        "reading the ranks": lambda pid, _export, _out, _elapsed: handlers_in_place(pid) and has_open(pid, rank0),
    }
    out = tmp_path / "out"
    done, sent = interrupt(folder, out, moments[moment], signal.SIGINT, group=True)
    assert_one_line(done, sent, signal.SIGINT, out)


@pytest.mark.parametrize("signalled", [True, False], ids=["signal received", "no signal"])
def test_an_interruption_a_library_turned_into_its_own_error_is_still_the_one_line(
        signalled: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The handler's KeyboardInterrupt, raised while numpy's extension module initialises under pandas' import, comes
    out as pandas' ImportError: the run ends as interrupted all the same. The same error with no signal is a bug."""
    from dlagg import cli, errors

    monkeypatch.setattr(errors, "_RECEIVED", [])

    def import_stopped() -> None:
        try:
            if signalled:
                errors.on_signal(signal.SIGINT, None)
            raise ImportError("numpy's extension module failed to initialise")
        except ImportError as exc:  # what pandas does with any error of numpy's import
            raise ImportError("Unable to import required dependency numpy.") from exc
        except KeyboardInterrupt as exc:
            raise ImportError("Unable to import required dependency numpy.") from exc

    monkeypatch.setattr(cli, "_pipeline", import_stopped)
    code = cli.main([f"--nsys_database={recording('resnet_amp')}", f"--output_path={tmp_path / 'out'}"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    if signalled:
        assert (code, last) == (130, "dlagg: interrupted (SIGINT); no partial output was left behind")
    else:
        assert code == 3 and last.startswith("dlagg: internal error on resnet_amp.sqlite: ImportError: Unable"), last
    assert not (tmp_path / "out").exists()
