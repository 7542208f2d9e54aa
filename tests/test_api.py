"""The library face (dlagg/api.py): docs/api.md's session runs as written and writes nothing but its last
step's files; the DataFrames hold numbers, the same the command line's CSV shows (read by tests/dlprof_csv.py,
which imports nothing of dlagg); options take str paths and reject unknown names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlagg
from dlagg.cli import main as cli_main
from dlagg.options import Options

from . import dlprof_csv

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
RESNET = ROOT / "fixtures" / "nsys-2022.4" / "resnet_amp" / "resnet_amp.sqlite"
DDP2 = ROOT / "fixtures" / "kineto" / "ddp2"
DOC_OUTPUT = "dlagg_out"  # where the session's last step writes
# multiprocessing's own folder in the temporary folder (its fork server's socket), kept for the interpreter's life:
# made by the local process pool that reads the ranks, and no output of dlagg's
MULTIPROCESSING = "pymp-"


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder` (links not followed) -> (size, mtime in ns)."""
    found = {}
    for parent, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(parent) / name
            stat = path.lstat()
            found[str(path.relative_to(folder))] = (stat.st_size if path.is_file() else 0, stat.st_mtime_ns)
    return found


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_doc_session_runs_and_writes_nothing_but_its_last_step(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block of docs/api.md in turn, from a folder holding only a link to the fixtures (the doc runs from a
    checkout's root): no file appears anywhere (that folder, the fixtures' folders, the temporary folder) until
    the last block, whose `.write` writes into dlagg_out/ alone, and no TensorBoard file at all."""
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 5 and ".write(" in blocks[-1] and not any(".write(" in b for b in blocks[:-1])
    cwd = tmp_path / "session"
    cwd.mkdir()
    (cwd / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where analyze's scratch folder goes
    monkeypatch.chdir(cwd)
    inputs = {folder: tree(folder) for folder in (RESNET.parent, DDP2)}
    namespace: dict[str, object] = {"__name__": "__api_doc__"}
    for k, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name} block {k + 1}", "exec"), namespace)  # noqa: S102
        if k < len(blocks) - 1:
            assert set(tree(cwd)) == {"fixtures"}, f"block {k + 1} wrote {sorted(set(tree(cwd)) - {'fixtures'})}"
        left = [p.name for p in temp.iterdir() if not p.name.startswith(MULTIPROCESSING)]
        assert not left, f"block {k + 1} left {left} in the temporary folder"
    after = tree(cwd)
    new = sorted(set(after) - {"fixtures"})
    assert new and all(p == DOC_OUTPUT or p.startswith(DOC_OUTPUT + os.sep) for p in new), new
    written = namespace["written"]
    assert sorted(str(Path(p)) for p in written) == sorted(str(Path(DOC_OUTPUT) / p.name) for p in written)  # type: ignore[attr-defined]
    assert {Path(p).name for p in written} == set(os.listdir(cwd / DOC_OUTPUT))  # type: ignore[attr-defined]
    assert not [p for p in new if "event" in p or "tfevents" in p]
    for folder, before in inputs.items():
        assert tree(folder) == before, f"{folder} changed"


def test_analyze_writes_nothing_with_tensorboard_on_by_default(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The output options given to analyze (TensorBoard event files on, the current folder, csv) are kept for
    `write`, never used by the analysis."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.chdir(tmp_path)
    a = dlagg.analyze(str(RESNET), reports="kernel,summary", formats=("csv", "json"), output_path="out")
    assert sorted(os.listdir(tmp_path)) == ["tmp"] and not os.listdir(temp)
    assert a.names == ("summary", "kernel")
    written = a.write(suppress_tb_files=True)
    assert sorted(p.name for p in written) == ["dlagg_figures.json", "dlagg_kernel.csv", "dlagg_kernel.json",
                                               "dlagg_summary.csv", "dlagg_summary.json"]  # figures: reports/saved.py
    assert all(p.parent == Path("out") for p in written)


def _cli_csv(path: Path, out: Path) -> None:
    code = cli_main([f"--nsys_database={path}", "--reports=all", "--formats=csv", "--suppress_tb_files=true",
                     f"--output_path={out}", "--verbosity=quiet"])
    assert code == 0


def _numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _check_column(report: str, key: str, digits: int | None, got: pd.Series, shown: pd.Series,
                  key_value: bool = False) -> None:
    """One figure's column against the CSV's: numbers within the CSV's rounding, yes/no for booleans, text as is.
    A table's text is quoted in the CSV, so a column the CSV shows bare is numbers (a key/value line's text is bare:
    a driver version "13.0" reads as a number there)."""
    where = f"{report}.{key}"
    numbers = [v for v in shown if v is not None]
    if not key_value and numbers and all(isinstance(v, (int, float)) for v in numbers):
        assert _numeric(got), f"{where}: the CSV shows numbers, the frame holds {got.dtype}"
    if _numeric(got):
        expected = got.astype("Float64").to_numpy(dtype=float, na_value=np.nan)
        csv = np.array([np.nan if v is None else float(v) for v in shown])  # type: ignore[arg-type]
        atol = 0.5 * 10.0 ** -digits + 1e-9 if digits is not None else 0.0
        np.testing.assert_allclose(csv, expected, rtol=1e-12, atol=atol, equal_nan=True, err_msg=where)
    elif pd.api.types.is_bool_dtype(got):
        assert list(shown) == ["yes" if v else "no" for v in got], where
    else:
        text = ["" if v is None else str(v) for v in shown]
        if key_value and isinstance(shown.iat[0], (int, float)):  # bare text that reads as a number
            text = [str(type(shown.iat[0])(got.iat[0]))]
        assert text == ["" if pd.isna(v) else str(v) for v in got], where


@pytest.mark.parametrize("path", [RESNET, pytest.param(DDP2, marks=pytest.mark.recordings)], ids=["resnet_amp", "ddp2"])
def test_figures_are_numbers_equal_to_the_command_lines_csv(path: Path, tmp_path: Path) -> None:
    """Every CSV table of every report: the DataFrame's numeric figures are numbers (dtype numeric, not text)
    and equal the CSV's within the decimals it shows; booleans and text as the CSV writes them."""
    _cli_csv(path, tmp_path / "cli")
    a = dlagg.analyze(path)
    assert {"summary", "kernel", "iteration", "tensor", "op_type", "expert_systems"} <= set(a.names)
    checked = 0
    for name in a.names:
        report = a.report(name)
        sections = dlprof_csv.read(tmp_path / "cli" / f"dlagg_{report.file_suffix}.csv")
        frames = a.tables(name)
        for table in report.tables:
            if not table.csv:
                continue
            frame, section = frames[table.key], sections[table.title]
            if table.key_value:
                values = section.values()
                for f in table.csv_fields():
                    _check_column(name, f.key, f.digits, frame[f.key], pd.Series([values[f.title]], dtype=object),
                                  key_value=True)
            else:
                shown = section.frame()
                assert len(shown) == len(frame), f"{name}.{table.key}: rows"
                for f in table.csv_fields():
                    _check_column(name, f.key, f.digits, frame[f.key], shown[f.title])
            for f in table.fields:
                if f.unit in ("ns", "percent", "count", "bytes"):
                    assert _numeric(frame[f.key]), f"{name}.{table.key}.{f.key} is {frame[f.key].dtype}"
            checked += 1
    assert checked >= 8
    main = a.kernel
    assert main.equals(a.report("kernel").main.frame) and list(main.columns) == list(a.titles("kernel"))


