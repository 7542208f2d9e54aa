"""Iteration cutting and GPU-work attribution on hand-built exports."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlagg.cli import main
from dlagg.errors import OptionsError
from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile
from dlagg.timeline.iterations import detect_iterations

from .builders import ExportBuilder


def reports(path: Path, tmp_path: Path, **kw: object):
    options = Options(nsys_database=path, reports=("summary", "kernel", "iteration"), output_path=tmp_path / "out",
                      suppress_tb_files=True, verbosity="quiet", **kw)
    result = run(options)
    return {r.name: r for r in result.reports}, result


def gpu_bound_export(tmp_path: Path) -> Path:
    """GIVEN a GPU-bound run: the CPU queues step i+1 while step i's kernels still run.

    Steps are 100 ns of CPU time each; every kernel takes 250 ns, so kernels of step i start long
    after step i's range closed, on the GPU queue.
    """
    b = ExportBuilder()
    gpu_free = 0
    for i in range(4):
        t0 = 1000 + 100 * i
        b.range(t0, t0 + 100, "train_step")
        k_start = max(gpu_free, t0 + 20)
        b.launch(t0 + 10, t0 + 20, k_start, k_start + 250, name=f"step{i}_kernel")
        gpu_free = k_start + 250
    return b.write(tmp_path / "gpu_bound.sqlite")


def test_kernels_follow_their_launch_call_not_their_gpu_start(tmp_path: Path) -> None:
    rep, result = reports(gpu_bound_export(tmp_path), tmp_path)
    table = rep["iteration"].main.frame
    # WHEN attributed by the launching API call, each step's kernel lands in its own iteration
    assert table.set_index("kernel_name")["iteration"].to_dict() == {
        "step0_kernel": 0, "step1_kernel": 1, "step2_kernel": 2, "step3_kernel": 3}
    # ... although kernels 1-3 start after their step's range ended.
    its = result.iterations
    step = table["iteration"].to_numpy()
    late = table["gpu_start_ns"].to_numpy() > its.launch_ends[step]
    assert late.sum() == 3
    # Each iteration then ends with its kernel (the GPU's pace: 250 ns per step), not with its range.
    end = table["gpu_start_ns"].to_numpy() + table["gpu_duration_ns"].to_numpy()
    assert its.ends[step].tolist() == end.tolist()
    assert its.cpu_times[1:].tolist() == [100, 100, 100] and its.gpu_times[1:].tolist() == [250, 250, 250]


def test_kernel_without_launch_call_falls_back_to_its_own_start(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 100, "train_step")
    b.range(100, 200, "train_step")
    b.kernel(150, 160, "orphan", corr=999)  # no API row with this correlation id
    rep, _ = reports(b.write(tmp_path / "orphan.sqlite"), tmp_path)
    row = rep["iteration"].main.frame.iloc[0]
    assert row["iteration"] == 1
    assert row["api_start_ns"] is pd.NA


def test_correlation_ids_are_joined_per_process(tmp_path: Path) -> None:
    """Two processes reuse correlation id 1: each kernel must get its own process's call."""
    b = ExportBuilder()
    b.range(0, 1000, "train_step", pid=100, tid=100)
    b.api(10, 20, pid=100, tid=100, corr=1)
    b.api(500, 590, pid=200, tid=200, corr=1)
    b.kernel(30, 40, "a", corr=1, pid=100)
    b.kernel(600, 610, "b", corr=1, pid=200)
    rep, _ = reports(b.write(tmp_path / "two_procs.sqlite"), tmp_path)
    table = rep["iteration"].main.frame.set_index("kernel_name")
    assert table.loc["a", "api_start_ns"] == 10 and table.loc["a", "api_duration_ns"] == 10
    assert table.loc["b", "api_start_ns"] == 500 and table.loc["b", "api_duration_ns"] == 90


def steps(tmp_path: Path, names: list[str], registered: bool = False) -> Path:
    b = ExportBuilder()
    for i, name in enumerate(names):
        b.range(100 * i, 100 * i + 90, name, registered=registered)
        b.launch(100 * i + 5, 100 * i + 10, 100 * i + 20, 100 * i + 30)
    return b.write(tmp_path / "steps.sqlite")


