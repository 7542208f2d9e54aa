"""DLProf's command line in full: every DLProf v1.8 option accepted, the program run under a
stand-in nsys, no abbreviations, unknown options named, the default reports, a mistyped key node that
cannot be missed, --strict, and GPU work outside every iteration counted."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from dlagg.cli import DLPROF_ONLY, MODES, build_parser
from dlagg.log import Log
from dlagg.record import DEFAULT_NSYS_OPTS

from .builders import ExportBuilder
from .conftest import dlagg, recording

# A stand-in for Nsight Systems' nsys: checks its arguments as nsys would (the options dlagg may pass,
# each with its value, the output given once, the program last), runs the program with its output and
# exit status passed through, writes a report, and exports by copying the fixture named in
# $FAKE_NSYS_FIXTURE. Every call is appended to $FAKE_NSYS_LOG as JSON. $FAKE_NSYS_NO_REPORT: the profile
# writes no report; $FAKE_NSYS_EXPORT_FAILS: the export fails.
STAND_IN = r'''#!{python}
import json, os, shutil, subprocess, sys

WITH_VALUE = {{"-t", "--trace", "-s", "--sample", "-o", "--output", "-y", "--delay", "-d", "--duration",
               "-c", "--capture-range", "-f", "--force-overwrite", "--capture-range-end", "--cpuctxsw", "--type"}}
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")


def fail(message):
    print(f"stand-in nsys: {{message}}", file=sys.stderr)
    sys.exit(1)


def options(words):
    """({{option: value}}, the rest) of nsys-style words: -x v, --long=v, --long v."""
    found, i = {{}}, 0
    while i < len(words) and words[i].startswith("-"):
        name, eq, value = words[i].partition("=")
        if name not in WITH_VALUE:
            fail(f"unknown option {{words[i]}}")
        if not eq:
            i += 1
            if i == len(words):
                fail(f"{{name}} needs a value")
            value = words[i]
        if name in found:
            fail(f"{{name}} given twice")
        found[name] = value
        i += 1
    return found, words[i:]


if args[:1] == ["profile"]:
    opts, program = options(args[1:])
    output = opts.get("--output") or opts.get("-o") or fail("no --output")
    if not program:
        fail("no program to profile")
    report = output + ".nsys-rep"
    if os.path.exists(report) and opts.get("--force-overwrite") != "true":
        fail(f"{{report}} exists (use --force-overwrite true)")
    status = subprocess.run(program).returncode
    if not os.environ.get("FAKE_NSYS_NO_REPORT"):
        with open(report, "w") as out:
            out.write("stand-in report\n")
    sys.exit(status)
if args[:1] == ["export"]:
    opts, rest = options(args[1:])
    if opts.get("--type") != "sqlite":
        fail("export --type sqlite expected")
    if len(rest) != 1 or not os.path.exists(rest[0]):
        fail(f"export needs one existing report, got {{rest}}")
    output = opts.get("--output") or fail("no --output")
    if os.path.exists(output) and opts.get("--force-overwrite") != "true":
        fail(f"{{output}} exists")
    if os.environ.get("FAKE_NSYS_EXPORT_FAILS"):
        fail("export failed")
    shutil.copy(os.environ["FAKE_NSYS_FIXTURE"], output)
    sys.exit(0)
fail(f"unexpected command {{args}}")
'''


@pytest.fixture
def nsys(tmp_path: Path, monkeypatch) -> Path:
    """The stand-in nsys first on PATH, exporting cuda_basic; returns its call log."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nsys"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    calls = tmp_path / "nsys_calls.jsonl"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_LOG", str(calls))
    monkeypatch.setenv("FAKE_NSYS_FIXTURE", str(recording("cuda_basic")))
    return calls


