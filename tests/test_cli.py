"""The command line on good and bad input: one clear stderr line, an exit code, input untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dlagg import cli
from dlagg.options import Options
from dlagg.pipeline import run as pipeline_run

from .conftest import dlagg, recording, text_inference, text_inference_kept, text_kept_as, text_storage_kept
from .marks import quick_on


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "cuda_basic.sqlite"
    shutil.copy(recording("cuda_basic"), copy)
    return copy


def test_writes_reports_and_lists_them(db: Path, tmp_path: Path, capsys) -> None:
    before = sha256(db), db.stat().st_mtime_ns
    code, out, err = dlagg(capsys, f"--nsys_database={db}", "--reports=all", "--formats=csv,json",
                           "--output_path", str(tmp_path / "out"), "-b", "true")
    assert code == 0, err
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {f"dlagg_{r}.{f}" for r in ("summary", "kernel", "iteration") for f in ("csv", "json")} <= names
    assert all(n.startswith("dlagg_") for n in names)
    assert "wrote" in err.splitlines()[-1]
    assert (sha256(db), db.stat().st_mtime_ns) == before  # read-only, immutable
    assert not list(tmp_path.glob("*.sqlite-*")) and not list(tmp_path.glob("out/.*"))  # no journal, no temp


def test_database_alias_profile_name_and_key_op_alias(db: Path, tmp_path: Path, capsys) -> None:
    code, _, err = dlagg(capsys, "--database", str(db), "--reports=kernel", "--profile_name=run1",
                         "--key_op=train_step", f"--output_path={tmp_path}", "--suppress_tb_files=true")
    assert code == 0, err
    assert (tmp_path / "run1_kernel.csv").exists()


def test_existing_outputs_need_force(db: Path, tmp_path: Path, capsys) -> None:
    args = [f"--nsys_database={db}", "--reports=summary", f"--output_path={tmp_path}", "-b"]
    assert dlagg(capsys, *args)[0] == 0
    first = (tmp_path / "dlagg_summary.csv").read_text()
    code, _, err = dlagg(capsys, *args)
    assert code != 0
    assert err.count("\n") == 1 and "already exists" in err and "--force" in err
    assert (tmp_path / "dlagg_summary.csv").read_text() == first
    code, _, err = dlagg(capsys, *args, "--force=true")
    assert code == 0, err


def test_force_names_the_earlier_outputs_it_removed(db: Path, tmp_path: Path, capsys) -> None:
    """--force removed an earlier run's outputs that this run does not write, without a word."""
    out = tmp_path / "out"
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary,kernel", "--formats=csv,json", "-b",
                         f"--output_path={out}")
    assert code == 0, err
    before = {p.name for p in out.iterdir()}
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", "--formats=csv", "-b", "--force=true",
                         f"--output_path={out}")
    assert code == 0, err
    gone = before - {p.name for p in out.iterdir()}
    assert gone == {"dlagg_kernel.csv", "dlagg_kernel.json", "dlagg_summary.json", "dlagg_figures.json"}
    line = next(x for x in err.splitlines() if x.startswith("dlagg: --force:"))
    assert "removed 4 earlier outputs" in line and str(out) in line
    assert all(name in line for name in gone) and "dlagg_summary.csv" not in line.split("removed", 1)[1]


def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    src = recording("cuda_basic")
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    text = tmp_path / "notes.sqlite"
    text.write_text("this is not a database\n")
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00\x01QDREP-like bytes")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(src.read_bytes()[:200_000])
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (a)")
    folder = tmp_path / "folder.sqlite"
    folder.mkdir()
    return {
        "missing": (tmp_path / "nope.sqlite", "no such file"),
        "directory": (folder, "holds no *.sqlite file"),
        "empty": (empty, "is empty"),
        "text": (text, "not an SQLite database"),
        "nsys-rep": (rep, "nsys export --type sqlite"),
        "truncated": (truncated, "damaged or truncated"),
        "not-nsys": (other, "not an nsys export"),
    }


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "text", "nsys-rep", "truncated", "not-nsys"])
def test_bad_input_gets_one_clear_line(case: str, tmp_path: Path, capsys) -> None:
    path, expected = bad_inputs(tmp_path)[case]
    before = sha256(path) if path.is_file() else None
    code, out, err = dlagg(capsys, f"--nsys_database={path}", "--reports=all", f"--output_path={tmp_path / 'o'}")
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("dlagg: error: ") and expected in err
    assert "Traceback" not in err and out == ""
    assert str(path.name) in err
    if before:
        assert sha256(path) == before
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_export_without_kernels_says_so_and_writes_what_makes_sense(tmp_path: Path, capsys) -> None:
    db = recording("cpu_nvtx_numpy")
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=all", f"--output_path={tmp_path}", "-b")
    assert code == 0
    assert "no CUDA kernels" in err
    written = {p.name for p in tmp_path.iterdir()}
    assert "dlagg_summary.csv" in written
    assert not {"dlagg_kernel.csv", "dlagg_iteration.csv"} & written
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=kernel", f"--output_path={tmp_path / 'k'}", "-b")
    assert code == 1 and "no CUDA kernels" in err and "Traceback" not in err