def test_glob_key_node_matches_numbered_steps(tmp_path: Path) -> None:
    profile = load_profile(steps(tmp_path, [f"ProfilerStep#{i}" for i in range(5)], registered=True))
    its = detect_iterations(profile)  # detected: a well-known glob
    assert its.key_node == "ProfilerStep#*" and its.count == 5
    assert detect_iterations(profile, "ProfilerStep#*").count == 5
    assert detect_iterations(profile, "ProfilerStep#3").count == 1


# --- hostile key-node text: regex and glob metacharacters, RE2 vs re, very long names ----------------

@pytest.mark.parametrize(("target", "decoy"), [
    ("a.b", "aXb"),  # '.' as a regex would match any character
    ("step (a+b) [0]?", "step (aab) 0"),  # groups, quantifiers, classes
    ("^train$|x", "x"),  # anchors and alternation
    ("s{2}", "ss"),  # repetition
    ("C:\\run\\step", "C:runstep"),  # backslashes
    ("(?P<x>a)", "a"),  # Python-only named group syntax (RE2 spells it differently)
    ("步骤 1", "步骤 2"),  # non-ASCII
])
@pytest.mark.parametrize("registered", [False, True], ids=["inline", "registered"])
def test_exact_key_node_is_matched_literally(tmp_path: Path, target: str, decoy: str, registered: bool) -> None:
    profile = load_profile(steps(tmp_path, [target, decoy, target, decoy, target], registered=registered))
    its = detect_iterations(profile, target)
    assert its.found and its.count == 3
    assert its.ends.tolist() == [90, 290, 490]  # the target's three instances (steps() puts step i at 100 i)