def calls_of(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def program(*lines: str) -> list[str]:
    """A Python program as a command line (the interpreter running these lines)."""
    return [sys.executable, "-c", "; ".join(lines)]


# ---- the program run under nsys ---------------------------------------------------------------------

def test_a_program_runs_under_nsys_with_dlprofs_defaults_and_is_aggregated(nsys: Path, tmp_path: Path,
                                                                            capfd) -> None:
    out = tmp_path / "out"
    code, stdout, err = dlagg(capfd, "--reports=summary,kernel", f"--output_path={out}", "-b",
                              *program("print('hello from train.py')"))
    assert code == 0, err
    profile, export = calls_of(nsys)
    base = str(out / "nsys_profile")
    assert profile == ["profile", *DEFAULT_NSYS_OPTS.split(), f"--output={base}", *program("print('hello from "
                                                                                              "train.py')")]
    assert export == ["export", "--type", "sqlite", f"--output={base}.sqlite", f"{base}.nsys-rep"]
    assert "hello from train.py" in stdout  # the program's output reaches the terminal
    assert (out / "nsys_profile.nsys-rep").exists() and (out / "nsys_profile.sqlite").exists()
    assert (out / "nsys_profile.sqlite").read_bytes() == recording("cuda_basic").read_bytes()
    with (out / "dlagg_summary.csv").open() as f:  # the export was aggregated: 10 train_step iterations
        rows = {r[0]: r[1:] for r in csv.reader(f) if r}
    assert rows["Total Iterations"] == ["10"]
    assert (out / "dlagg_kernel.csv").exists()


def test_dlprof_recording_options_reach_nsys(nsys: Path, tmp_path: Path, capfd) -> None:
    """--nsys_opts, --nsys_base_name, -y/--delay, -d/--duration, --nsys_profile_range as DLProf passed them."""
    code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path}", "-b", "--nsys_opts=-t cuda,nvtx,osrt "
                         "-s none --cpuctxsw=none", "--nsys_base_name=run1", "-y=10", "--duration", "120",
                         "--nsys_profile_range=true", "--", *program("pass"))
    assert code == 0, err
    profile, export = calls_of(nsys)
    assert profile == ["profile", "-t", "cuda,nvtx,osrt", "-s", "none", "--cpuctxsw=none", "--delay=10",
                       "--duration=120", "--capture-range=cudaProfilerApi", f"--output={tmp_path / 'run1'}",
                       *program("pass")]
    assert export[-2:] == [f"--output={tmp_path / 'run1.sqlite'}", str(tmp_path / "run1.nsys-rep")]
    assert (tmp_path / "run1.sqlite").exists() and (tmp_path / "dlagg_summary.csv").exists()


def test_program_arguments_stay_the_programs(nsys: Path, tmp_path: Path, capfd) -> None:
    """Everything after the program's first word is the program's, options dlagg knows included; an
    optional boolean (-b, -f) does not swallow the program's name."""
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('ARGS', sys.argv[1:])\n")
    code, stdout, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path / 'o'}", "-b", sys.executable,
                              str(script), "--output=x", "--reports=none", "-f")
    assert code == 0, err
    assert "ARGS ['--output=x', '--reports=none', '-f']" in stdout
    assert calls_of(nsys)[0][-5:] == [sys.executable, str(script), "--output=x", "--reports=none", "-f"]


def test_the_programs_failure_is_passed_on_after_the_reports(nsys: Path, tmp_path: Path, capfd) -> None:
    code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path}", "-b",
                         *program("print('step 1')", "raise SystemExit(7)"))
    assert code == 7
    assert (tmp_path / "dlagg_summary.csv").exists()  # what was recorded is aggregated
    assert "the program exited with status 7" in err


def test_no_report_from_nsys_is_one_line_with_the_programs_status(nsys: Path, tmp_path: Path, capfd,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_NO_REPORT", "1")
    code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path}", "-b", "-v", "quiet",
                         *program("raise SystemExit(5)"))
    assert code == 5
    assert err.count("\n") == 1 and err.startswith("dlagg: error: nsys profile exited with status 5 and wrote no "
                                                   "report")
    assert len(calls_of(nsys)) == 1  # no export of a report that does not exist


