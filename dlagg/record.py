"""Run a training program under Nsight Systems and export its SQLite file, as ``dlprof python train.py`` did.

Contract: ``ready(program) -> nsys`` (nsys found, the program runnable), then
``record(nsys, program, recording, log) -> Recorded``, which runs

    nsys profile <--nsys_opts> [--delay=S] [--duration=S] [--capture-range=cudaProfilerApi]
                 [--force-overwrite=true] --output=<output_path>/<nsys_base_name> <program ...>
    nsys export --type sqlite [--force-overwrite=true] --output=<...>.sqlite <...>.nsys-rep

and returns the export's path and the program's exit status (``nsys profile`` returns the
program's). The program's stdin, stdout and stderr are this process's: its output reaches the
terminal as it is written. While it runs, Ctrl-C goes to the program (and nsys, which then writes
the report of what it recorded), not to dlagg, which goes on to export and aggregate that report.

Nothing is overwritten without ``force``: the report and export names are checked before the
program starts (``check_targets``), so that a long training run never ends in "file exists".

Every failure is a `RecordError` (one line: what failed, what to do); its exit code is the
program's status when the program failed, else 1.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import OptionsError, OutputError, RecordError
from .log import Log

# DLProf's default: CUDA API and kernels plus NVTX ranges, no CPU sampling (what dlagg reads; sampling
# would only make the report larger).
DEFAULT_NSYS_OPTS = "-t cuda,nvtx -s none"
DEFAULT_BASE_NAME = "nsys_profile"  # DLProf's
# nsys names its report <output>.nsys-rep (2021.4 and later) or <output>.qdrep (before).
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
# What dlagg reads from each nsys trace, and what an export without it lacks.
NEEDED_TRACES = {"cuda": "no kernels, memory operations or CUDA API calls (most reports empty)",
                 "nvtx": "no NVTX ranges (no iterations, no ops)"}
INSTALL_HINT = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the CUDA toolkit's "
                "nsight-systems package) and put its nsys on PATH, or record yourself with 'nsys profile -t cuda,nvtx "
                "-s none -o run python train.py && nsys export --type sqlite run.nsys-rep' and pass "
                "--nsys_database=run.sqlite")


@dataclass(frozen=True)
class Recording:
    """How to run the program under nsys (DLProf's --nsys_opts, --nsys_base_name, --delay, --duration,
    --nsys_profile_range) and where the report and its export go."""

    output_path: Path = Path(".")
    base_name: str = DEFAULT_BASE_NAME
    nsys_opts: str = DEFAULT_NSYS_OPTS
    delay: int | None = None  # seconds before collection starts
    duration: int | None = None  # seconds of collection (None or 0: until the program ends)
    profile_range: bool = False  # collect between the program's cudaProfilerStart and cudaProfilerStop only
    force: bool = False  # overwrite an existing report or export

    @property
    def base(self) -> Path:
        return self.output_path / self.base_name

    @property
    def sqlite(self) -> Path:
        return self.base.with_name(self.base_name + ".sqlite")

    def reports(self) -> list[Path]:
        """The report names nsys may write (its suffix depends on the nsys version)."""
        return [self.base.with_name(self.base_name + suffix) for suffix in REPORT_SUFFIXES]


@dataclass(frozen=True)
class Recorded:
    report: Path  # the nsys report (.nsys-rep or .qdrep)
    sqlite: Path  # its SQLite export, dlagg's input
    status: int  # nsys profile's exit status, which is the program's (128 + N when a signal N ended nsys)


def nsys_options(recording: Recording) -> list[str]:
    """The --nsys_opts words, checked against what dlagg adds itself (a conflict is an OptionsError)."""
    try:
        words = shlex.split(recording.nsys_opts)
    except ValueError as exc:
        raise OptionsError(f"--nsys_opts='{recording.nsys_opts}' cannot be split into words ({exc}); check its "
                           "quotes") from None
    owned = {("-o", "--output"): "dlagg names the report from --output_path and --nsys_base_name",
             ("-y", "--delay"): "pass --delay (or -y) to dlagg instead" if recording.delay is not None else "",
             ("-d", "--duration"): "pass --duration (or -d) to dlagg instead" if recording.duration else "",
             ("-c", "--capture-range"): "--nsys_profile_range=true sets it" if recording.profile_range else "",
             ("-f", "--force-overwrite"): "pass --force=true to dlagg instead" if recording.force else ""}
    for flags, why in owned.items():
        if why and _given(words, *flags):
            raise OptionsError(f"--nsys_opts: leave {'/'.join(flags)} out: {why}")
    return words


def trace_warnings(words: Sequence[str]) -> list[str]:
    """What a -t/--trace list in --nsys_opts leaves out that dlagg needs (nsys's own default traces both)."""
    traced = _value(words, "-t", "--trace")
    if traced is None:
        return []
    apis = {a.strip() for a in traced.split(",")}
    return [f"--nsys_opts traces '{traced}' without {api}: the export will have {what}; add it (-t {traced},{api})"
            for api, what in NEEDED_TRACES.items() if api not in apis]


def profile_command(nsys: str, program: Sequence[str], recording: Recording) -> list[str]:
    command = [nsys, "profile", *nsys_options(recording)]
    if recording.delay is not None:
        command.append(f"--delay={recording.delay}")
    if recording.duration:
        command.append(f"--duration={recording.duration}")
    if recording.profile_range:
        command.append("--capture-range=cudaProfilerApi")
    if recording.force:
        command.append("--force-overwrite=true")
    return [*command, f"--output={recording.base}", *program]


def export_command(nsys: str, report: Path, recording: Recording) -> list[str]:
    return [nsys, "export", "--type", "sqlite", *(["--force-overwrite=true"] if recording.force else []),
            f"--output={recording.sqlite}", str(report)]


def find_nsys() -> str:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise RecordError(f"running a program needs Nsight Systems' nsys, which is not on PATH: {INSTALL_HINT}")
    return nsys


def check_program(program: Sequence[str]) -> None:
    """The program exists and can be run (a typo is caught before nsys starts)."""
    name = program[0]
    if os.sep in name or (os.altsep and os.altsep in name):
        path = Path(name)
        if not path.is_file():
            raise RecordError(f"{name}: no such program; check the path (dlagg [options] python train.py)")
        if not os.access(path, os.X_OK):
            hint = f"python {name}" if path.suffix == ".py" else f"its interpreter, e.g. sh {name}"
            raise RecordError(f"{name}: not executable; run it through {hint}")
    elif shutil.which(name) is None:
        hint = (f"; a Python script runs as 'dlagg [options] python {name}'" if name.endswith(".py") else
                "; check the spelling, or give its path")
        raise RecordError(f"{name}: no such program on PATH{hint}")


def check_targets(recording: Recording) -> None:
    """Without force, neither the report nor the export may exist yet (checked before the program runs)."""
    if not recording.force:
        for path in (*recording.reports(), recording.sqlite):
            if path.exists():
                raise OutputError(f"{path}: already exists; pass --force=true to overwrite it, or choose another "
                                  "--nsys_base_name / --output_path")
    try:
        recording.output_path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{recording.output_path}: cannot create the output folder ({exc.strerror}); choose "
                          "another --output_path") from None