def test_unwritable_output_folder(db: Path, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=all", f"--output_path={blocker / 'sub'}")
    assert code != 0 and err.count("\n") == 1 and "cannot create the output folder" in err
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=all", f"--output_path={blocker}")
    assert code != 0 and "is a file" in err


def read_only_folder(tmp_path: Path) -> Path:
    """A folder in which nothing can be made: one without write permission, or /sys for root (whom permission
    bits do not stop)."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() != 0:
        return folder
    if Path("/sys/kernel").is_dir():
        return Path("/sys")  # sysfs: no file or folder can be made there, by anyone
    pytest.skip("running as root without /sys: no folder here is read-only to this process")


@pytest.mark.parametrize("case", ["under_a_file", "read_only", "in_read_only"])
def test_an_unwritable_output_path_is_found_before_the_input_is_read(db: Path, tmp_path: Path, capsys,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      case: str) -> None:
    """docs/cli.md: an output folder that cannot be written stops dlagg before it reads anything (it was
    found after the inputs were probed, or, for a read-only folder, only when the first output was written)."""
    from dlagg import pipeline

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the input was read before the output folder was checked")

    (tmp_path / "file").write_text("x")
    out = (tmp_path / "file" / "sub" if case == "under_a_file" else
           read_only_folder(tmp_path) / ("sub" if case == "in_read_only" else ""))
    monkeypatch.setattr(pipeline, "input_paths", never)
    monkeypatch.setattr(pipeline, "check_input", never)
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", f"--output_path={out}")
    assert code == 1 and err.count("\n") == 1, err
    assert "not writable" in err if case == "read_only" else "cannot create the output folder" in err
    assert str(out) in err and "--output_path" in err


@pytest.mark.parametrize(("args", "expected"), [
    (["--reports=bogus"], "unknown report 'bogus'"),
    (["--formats=xml", "--reports=all"], "unknown format 'xml'"),
    (["--iter_start=99", "--reports=all"], "--iter_start=99 is out of range"),
    (["--iter_start=x"], "expected an iteration number"),
    (["--force=maybe"], "expected true or false"),
    (["--verbosity=loud"], "invalid choice"),
])
def test_bad_options(db: Path, tmp_path: Path, capsys, args: list[str], expected: str) -> None:
    code, _, err = dlagg(capsys, f"--nsys_database={db}", f"--output_path={tmp_path}", "-b", *args)
    errors = [line for line in err.splitlines() if line.startswith("dlagg: error:")]
    assert code == 2 and len(errors) == 1 and expected in errors[0] and "Traceback" not in err


def test_help_lists_every_dlprof_report(capsys) -> None:
    code, out, _ = dlagg(capsys, "--help")
    assert code == 0
    for name in ("summary", "detail", "kernel", "iteration", "tensor", "op_type", "group_node", "expert_systems"):
        assert f"\n  {name} " in out


def test_every_format_help_lists_is_accepted(db: Path, tmp_path: Path, capsys) -> None:
    """--help listed png under --formats, which --formats=png then refused."""
    code, out, _ = dlagg(capsys, "--help")
    assert code == 0
    option = " ".join(out.split("--formats LIST", 1)[1].split("\n  -", 1)[0].split())
    listed = [f.strip() for f in option.split("a comma list of ", 1)[1].split(" (default", 1)[0].split(",")]
    assert "csv" in listed and "png" not in listed
    for fmt in listed:
        code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", f"--formats={fmt}", "-b",
                             f"--output_path={tmp_path / fmt}")
        assert code == 0 and "unknown format" not in err, (fmt, err)


def test_quiet_prints_nothing_on_success(db: Path, tmp_path: Path, capsys) -> None:
    code, out, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", f"--output_path={tmp_path}", "-b",
                           "-v", "quiet")
    assert code == 0 and err == ""


def test_python_dash_m_entry_point(db: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dlagg", f"--nsys_database={db}", "--reports=kernel",
                           f"--output_path={tmp_path}", "-b"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dlagg_kernel.csv").exists()


def test_an_internal_error_is_one_line_without_traceback(db: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from dlagg import cli

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "run", broken)
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", f"--output_path={tmp_path}")
    assert code == 3
    assert err.count("\n") == 1 and "internal error on cuda_basic.sqlite: ZeroDivisionError" in err
    assert "Traceback" not in err
    code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", f"--output_path={tmp_path}",
                         "-v", "diagnostic")
    assert code == 3 and "Traceback" in err


@pytest.mark.parametrize(("raised", "code", "message"), [
    (KeyboardInterrupt(), 130, "dlagg: interrupted (SIGINT); no partial output was left behind\n"),
    (MemoryError(), 1, "dlagg: error: out of memory reading cuda_basic.sqlite ("),
])
def test_ctrl_c_and_out_of_memory_are_one_line(db: Path, tmp_path: Path, capsys, monkeypatch, raised: BaseException,
                                               code: int, message: str) -> None:
    """Ctrl-C exits 130 (128 + SIGINT, the shell convention), out of memory 1 (not a bug: the line says
    how much address space an export of this size needs, dlagg/limits.py), each with one line."""
    from dlagg import cli

    def interrupted(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr(cli, "run", interrupted)
    got, out, err = dlagg(capsys, f"--nsys_database={db}", "--reports=all", f"--output_path={tmp_path / 'out'}", "-b")
    assert (got, out) == (code, "") and err.startswith(message) and err.count("\n") == 1
    if isinstance(raised, MemoryError):
        assert "needs about" in err and "docs/memory.md" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_command_line_keeps_pandas_text_in_python_strings(db: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """The command line keeps the text pandas infers in Python strings (tuning.keep_text_in_python: with pandas 3's
    Arrow text a rank takes about 1.2x as long), and its workers do (tuning.tune_process)."""
    seen = []
    real = cli.run

    def run(*args, **kwargs):
        seen.append((text_kept_as(), kwargs.get("worker_init")))
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "run", run)
    with text_storage_kept(during="pyarrow"):
        infers = text_kept_as() != "object"  # pandas 3 (with its text inference on)
        code, _, err = dlagg(capsys, f"--nsys_database={db}", "--reports=summary", f"--output_path={tmp_path}")
    assert code == 0, err
    assert seen == [("python" if infers else "object", cli.tune_process)]


@pytest.mark.parametrize("name", quick_on("resnet_amp", ["resnet_amp", "ddp2_gpt_per_rank"]))
def test_reports_are_the_same_bytes_whether_pandas_keeps_text_in_arrow_in_python_strings_or_as_objects(
        name: str, multi, tmp_path: Path) -> None:
    """A library caller may keep pandas 3's text in Arrow (its default), in Python strings (what the command line
    does) or as objects (pandas 2, or its text inference off). Every report (CSV, JSON, HTML) is the same bytes each
    way, on one GPU and on two ranks (reduced in this process)."""
    ways = {"objects": (False, None)} if text_inference() is not None else {}
    with text_inference_kept(during=True):
        if text_kept_as() != "object":
            ways.update({"arrow": (True, "pyarrow"), "python": (True, "python")})
    if len(ways) < 2:
        pytest.skip("this pandas has no choice of how it keeps inferred text")
    source = recording(name) if name == "resnet_amp" else multi(name)
    written = {}
    for way, (infer, storage) in ways.items():
        out = tmp_path / way
        with text_inference_kept(during=infer), text_storage_kept(during=storage):
            pipeline_run(Options(nsys_database=str(source), reports=("all",), formats=("csv", "json", "html"),
                                 output_path=out, suppress_tb_files=True, workers=1, verbosity="quiet"))
        written[way] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    first, *others = written.values()
    assert len(first) >= 17
    for way in others:
        assert way.keys() == first.keys()
        for path, data in first.items():
            assert way[path] == data, path