def test_a_failed_export_is_one_line(nsys: Path, tmp_path: Path, capfd, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FAILS", "1")
    code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path}", "-b", "-v", "quiet",
                         *program("pass"))
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("dlagg:")]
    assert len(lines) == 1 and "nsys export exited with status 1" in lines[0] and "--nsys_database" in lines[0]


def test_existing_report_export_or_outputs_stop_before_the_program_runs(nsys: Path, tmp_path: Path, capfd) -> None:
    marker = tmp_path / "ran"
    run = program(f"open({str(marker)!r}, 'w').close()")
    for existing in ("nsys_profile.nsys-rep", "nsys_profile.sqlite", "dlagg_summary.csv"):
        folder = tmp_path / existing.replace(".", "_")
        folder.mkdir()
        (folder / existing).write_text("keep me")
        code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={folder}", "-b", *run)
        assert code == 1 and "already exists" in err and "--force" in err, err
        assert (folder / existing).read_text() == "keep me"
        assert not marker.exists() and calls_of(nsys) == []  # the program never ran
    code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path / 'nsys_profile_sqlite'}", "-b",
                         "--force=true", *run)
    assert code == 0, err
    assert marker.exists()
    profile, export = calls_of(nsys)
    assert "--force-overwrite=true" in profile and "--force-overwrite=true" in export


def test_without_nsys_one_line_says_how_to_install_it_or_pass_an_export(tmp_path: Path, capfd, monkeypatch) -> None:
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, _, err = dlagg(capfd, "--reports=all", f"--output_path={tmp_path / 'o'}", "python", "train.py")
    assert code == 1
    assert err.count("\n") == 1 and "nsys" in err and "not on PATH" in err
    assert "Nsight Systems" in err and "--nsys_database=" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("words", "expected"), [
    (["no_such_program_xyz"], "no_such_program_xyz: no such program on PATH"),
    (["trian.py"], "a Python script runs as 'dlagg [options] python trian.py'"),
    (["./missing.sh"], "./missing.sh: no such program"),
])
def test_a_program_that_cannot_run_is_caught_before_nsys(nsys: Path, tmp_path: Path, capfd, words: list[str],
                                                         expected: str) -> None:
    code, _, err = dlagg(capfd, f"--output_path={tmp_path}", *words)
    assert code == 1 and expected in err and err.count("\n") == 1, err
    assert calls_of(nsys) == []


def test_a_script_without_execute_permission_names_its_interpreter(nsys: Path, tmp_path: Path, capfd) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    code, _, err = dlagg(capfd, f"--output_path={tmp_path / 'o'}", str(script))
    assert code == 1 and f"run it through python {script}" in err


@pytest.mark.parametrize(("opts", "expected"), [
    ("-t cuda,nvtx -o mine", "leave -o/--output out"),
    ("-t cuda,nvtx --delay=3", "leave -y/--delay out"),
    ("-t 'cuda", "cannot be split into words"),
])
def test_nsys_opts_conflicting_with_dlagg_are_option_errors(nsys: Path, tmp_path: Path, capfd, opts: str,
                                                             expected: str) -> None:
    code, _, err = dlagg(capfd, f"--output_path={tmp_path}", f"--nsys_opts={opts}", "--delay=5", *program("pass"))
    assert code == 2 and expected in err and err.count("\n") == 1, err
    assert calls_of(nsys) == []


def test_nsys_opts_without_cuda_or_nvtx_warn_and_strict_stops_before_running(nsys: Path, tmp_path: Path,
                                                                             capfd) -> None:
    args = [f"--output_path={tmp_path}", "--reports=summary", "-b", "--nsys_opts=-t nvtx,osrt -s none"]
    code, _, err = dlagg(capfd, *args, "--strict=true", *program("pass"))
    assert code == 4 and calls_of(nsys) == []
    assert "dlagg: error: --nsys_opts traces 'nvtx,osrt' without cuda" in err and "nothing was read or run" in err
    code, _, err = dlagg(capfd, *args, *program("pass"))
    assert code == 0 and "warning: --nsys_opts traces 'nvtx,osrt' without cuda" in err