def ready(program: Sequence[str]) -> str:
    """nsys's path, once it is found and `program` can be run (checked before anything is written)."""
    nsys = find_nsys()
    check_program(program)
    return nsys


def record(nsys: str, program: Sequence[str], recording: Recording, log: Log) -> Recorded:
    """Run `program` under `nsys` profile, then export the report to SQLite (see the module docstring)."""
    check_targets(recording)
    command = profile_command(nsys, program, recording)
    log.info(f"running {shlex.join(command)}")
    status = _run(command)
    found = [p for p in recording.reports() if p.exists()]
    if not found:
        raise RecordError(f"nsys profile exited with status {status} and wrote no report ({recording.base}"
                          f"{REPORT_SUFFIXES[0]}); see nsys's messages above", exit_code=status or 1)
    report = found[0]
    if status != 0:
        log.info(f"the program exited with status {status}; aggregating what nsys recorded until then")
    export = export_command(nsys, report, recording)
    log.info(f"exporting {shlex.join(export)}")
    done = subprocess.run(export, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0 or not recording.sqlite.is_file():
        raise RecordError(f"nsys export exited with status {done.returncode} on {report}; see its messages above "
                          f"(the report stays: export it with 'nsys export --type sqlite {report}' and pass "
                          "--nsys_database)", exit_code=status or 1)
    return Recorded(report, recording.sqlite, status)


def _run(command: list[str]) -> int:
    """`command`'s exit status; a signal N that ended it gives 128 + N (the shell's convention)."""
    try:
        with _sigint_to_child():
            status = subprocess.Popen(command).wait()
    except OSError as exc:
        raise RecordError(f"cannot run {command[0]} ({exc.strerror}); {INSTALL_HINT}") from None
    return 128 - status if status < 0 else status


@contextmanager
def _sigint_to_child() -> Iterator[None]:
    """Ctrl-C reaches the child (same process group) and nsys then finishes its report; dlagg ignores it
    meanwhile, as a shell does for the command it waits on."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals cannot be changed here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _given(words: Sequence[str], short: str, long: str) -> bool:
    return any(w == short or w == long or w.startswith(long + "=") or (w.startswith(short) and len(w) > len(short)
                                                                        and not w.startswith("--"))
               for w in words)


def _value(words: Sequence[str], short: str, long: str) -> str | None:
    """The value of an option in nsys's word list (-t x, -tx, --trace x, --trace=x); the last one counts."""
    value = None
    for i, word in enumerate(words):  # a few words
        if word in (short, long) and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith(long + "="):
            value = word[len(long) + 1:]
        elif word.startswith(short) and not word.startswith("--") and len(word) > len(short):
            value = word[len(short):].lstrip("=")
    return value