def glob_matches(pattern: str, text: str) -> bool:
    """Reference glob (only '*' is special, matching any text): plain string operations, no regex."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return text == pattern
    head, tail = parts[0], parts[-1]
    if len(text) < len(head) + len(tail) or not (text.startswith(head) and text.endswith(tail)):
        return False
    at, stop = len(head), len(text) - len(tail)
    for middle in parts[1:-1]:  # leftmost match of each middle part is the one that leaves most room
        found = text.find(middle, at, stop)
        if found < 0:
            return False
        at = found + len(middle)
    return True


HOSTILE = ["a.b1", "aXb2", "a.b.c", "x(y)+z", "x(y)+z*", "[0-9]+", "^$", "a|b", "a\\b", "a\\Qb\\E",
           "(?i)STEP", "step", "Step", "step\nline two", "ste\np", "{2,3}", "\\d\\d", "ü step", "步骤*",
           "tab\tstep", " ", "?", "star*star", "ends with \\"]


@functools.lru_cache(maxsize=1)
def hostile_profile():
    """One export: every HOSTILE name once (alternately inline and registered), on one thread."""
    b = ExportBuilder()
    for i, name in enumerate(HOSTILE):
        b.range(100 * i, 100 * i + 90, name, registered=bool(i % 2))
    b.launch(5, 10, 20, 30)
    folder = Path(tempfile.mkdtemp(prefix="dlagg-hostile-"))
    path = b.write(folder / "hostile.sqlite")
    try:
        return load_profile(path)
    finally:
        shutil.rmtree(folder)


def glob_from(draw_name: str, cuts: list[int]) -> str:
    """`draw_name` with the text between pairs of cut points replaced by '*'."""
    points = sorted(min(c, len(draw_name)) for c in cuts)
    out, at = [], 0
    for lo, hi in zip(points[::2], points[1::2], strict=False):
        out.append(draw_name[at:lo] + "*")
        at = hi
    return "".join(out) + draw_name[at:]


@settings(max_examples=150, deadline=None)
@given(st.one_of(
    st.builds(glob_from, st.sampled_from(HOSTILE), st.lists(st.integers(0, 16), min_size=2, max_size=6)),
    st.text(alphabet="*.?+()[]{}^$|\\ab\n步", min_size=1, max_size=8),
))
def test_glob_key_node_matches_what_a_plain_glob_matches(pattern: str) -> None:
    """Whatever metacharacters surround the stars, the key node matches exactly the names a plain
    glob matches (checked against string operations, not a regex engine)."""
    profile = hostile_profile()
    expected = [100 * i + 90 for i, name in enumerate(HOSTILE) if glob_matches(pattern, name)]
    its = detect_iterations(profile, pattern)
    if expected:
        assert its.found and its.ends.tolist() == expected
    else:
        assert not its.found and its.count == 1


@pytest.mark.parametrize("key", ["exact", "trailing star", "leading star"])
def test_long_names_match(tmp_path: Path, key: str) -> None:
    """4 KiB range names (a long record_function label): exact, `prefix*` and `*suffix` key nodes."""
    body = "layer." * 700
    names = [f"{body}{i % 2}" for i in range(6)]
    profile = load_profile(steps(tmp_path, names))
    pattern = {"exact": names[1], "trailing star": body + "*", "leading star": "*" + names[1][-300:]}[key]
    its = detect_iterations(profile, pattern)
    assert its.found and its.count == (6 if key == "trailing star" else 3)


def test_a_glob_too_long_for_the_regex_engine_is_an_options_error(tmp_path: Path, capsys) -> None:
    """RE2 refuses patterns over its memory budget: a clear option error (exit 2), not an internal one."""
    path = steps(tmp_path, ["train_step"] * 3)
    key = "x" * 1_000_000 + "*"
    code = main([f"--nsys_database={path}", "--reports=summary", f"--key_node={key}",
                 f"--output_path={tmp_path / 'out'}", "-b", "--verbosity=quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("dlagg: error: --key_node='xxx") and "(1000001 characters) cannot be matched" in err


def test_key_node_not_found_gives_one_iteration_and_candidates(tmp_path: Path) -> None:
    profile = load_profile(steps(tmp_path, ["fwd_bwd"] * 4))
    its = detect_iterations(profile, "global_step")
    assert not its.found and its.count == 1
    assert (its.starts[0], its.ends[0]) == (profile.meta.start, profile.meta.end)
    assert its.candidates[0] == "fwd_bwd"


def test_autograd_ranges_are_never_steps(tmp_path: Path) -> None:
    """PyTorch < 1.5 writes emit_nvtx ops without a namespace (``item, seq = 9``): no step either."""
    names = ["item, seq = 9", "torch::autograd::AccumulateGrad", "sum, seq = 0"] * 4 + ["epoch"] * 2
    profile = load_profile(steps(tmp_path, names))
    its = detect_iterations(profile)
    assert not its.found and its.candidates == ("epoch",)


def test_regular_top_level_range_is_detected_without_key_node(tmp_path: Path) -> None:
    profile = load_profile(steps(tmp_path, ["fwd_bwd"] * 4))
    its = detect_iterations(profile)
    assert its.found and its.key_node == "fwd_bwd" and its.count == 4
    assert "repeats most regularly" in its.reason


@pytest.mark.parametrize(("start", "stop", "message"), [
    (4, None, "--iter_start=4 is out of range"),
    (None, 7, "--iter_stop=7 is out of range"),
    (3, 1, "--iter_start=3 is after --iter_stop=1"),
])
def test_out_of_range_iterations_name_the_count(tmp_path: Path, start, stop, message) -> None:
    profile = load_profile(steps(tmp_path, ["train_step"] * 4))
    with pytest.raises(OptionsError, match=message) as err:
        detect_iterations(profile, None, start, stop)
    if "out of range" in message:
        assert "has 4 iterations (0 to 3)" in str(err.value)


def test_gpu_utilization_is_averaged_over_gpus_and_partition_counts_overlap_once(tmp_path: Path) -> None:
    """GIVEN one 1000 ns step; GPU 0 busy 600 ns with two overlapping kernels, GPU 1 busy 200 ns."""
    b = ExportBuilder()
    b.range(0, 1000, "train_step")
    b.launch(10, 20, 100, 500, name="a", device=0)
    b.launch(30, 40, 300, 700, name="b", device=0, stream=8)  # overlaps a on another stream
    b.launch(50, 60, 800, 1000, name="c", device=1)
    rep, _ = reports(b.write(tmp_path / "two_gpus.sqlite"), tmp_path)
    values = rep["summary"].table("summary").values
    assert values["wall_clock_ns"] == 1000
    assert values["gpu_utilization_pct"] == 40.0  # (600 + 200) / 2 GPUs / 1000 ns
    # Kernel time in the partition counts each instant once: [100, 700) and [800, 1000).
    assert values["kernel_duration_pct"] == 80.0
    # API calls are CPU time where no kernel runs: [10, 20), [30, 40), [50, 60).
    assert values["cpu_duration_pct"] == 3.0
    assert values["other_duration_pct"] == 17.0