# ---- every DLProf option accepted -------------------------------------------------------------------

@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "cuda_basic.sqlite"
    shutil.copy(recording("cuda_basic"), copy)
    return copy


# DLProf v1.8's options (reference.md §1.2) as its users wrote them, with what dlagg says about each when it
# reads an existing export ("": honoured, no warning).
DLPROF_COMMAND_LINE = [
    (["-f", "true"], ""), (["--force=true"], ""), (["-v", "minimal"], ""), (["--verbosity=normal"], ""),
    (["-m", "pytorch"], ""), (["--mode=simple"], "--mode=simple changes nothing for an nsys export"),
    (["--mode=tensorflow1"], "--mode=tensorflow1 changes nothing"), (["--mode=tensorflow2"], "TensorFlow's graph"),
    (["--mode=tensorrt"], "--mode=tensorrt changes nothing"),
    (["--key_node=train_step"], ""), (["--key_op=train_step"], ""), (["--iter_start", "1"], ""),
    (["--iter_stop=5"], ""), (["--profile_name=dlprof"], ""), (["--reports=summary,detail"], ""),
    (["--formats=csv,json"], ""), (["--domains="], ""), (["--tb_dir=tb"], ""), (["-b", "true"], ""),
    (["--suppress_tb_files=false"], ""),
    (["--dump_model_data=true"], "--dump_model_data=True is accepted but does nothing"),
    (["--dump_model_data=false"], ""),
    (["--graphdef=auto"], "--graphdef=auto is accepted but does nothing"),
    (["--nsys_opts=-t cuda,nvtx"], "--nsys_opts=-t cuda,nvtx changes nothing for an existing export"),
    (["--nsys_base_name=run"], "--nsys_base_name=run changes nothing for an existing export"),
    (["--nsys_profile_range=true"], "--nsys_profile_range=True changes nothing"),
    (["-y=10"], "--delay=10 changes nothing"), (["-d", "120"], "--duration=120 changes nothing"),
]


@pytest.mark.parametrize(("words", "warning"), DLPROF_COMMAND_LINE, ids=[" ".join(w) for w, _ in DLPROF_COMMAND_LINE])
def test_every_dlprof_option_is_accepted(db: Path, tmp_path: Path, capfd, words: list[str], warning: str) -> None:
    code, _, err = dlagg(capfd, f"--database={db}", f"--output_path={tmp_path / 'out'}", "--reports=summary",
                         *words)
    assert code == 0, err
    said = [line for line in err.splitlines() if "changes nothing" in line or "does nothing" in line]
    if warning:
        assert len(said) == 1 and warning in said[0] and said[0].startswith("dlagg: warning: "), err
    else:
        assert said == []


def test_the_dlprof_table_covers_reference_1_2() -> None:
    """Every option of reference.md §1.2 is an option of dlagg (--detailed_mode was never found)."""
    dlprof = ["-h", "--help", "-V", "--version", "-f", "--force", "-v", "--verbosity", "-m", "--mode",
              "--nsys_database", "--database", "--nsys_base_name", "--nsys_opts", "--nsys_profile_range", "-y",
              "--delay", "-d", "--duration", "--key_node", "--key_op", "--iter_start", "--iter_stop", "--output_path",
              "--profile_name", "--reports", "--formats", "--domains", "--dump_model_data", "--tb_dir", "-b",
              "--suppress_tb_files", "--graphdef"]
    known = set(build_parser().option_strings())
    assert set(dlprof) <= known
    assert {f for o in DLPROF_ONLY for f in o.flags} <= known
    assert set(MODES) == {"simple", "pytorch", "tensorflow1", "tensorflow2", "tensorrt"}


