"""Figures a user acts on, on a job of ranks: one meaning per figure, the same number wherever it appears, and a
time at stake checked against what a recorded fix saves.

The data: two recordings of one two-rank DDP job made the same way one after the other (fixtures/kineto/README.md):
``ddp2_straggler`` (rank 1 sleeps 25 ms on the CPU before forward in every step, outside every range) and
``ddp2_balanced``. Expected values come from the recordings' own truth files (the CUDA-event step times the
training script measured), from the JSON traces, and from the reports' other tables, never from the figure
under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import dlprof_csv
from .conftest import fixture_path


def folder(name: str) -> Path:
    return fixture_path(f"kineto/{name}/truth_rank0.json", f"Kineto fixture {name}").parent


def pace(name: str) -> float:
    """The recorded GPU pace of the job's steps (ms): the slower rank's (the step waits for it)."""
    return max(json.loads((folder(name) / f"truth_rank{r}.json").read_text())["gpu_pace_ms_per_step"] for r in (0, 1))


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dlagg.cli import main

    out = tmp_path_factory.mktemp("straggler")
    assert main([f"--trace={folder('ddp2_straggler')}", "--reports=all", "--formats=csv,json",
                 f"--output_path={out}"]) == 0
    return out


def findings(out: Path) -> list[dict]:
    table = json.loads((out / "dlagg_expert_systems.json").read_text())["tables"][0]
    keys = [f["key"] for f in table["fields"]]
    return [dict(zip(keys, row, strict=True)) for row in table["rows"]]


def ranks_table(out: Path):  # type: ignore[no-untyped-def]
    return dlprof_csv.table(out / "dlagg_ranks.csv").set_index("Rank")


def test_the_straggler_is_named_with_the_wait_the_ranks_report_shows(straggler_run: Path) -> None:
    found = next(f for f in findings(straggler_run) if f["detector"] == "straggler")
    assert found["problem"].startswith("Rank 1 is a straggler")
    wait_ms = ranks_table(straggler_run).loc[0, "Communication Wait Time (ns)"] / 1e6
    assert f"the other ranks wait {wait_ms:.2f} ms per iteration (ranks report: Communication Wait Time)" in \
        found["problem"]


def test_the_straggler_s_cause_is_the_host_time_outside_every_range_it_was_given(straggler_run: Path) -> None:
    """The script slept 25 ms outside every range on rank 1: the finding names that class and about that time."""
    found = next(f for f in findings(straggler_run) if f["detector"] == "straggler")
    assert "time inside the key range outside every sub-range" in found["recommendation"]
    extra = float(found["recommendation"].split("takes ")[1].split(" ms")[0])
    truth = json.loads((folder("ddp2_straggler") / "truth_rank1.json").read_text())
    assert extra == pytest.approx(truth["straggler_ms"], rel=0.25)


def test_the_time_at_stake_bounds_what_the_balanced_recording_saves(straggler_run: Path) -> None:
    """What the step would save if rank 1 were as fast as rank 0 is at least what the balanced recording of the
    same job saves (the truth files' paces), and far nearer to it than the waits the old figure quoted."""
    found = next(f for f in findings(straggler_run) if f["detector"] == "straggler")
    saved = pace("ddp2_straggler") - pace("ddp2_balanced")
    stake = found["time_at_stake_ns"] / 1e6
    wait = ranks_table(straggler_run).loc[0, "Communication Wait Time (ns)"] / 1e6
    assert saved <= stake < wait
    assert stake <= 2 * saved


def test_one_gpu_utilization_per_meaning(straggler_run: Path) -> None:
    """GPU Utilization % is DLProf's (time a kernel runs) everywhere: each rank's in the ranks report, their mean in
    the job's summary; the underutilized-GPU finding names its rank and quotes that rank's figure."""
    ranks = ranks_table(straggler_run)
    summary = dlprof_csv.read(straggler_run / "dlagg_summary.csv")["Summary Report"].values()
    assert float(summary["GPU Utilization %"]) == pytest.approx(ranks["GPU Utilization %"].mean(), abs=0.051)
    found = next(f for f in findings(straggler_run) if f["detector"] == "underutilized_gpu")
    rank = int(found["ranks"])
    assert found["problem"].startswith(f"On rank {rank}: ")
    assert f"GPU Utilization is {ranks.loc[rank, 'GPU Utilization %']:.1f}%" in found["problem"]


def test_column_titles_do_not_change_with_the_number_of_ranks(straggler_run: Path) -> None:
    kernel = dlprof_csv.table(straggler_run / "dlagg_kernel.csv")
    assert "Total GPU Time (ns)" in kernel.columns and not [c for c in kernel.columns if "sum over" in c]
    table = json.loads((straggler_run / "dlagg_kernel.json").read_text())["tables"][0]
    assert table["note"].startswith("times summed over 2 ranks")


def test_times_at_stake_that_add_up_past_the_iteration_carry_a_note(straggler_run: Path) -> None:
    found = findings(straggler_run)
    total = sum(f["time_at_stake_ns"] or 0 for f in found) / 1e6
    iteration = ranks_table(straggler_run)["Avg Iteration Time (ns)"].mean() / 1e6
    assert total > iteration  # these findings share time
    note = json.loads((straggler_run / "dlagg_expert_systems.json").read_text())["tables"][0].get("note", "")
    assert "overlap" in note and f"{total:.2f} ms" in note
    order = [f["detector"] for f in found]
    assert order.index("straggler") < order.index("communication")  # the cause above its consequence
