"""A saved baseline (--baseline=<a JSON run's output folder or its figures file>): the comparison it gives is
the one the baseline's export gives, byte for byte; a damaged one, or one of another dlagg version, is one
error line.

Expected outputs are those of the same comparison with the baseline's export (--baseline=BEFORE.sqlite),
written by a separate run; the saved figures come from a run of the baseline alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlagg import __version__
from dlagg.options import Baseline, Options
from dlagg.pipeline import run

from .conftest import dlagg, fixture_path, recording
from .test_compare import BASE_STEPS, compared, hand_built

COMPARE_FILES = ("dlagg_compare.csv", "dlagg_compare.json")


def save(out: Path, spec: str | Path, **options: object) -> Path:
    """A JSON run of the baseline alone (its summary asked for): its output folder."""
    run(Options(nsys_database=spec, reports=("summary",), formats=("json",), output_path=out, profile_name="before",
                suppress_tb_files=True, verbosity="quiet", **options))  # type: ignore[arg-type]
    return out


def compare_with(out: Path, current: str | Path, baseline: str | Path, *, events: bool = False,
                 **options: object) -> tuple[Path, object]:
    result = run(Options(nsys_database=current, baseline=Baseline(baseline, **options),  # type: ignore[arg-type]
                         reports=("compare",), formats=("csv", "json"), output_path=out,
                         suppress_tb_files=not events, verbosity="quiet"))
    return out, result


def assert_same_comparison(tmp_path: Path, current: str | Path, export: str | Path, saved: Path,
                           *, events: bool = False, **export_options: object) -> None:
    """The compare report's files and the verdict with the saved baseline (its folder, its file) are those with
    the baseline's export."""
    expected, by_export = compare_with(tmp_path / "by_export", current, export, events=events, **export_options)
    for kind, given in (("folder", saved), ("file", saved / "before_figures.json")):
        out, by_saved = compare_with(tmp_path / f"by_{kind}", current, given, events=events)
        for name in COMPARE_FILES:
            assert (out / name).read_bytes() == (expected / name).read_bytes(), (kind, name)
        assert by_saved.comparison.verdict == by_export.comparison.verdict  # type: ignore[attr-defined]
        assert by_saved.warnings == by_export.warnings  # type: ignore[attr-defined]


def test_resnet_against_its_saved_figures(tmp_path: Path) -> None:
    """resnet_fp32 -> resnet_amp, with event files (the export's baseline has its TensorBoard run, a saved one
    has none)."""
    saved = save(tmp_path / "saved", recording("resnet_fp32"))
    assert sorted(p.name for p in saved.iterdir()) == ["before_figures.json", "before_summary.json"]
    assert_same_comparison(tmp_path, recording("resnet_amp"), recording("resnet_fp32"), saved, events=True)
    runs = sorted(p.name for p in (tmp_path / "by_folder" / "event_files").iterdir())
    assert runs == ["dlagg"]
    rows = compared(tmp_path / "by_folder")
    assert rows.loc["summary:iterations_summary.aggregated_iterations", "baseline"] == 15


def test_kineto_ranks_against_their_saved_figures(tmp_path: Path) -> None:
    """Two ranks a side (PyTorch profiler traces): the balanced run compared with the straggler run."""
    def traces(name: str) -> str:
        return str(fixture_path(f"kineto/{name}/truth_rank0.json", f"Kineto fixture {name}").parent
                   / "rank*.pt.trace.json.gz")

    saved = save(tmp_path / "saved", traces("ddp2_straggler"), workers=1)
    assert_same_comparison(tmp_path, traces("ddp2_balanced"), traces("ddp2_straggler"), saved)
    profiles = json.loads((tmp_path / "by_file" / "dlagg_compare.json").read_text())["tables"][2]
    assert [row[2] for row in profiles["rows"]] == [2, 2]  # ranks, per side


def test_several_nsys_ranks_against_their_saved_figures(tmp_path: Path, multi: Callable[[str], Path]) -> None:
    spec = str(multi("ddp2_gpt_per_rank") / "*.sqlite")
    saved = save(tmp_path / "saved", spec, workers=1)
    assert_same_comparison(tmp_path, spec, spec, saved)


def test_saved_iteration_range_key_node_and_warnings_are_the_baselines(tmp_path: Path) -> None:
    """The baseline saved with its own key node and iteration range compares as the export read with them
    (--baseline_key_node, --baseline_iter_start); the warnings of different GPUs, key nodes and op sets are
    the same."""
    before = hand_built(tmp_path / "before.sqlite", BASE_STEPS, key="my_step")
    saved = save(tmp_path / "saved", before, key_node="my_step", iter_start=2)
    assert_same_comparison(tmp_path, recording("dataloader_bound"), before, saved, key_node="my_step", iter_start=2)
    warnings = json.loads((tmp_path / "by_folder" / "dlagg_compare.json").read_text())["warnings"]
    assert any("op sets differ" in w for w in warnings) and any("key nodes differ" in w for w in warnings)
    rows = compared(tmp_path / "by_folder")
    assert rows.loc["summary:iterations_summary.aggregated_iterations", "baseline"] == len(BASE_STEPS) - 2