@pytest.mark.parametrize(("words", "expected"), [
    (["--mode=pytorh"], "invalid choice: 'pytorh'"),
    (["-y=-1"], "expected 0 or more seconds"),
    (["--duration=1.5"], "expected whole seconds"),
    (["--nsys_base_name=runs/a"], "expected a plain file name"),
    (["--nsys_base_name=run_%p"], "expected a plain file name"),
])
def test_bad_dlprof_option_values(db: Path, tmp_path: Path, capfd, words: list[str], expected: str) -> None:
    code, _, err = dlagg(capfd, f"--nsys_database={db}", f"--output_path={tmp_path}", *words)
    assert code == 2 and err.count("\n") == 1 and expected in err


def test_a_program_with_an_export_is_not_run_and_says_so(nsys: Path, db: Path, tmp_path: Path, capfd) -> None:
    code, _, err = dlagg(capfd, f"--nsys_database={db}", f"--output_path={tmp_path}", "--reports=summary", "-b",
                         "python", "train.py")
    assert code == 0 and calls_of(nsys) == []
    assert "warning: the program (python train.py) is not run: --nsys_database reads an existing export" in err


def test_nothing_to_read_names_every_way_in(tmp_path: Path, capfd) -> None:
    code, _, err = dlagg(capfd, f"--output_path={tmp_path}")
    assert code == 2 and err.count("\n") == 1
    assert "--nsys_database" in err and "python train.py" in err and "--ncu_report" in err


# ---- no abbreviations; unknown options named ----------------------------------------------------------

@pytest.mark.parametrize(("word", "meant"), [
    ("--output=out", "did you mean --output_path?"),
    ("--iter=3", "did you mean --iter_stop or --iter_start?"),
    ("--key-node=train_step", "did you mean --key_node?"),
    ("--nsys_databse=x.sqlite", "did you mean --nsys_database?"),
    ("-reports=all", "did you mean --reports?"),
    ("--force_overwrite", "did you mean --force?"),
])
def test_long_options_are_never_abbreviated_and_unknown_ones_name_the_closest(db: Path, tmp_path: Path, capfd,
                                                                            word: str, meant: str) -> None:
    out = tmp_path / "o"
    code, _, err = dlagg(capfd, f"--nsys_database={db}", f"--output_path={out}", word)
    name = word.split("=")[0]
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"dlagg: error: unknown option {name}; {meant}")
    assert not out.exists()


def test_an_unknown_option_without_anything_close(db: Path, capfd) -> None:
    code, _, err = dlagg(capfd, f"--nsys_database={db}", "--zzz")
    assert code == 2 and "unknown option --zzz (see dlagg --help)" in err


# ---- no --reports -------------------------------------------------------------------------------------

def test_no_reports_option_writes_summary_expert_systems_and_tensorboard_and_says_so(db: Path, tmp_path: Path,
                                                                                   capfd) -> None:
    code, stdout, err = dlagg(capfd, f"--nsys_database={db}", f"--output_path={tmp_path}")
    assert code == 0, err
    assert ("no --reports given, so dlagg wrote the summary and expert_systems reports and TensorBoard event "
            "files; --reports=all writes every report") in err
    # (the expert systems' detail file: dlagg's columns beside DLProf's two-column file)
    assert sorted(p.name for p in tmp_path.glob("dlagg_*")) == ["dlagg_expert_systems.csv",
                                                                 "dlagg_expert_systems_detail.csv", "dlagg_summary.csv"]
    assert list((tmp_path / "event_files").rglob("events.out.tfevents.*"))
    assert stdout.startswith("Expert Systems Feedback:")


def test_no_reports_option_with_suppressed_event_files(db: Path, tmp_path: Path, capfd) -> None:
    code, _, err = dlagg(capfd, f"--nsys_database={db}", f"--output_path={tmp_path}", "-b")
    assert code == 0 and "wrote the summary and expert_systems reports; --reports=all" in err
    assert not (tmp_path / "event_files").exists()