def test_reports_by_their_file_names_and_why_one_is_missing() -> None:
    a = dlagg.analyze(RESNET, reports=["tensor", "detail", "group_node"])
    assert a.tensor_core.equals(a.tensor) and a.detailed.equals(a.detail) and a.group_op.equals(a.group_node)
    assert "tensor" in dir(a)
    with pytest.raises(AttributeError, match="relates several ranks and resnet_amp.sqlite holds one"):
        a.ranks  # noqa: B018
    with pytest.raises(AttributeError, match=r"add 'kernel'"):
        a.kernel  # noqa: B018
    with pytest.raises(AttributeError, match="pass ncu_report="):
        a.roofline  # noqa: B018
    with pytest.raises(AttributeError, match="baseline="):
        a.compare  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute or report 'nope'"):
        a.nope  # noqa: B018
    assert not hasattr(a, "ranks")
    first = a.tensor
    first.loc[:, "kernel_time_ns"] = -1  # a frame of one's own: the analysis keeps its figures
    assert (a.tensor.kernel_time_ns >= 0).all()


def test_unknown_options_are_a_type_error_naming_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"unknown option\(s\) 'keynode'.*key_node"):
        dlagg.analyze(RESNET, keynode="train_step")
    with pytest.raises(TypeError, match="first argument `path`"):
        dlagg.analyze(RESNET, nsys_database=RESNET)
    a = dlagg.analyze(RESNET, reports="summary", key_node="train_step", iter_start=2, iter_stop=5)
    assert (a.iterations.key_node, a.iterations.start, a.iterations.stop) == ("train_step", 2, 5)
    with pytest.raises(TypeError, match="key_node cannot change here"):
        a.write("out", key_node="other")


def test_options_take_str_paths(tmp_path: Path) -> None:
    """A str output_path is a Path (it used to crash the pipeline's `output_path / tb_dir`); specs stay str."""
    options = Options(nsys_database=str(RESNET), output_path=str(tmp_path / "out"),  # type: ignore[arg-type]
                      reports=("kernel",),
                      suppress_tb_files=True, verbosity="quiet")
    assert options.output_path == tmp_path / "out" and isinstance(options.output_path, Path)
    assert isinstance(options.nsys_database, str)
    from dlagg.pipeline import run

    written = run(options).written
    assert [p.name for p in written] == ["dlagg_kernel.csv"] and written[0].parent == tmp_path / "out"


def test_import_dlagg_stays_light() -> None:
    """`import dlagg` loads neither pandas nor the pipeline; dlagg.analyze is the api's."""
    code = ("import sys, dlagg; assert 'pandas' not in sys.modules and 'dlagg.pipeline' not in sys.modules; "
            "from dlagg.api import analyze; assert dlagg.analyze is analyze; assert 'analyze' in dir(dlagg)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.processes
def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path) -> None:
    """Worker processes import the calling script again (multiprocessing): a script that calls analyze on several
    ranks at its top level gets an error that says so and what to do, not "more memory"; with workers=1 it runs."""
    script = tmp_path / "analyse.py"
    for workers, ends in ((2, "WorkerLost"), (1, "ranks 2")):
        script.write_text(f"import dlagg\na = dlagg.analyze({str(DDP2)!r}, workers={workers})\n"
                          "print('ranks', len(a.rank_figures))\n")
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                              timeout=120, env={**os.environ, "DLAGG_CACHE_DIR": str(tmp_path / "cache")})
        said = (done.stderr if workers == 2 else done.stdout).strip().splitlines()[-1]
        assert ends in said, done.stderr[-2000:]
        if workers == 2:
            assert '`if __name__ == "__main__":`' in said and "more memory" not in said