def test_saving_leaves_the_other_reports_as_they_were(tmp_path: Path) -> None:
    """A JSON run builds what the saved figures need besides the reports asked for: the CSV and HTML files are
    byte for byte those of a run without JSON."""
    db = recording("resnet_amp")
    for name, formats in (("plain", ("csv", "html")), ("saving", ("csv", "html", "json"))):
        run(Options(nsys_database=db, reports=("summary", "detail"), formats=formats, output_path=tmp_path / name,
                    suppress_tb_files=True, verbosity="quiet"))
    plain = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert sorted(p.name for p in (tmp_path / "saving").iterdir()) == sorted(
        [*plain, "dlagg_figures.json", "dlagg_summary.json", "dlagg_detailed.json"])
    for name in plain:
        assert (tmp_path / "saving" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name


def test_library_takes_a_saved_baseline(tmp_path: Path) -> None:
    from dlagg.api import analyze

    saved = save(tmp_path / "saved", recording("resnet_fp32"))
    by_export = analyze(recording("resnet_amp"), reports="summary", baseline=recording("resnet_fp32"))
    by_saved = analyze(recording("resnet_amp"), reports="summary", baseline=saved)
    assert by_saved.compare.equals(by_export.compare)
    assert by_saved.result.comparison.verdict == by_export.result.comparison.verdict


# --- mistakes: one line, exit 1 (2 for options), nothing written ----------------------------------------------

@pytest.fixture(scope="module")
def saved_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(tmp_path_factory.mktemp("saved"), recording("resnet_fp32"))


def damage(saved: Path, folder: Path, change: Callable[[str], str]) -> Path:
    (folder / "bad").mkdir()
    path = folder / "bad" / "before_figures.json"
    path.write_text(change((saved / "before_figures.json").read_text()))
    return path


def other_version(text: str) -> str:
    doc = json.loads(text)
    doc["dlagg_version"] = "0.0.1"
    return json.dumps(doc)


def without_ranks(text: str) -> str:
    doc = json.loads(text)
    doc["tables"] = [t for t in doc["tables"] if t["key"] != "ranks"]
    return json.dumps(doc)


@pytest.mark.parametrize(("change", "said"), [
    (other_version, f"saved by dlagg 0.0.1, this is dlagg {__version__}"),
    (lambda text: text[:len(text) // 2], "not a readable saved baseline (not JSON"),
    (without_ranks, "not a readable saved baseline (KeyError"),
    (lambda text: "[]", "not a readable saved baseline (not a figures document)"),
], ids=["other version", "cut short", "a table missing", "not figures"])
def test_a_bad_saved_baseline_is_one_line(tmp_path: Path, capsys, saved_once: Path, change: Callable[[str], str],
                                          said: str) -> None:
    path = damage(saved_once, tmp_path, change)
    for given in (path, path.parent):
        code, out, err = dlagg(capsys, f"--nsys_database={recording('resnet_amp')}", f"--baseline={given}",
                               "--formats=json", f"--output_path={tmp_path / 'out'}", "-b")
        assert code == 1 and out == ""
        assert err.splitlines() == [f"dlagg: error: --baseline: {path}: {err.split(f'{path}: ', 1)[1].rstrip()}"]
        assert said in err and ("save the baseline again" in err or "save it again" in err), err
        assert not (tmp_path / "out").exists()


def test_other_mistakes_with_a_saved_baseline(tmp_path: Path, capsys, saved_once: Path) -> None:
    current = f"--nsys_database={recording('resnet_amp')}"
    out = f"--output_path={tmp_path / 'out'}"
    code, _, err = dlagg(capsys, current, f"--baseline={saved_once / 'before_summary.json'}", out, "-b")
    assert code == 1 and "is a dlagg report, not saved figures" in err
    code, _, err = dlagg(capsys, current, f"--baseline={saved_once}", "--baseline_iter_start=2", out, "-b")
    assert code == 2 and "--baseline_iter_start: the saved baseline" in err
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a_figures.json", "b_figures.json"):
        (two / name).write_bytes((saved_once / "before_figures.json").read_bytes())
    code, _, err = dlagg(capsys, current, f"--baseline={two}", out, "-b")
    assert code == 1 and "holds 2 saved baselines (a_figures.json, b_figures.json); pass one of them" in err
    assert not (tmp_path / "out").exists()