# ---- a key node that matches no range -----------------------------------------------------------------

def typo_export(tmp_path: Path) -> Path:
    """6 'train_step' ranges, 6 'data_load' ranges on the same thread, one kernel per step."""
    b = ExportBuilder()
    for i in range(6):
        b.range(1000 * i, 1000 * i + 200, "data_load")
        b.range(1000 * i + 200, 1000 * i + 900, "train_step")
        b.launch(1000 * i + 300, 1000 * i + 310, 1000 * i + 400, 1000 * i + 600)
    return b.write(tmp_path / "typo.sqlite")


def test_a_mistyped_key_node_keeps_dlprofs_fallback_and_names_the_closest_ranges(tmp_path: Path, capfd) -> None:
    path = typo_export(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = dlagg(capfd, f"--nsys_database={path}", "--key_node=trian_step", f"--output_path={out}",
                              "--reports=summary,expert_systems", "--formats=csv,json", "-b")
    assert code == 0, err  # DLProf's behaviour: scripts rely on exit 0
    warning = [line for line in err.splitlines() if "trian_step" in line]
    assert len(warning) == 1 and warning[0].startswith("dlagg: warning: key node 'trian_step' not found")
    assert "closest range names: 'train_step' (a typo?)" in warning[0]
    assert "most frequent top-level ranges: " in warning[0]
    assert set(warning[0].split("most frequent top-level ranges: ")[1].split(", ")) == {"data_load", "train_step"}
    summary = json.loads((out / "dlagg_summary.json").read_text())
    iterations = next(t for t in summary["tables"] if t["key"] == "iterations_summary")
    total = [f["key"] for f in iterations["fields"]].index("total_iterations")
    assert iterations["rows"][0][total] == 1  # one iteration 0, as DLProf
    with (out / "dlagg_expert_systems.csv").open() as f:
        rows = [r for r in csv.reader(f) if r]
    first = rows[2]  # title, header, then the first finding
    assert first[0] == "Unable to split profile into training iterations: key node 'trian_step' not found"
    assert "closest range names in this profile are 'train_step' (--key_node=train_step)" in first[1]
    assert stdout.split("Problem detected:\n")[1].strip().startswith("Unable to split profile")


def test_strict_turns_the_key_node_warning_into_an_error(tmp_path: Path, capfd) -> None:
    path = typo_export(tmp_path)
    code, _, err = dlagg(capfd, f"--nsys_database={path}", "--key_node=trian_step", f"--output_path={tmp_path / 'o'}",
                         "--reports=summary", "-b", "--strict=true", "-v", "quiet")
    assert code == 4
    lines = err.splitlines()  # one error line per warning (whatever the verbosity), then the closing line
    assert lines[0].startswith("dlagg: error: key node 'trian_step' not found")
    assert all(line.startswith("dlagg: error: ") for line in lines)
    assert lines[-1] == (f"dlagg: error: --strict=true: {len(lines) - 1} warnings above, exit status 4; the outputs "
                         "were written")
    assert (tmp_path / "o" / "dlagg_summary.csv").exists()


def test_strict_without_warnings_exits_0(tmp_path: Path, capfd) -> None:
    path = typo_export(tmp_path)
    code, _, err = dlagg(capfd, f"--nsys_database={path}", "--key_node=train_step", f"--output_path={tmp_path}",
                         "--reports=kernel", "-b", "--strict")
    assert code == 0 and "error" not in err, err


def test_strict_log_counts_every_warning() -> None:
    from io import StringIO

    stream = StringIO()
    log = Log(0, stream, strict=True)
    log.warn("one")
    log.warn("two")
    assert log.warnings == ["one", "two"] and stream.getvalue() == "dlagg: error: one\ndlagg: error: two\n"
    quiet = Log(0, StringIO())
    quiet.warn("three")
    assert quiet.warnings == ["three"] and quiet.stream.getvalue() == ""


# ---- GPU work after the last key range ----------------------------------------------------------------

def tail_export(tmp_path: Path, pid: int = 100) -> Path:
    """4 steps of one 200 ns kernel each, then (after the last step's range) 3 kernels of 1000 ns and one
    copy of 500 ns."""
    b = ExportBuilder()
    for i in range(4):
        b.range(1000 * i, 1000 * i + 900, "train_step", pid=pid)
        b.launch(1000 * i + 100, 1000 * i + 110, 1000 * i + 200, 1000 * i + 400, pid=pid)
    for k in range(3):
        b.launch(5000 + 2000 * k, 5010 + 2000 * k, 5100 + 2000 * k, 6100 + 2000 * k, "eval_kernel", pid=pid)
    b.copy(11_000, 11_010, 11_100, 11_600, pid=pid)
    return b.write(tmp_path / f"tail{pid}.sqlite")


def test_work_after_the_last_key_range_is_counted_in_a_warning(tmp_path: Path, capfd) -> None:
    path = tail_export(tmp_path)
    with sqlite3.connect(path) as conn:  # expected values from the export, independently
        last_end = conn.execute("SELECT MAX(end) FROM NVTX_EVENTS WHERE text = 'train_step'").fetchone()[0]
        kernels, kernel_ns = conn.execute(
            "SELECT COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) WHERE r.start > ?", (last_end,)).fetchone()
        all_kernel_ns = conn.execute("SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert (kernels, kernel_ns) == (3, 3000)
    code, _, err = dlagg(capfd, f"--nsys_database={path}", f"--output_path={tmp_path / 'o'}", "--reports=summary",
                         "-b", "--key_node=train_step")
    assert code == 0, err
    warning = [line for line in err.splitlines() if "outside every iteration" in line]
    assert len(warning) == 1
    assert warning[0].startswith(f"dlagg: warning: {kernels} kernels ({kernel_ns / 1e6:,.3f} ms of GPU time, "
                                 f"{100 * kernel_ns / all_kernel_ns:.1f} % of all kernels' GPU time) and 1 memory "
                                 "operation (0.001 ms of GPU time, 100.0 % of all memory operations' GPU time) "
                                 "launched after the last 'train_step' range fall outside every iteration")
    code, _, err = dlagg(capfd, f"--nsys_database={path}", f"--output_path={tmp_path / 's'}", "--reports=summary",
                         "-b", "--key_node=train_step", "--strict=true")
    assert code == 4 and "dlagg: error: 3 kernels" in err


def test_no_outside_warning_when_every_launch_is_inside_an_iteration(tmp_path: Path, capfd) -> None:
    code, _, err = dlagg(capfd, f"--nsys_database={typo_export(tmp_path)}", f"--output_path={tmp_path}",
                         "--reports=summary", "-b", "--key_node=train_step")
    assert code == 0 and "outside every iteration" not in err


def test_work_after_the_last_key_range_is_counted_per_rank(tmp_path: Path, capfd) -> None:
    """Two ranks (one export each): the warning is computed where each rank is reduced, and names the rank."""
    tail_export(tmp_path, pid=100)
    b = ExportBuilder()  # rank 1: nothing after its last step
    for i in range(4):
        b.range(1000 * i, 1000 * i + 900, "train_step", pid=200)
        b.launch(1000 * i + 100, 1000 * i + 110, 1000 * i + 200, 1000 * i + 400, pid=200)
    b.write(tmp_path / "tail200.sqlite")
    code, _, err = dlagg(capfd, f"--nsys_database={tmp_path / 'tail*.sqlite'}", f"--output_path={tmp_path / 'o'}",
                         "--reports=summary", "-b", "--key_node=train_step", "--workers=1")
    assert code == 0, err
    warning = [line for line in err.splitlines() if "outside every iteration" in line]
    assert len(warning) == 1 and warning[0].startswith("dlagg: warning: 3 kernels")
    assert warning[0].endswith("(tail100.sqlite, rank 0)")


def test_docs_cli_md_lists_every_option() -> None:
    """docs/cli.md is the one list of options: each of the parser's option strings is in it."""
    from .conftest import ROOT

    text = (ROOT / "docs" / "cli.md").read_text()
    missing = [o for o in build_parser().option_strings() if f"`{o}`" not in text and f"`{o}=" not in text]
    assert missing == []


def test_near_names_are_case_blind_globbed_and_skip_op_markers(tmp_path: Path) -> None:
    from dlagg.reader import load_profile
    from dlagg.timeline.iterations import near_names

    b = ExportBuilder()
    names = [*(f"ProfilerStep#{i}" for i in range(4)), "Train_Step", "aten::train_stepper, seq = 3", "data",
             "{'mod': 'torch', 'op': 'train_step'}"]
    for i, name in enumerate(names):
        b.range(100 * i, 100 * i + 90, name)
    profile = load_profile(b.write(tmp_path / "names.sqlite"))
    assert near_names(profile, "trian_step") == ("Train_Step",)  # op markers are never offered
    assert near_names(profile, "ProfilerStep#9") == ("ProfilerStep#*",)  # numbered names as their glob
    assert near_names(profile, "zzz") == ()


def test_the_key_node_finding_comes_first_when_ranks_are_merged(tmp_path: Path, capfd) -> None:
    for pid in (100, 200):
        tail_export(tmp_path, pid=pid)
    out = tmp_path / "o"
    code, _, err = dlagg(capfd, f"--nsys_database={tmp_path / 'tail*.sqlite'}", f"--output_path={out}",
                         "--reports=expert_systems", "-b", "--key_node=trian_step", "--workers=1")
    assert code == 0, err
    with (out / "dlagg_expert_systems.csv").open() as f:
        rows = [r for r in csv.reader(f) if r]
    assert rows[2][0] == "Unable to split profile into training iterations: key node 'trian_step' not found"
    assert "'train_step'" in rows[2][1]
    assert sum("key node 'trian_step' not found" in line for line in err.splitlines()) == 2  # one per rank


def test_ctrl_c_while_the_program_runs_goes_to_the_program_not_to_dlagg(nsys: Path, tmp_path: Path, capfd,
                                                                         monkeypatch) -> None:
    """The program sends SIGINT to dlagg's process, as a terminal's Ctrl-C would: dlagg goes on to export and
    aggregate, and its own SIGINT handling is back afterwards."""
    import signal

    monkeypatch.setenv("DLAGG_PID", str(os.getpid()))
    before = signal.getsignal(signal.SIGINT)
    code, _, err = dlagg(capfd, "--reports=summary", f"--output_path={tmp_path}", "-b",
                         *program("import os, signal, time", "os.kill(int(os.environ['DLAGG_PID']), signal.SIGINT)",
                                  "time.sleep(0.2)"))
    assert code == 0, err
    assert (tmp_path / "dlagg_summary.csv").exists()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_command_ended_by_a_signal_gives_128_plus_its_number() -> None:
    from dlagg.record import _run

    assert _run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]) == 128 + 15
    assert _run([sys.executable, "-c", "raise SystemExit(3)"]) == 3


def test_no_reports_option_with_an_ncu_report_alone_writes_the_roofline(tmp_path: Path, capfd) -> None:
    from .conftest import ncu_csv

    code, _, err = dlagg(capfd, f"--ncu_report={ncu_csv('resnet_amp')}", f"--output_path={tmp_path}", "-b")
    assert code == 0, err
    assert "no --reports given, so dlagg wrote the roofline report;" in err
    assert (tmp_path / "dlagg_roofline.csv").exists() and not (tmp_path / "dlagg_summary.csv").exists()
