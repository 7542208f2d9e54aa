"""Damaged and odd PyTorch profiler traces, built in the test from the real fixtures (fixtures/kineto/).

Bad input gets one clear line on stderr (``dlagg: error: <file>: what; what to do``), exit 1, no traceback
and no output left behind; odd but readable input gets a warning and the same figures as the trace it was made
from. Each trace is the fixture's JSON loaded with the standard library, changed, and written back (plain or
gzip) with ``json.dumps``, whose floats round-trip exactly; expected figures come from the reader on the
unchanged fixture (checked against the JSON itself in tests/test_kineto.py) or from the JSON directly.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from decimal import Decimal
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from dlagg.model import Profile
from dlagg.reader import kineto, load_profile
from dlagg.reader.discover import discover

from .conftest import dlagg, fixture_path, recording
from .marks import quick_on

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# What a CPU-only recording lacks: GPU work, the CUDA calls that launched it, and the flows joining them.
CUDA_CATS = (*GPU_CATS, "cuda_runtime", "cuda_driver", "cuda_sync", "gpu_user_annotation", "ac2g")
# PyTorch 1.8's names of the categories (before "cpu_op", "cuda_runtime", "gpu_memcpy", ...).
OLD_CATS = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel", "gpu_memcpy": "Memcpy",
            "gpu_memset": "Memset"}


def fixture(name: str, rank: int = 0) -> Path:
    folder = fixture_path(f"kineto/{name}/truth_rank0.json", f"Kineto fixture {name}").parent
    return sorted(folder.glob(f"rank{rank}.*.pt.trace.json.gz"))[0]


@cache
def text(name: str, rank: int = 0) -> bytes:
    """The fixture's JSON text, as the profiler wrote it."""
    return gzip.decompress(fixture(name, rank).read_bytes())


def trace(name: str = "resnet_amp", rank: int = 0) -> dict:
    """A fresh copy of the fixture's JSON, to change."""
    return json.loads(text(name, rank))


def write(folder: Path, content: dict | bytes, name: str = "rank0.1.pt.trace.json", gz: bool = False) -> Path:
    """`content` (a trace's JSON, dumped with the indentation of the profiler's top level) at folder/name."""
    data = content if isinstance(content, bytes) else json.dumps(content, indent=2).encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name + ".gz" if gz else name)
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    return path


@cache
def reference(name: str = "resnet_amp", rank: int = 0) -> Profile:
    return load_profile(fixture(name, rank))


def kernel_totals(profile: Profile) -> dict[str, int]:
    """Total kernel time (ns) per kernel name."""
    kernels = profile.kernels
    names = profile.strings.decode(kernels["name_id"]).to_numpy()
    return pd.Series((kernels["end"] - kernels["start"]).to_numpy(), index=names).groupby(level=0).sum().to_dict()


def figures(profile: Profile) -> tuple:
    """What a reordered or re-laid-out trace must keep: kernel totals, the number of rows of every table,
    the threads, the first and last time."""
    return (kernel_totals(profile), {t: len(getattr(profile, t)) for t in ("kernels", "memcpy", "memset", "sync",
                                                                          "runtime", "nvtx")},
            profile.runtime["global_tid"].nunique(), profile.nvtx["global_tid"].nunique(),
            profile.meta.start, profile.meta.end)


def json_kernel_totals(events: list[dict]) -> dict[str, int]:
    sums: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == "kernel" and "dur" in e:
            sums[e["name"]] += int(Decimal(repr(e["dur"])) * 1000)
    return dict(sums)


def run(capsys, tmp_path: Path, given: Path, *extra: str) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    code, stdout, err = dlagg(capsys, f"--trace={given}", "--reports=summary,kernel,iteration", "--formats=csv,json",
                              f"--output_path={out}", *extra)
    assert "Traceback" not in err and "internal error" not in err, err
    return code, err, out


def warned(err: str, *words: str) -> list[str]:
    """The warning lines holding every one of `words`."""
    return [line for line in err.splitlines() if line.startswith("dlagg: warning: ") and all(w in line for w in words)]


def refused(capsys, tmp_path: Path, given: Path, named: Path, *words: str) -> str:
    """Runs dlagg on `given` and checks it stops with one clear line naming `named` and saying `words`, and leaves
    nothing behind: no output folder, no staging folder, nothing changed beside the inputs."""
    before = sorted(tmp_path.rglob("*"))
    code, err, out = run(capsys, tmp_path, given)
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith("dlagg: error: "), err
    assert named.name in err and all(w in err for w in words), err
    assert not out.exists() or not any(out.iterdir())
    assert sorted(tmp_path.rglob("*")) == before
    return err


# ---------------------------------------------------------------- damaged files: one clear line


def test_truncated_gzip(tmp_path: Path, capsys) -> None:
    packed = fixture("resnet_amp").read_bytes()
    path = tmp_path / "rank0.1.pt.trace.json.gz"
    path.write_bytes(packed[:len(packed) // 2])
    refused(capsys, tmp_path, path, path, "gzip file is damaged or cut short")


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_truncated_json(gz: bool, tmp_path: Path, capsys) -> None:
    whole = text("resnet_amp")
    path = write(tmp_path, whole[:len(whole) * 3 // 5], gz=gz)
    refused(capsys, tmp_path, path, path, "the JSON is cut short", "whole")


def test_json_cut_within_the_head(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, text("resnet_amp")[:600])
    refused(capsys, tmp_path, path, path, "the JSON is cut short")


def test_empty_trace_events(tmp_path: Path, capsys) -> None:
    data = trace()
    data["traceEvents"] = []
    path = write(tmp_path, data, gz=True)
    refused(capsys, tmp_path, path, path, "holds no profiler events")


def test_json_that_is_not_a_trace_given_directly(tmp_path: Path, capsys) -> None:
    truth = fixture("resnet_amp").with_name("truth_rank0.json")
    refused(capsys, tmp_path, truth, truth, "is JSON but not a PyTorch profiler trace")


def test_gzipped_sqlite_export_says_to_gunzip(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cuda_basic.sqlite.gz"
    path.write_bytes(gzip.compress(recording("cuda_basic").read_bytes(), compresslevel=1))
    refused(capsys, tmp_path, path, path, "gzip", "gunzip")


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_top_level_not_an_object(gz: bool, tmp_path: Path, capsys) -> None:
    """A bare list of events (a Chrome trace's other form) with the trace's keys inside: not what torch writes."""
    path = write(tmp_path, json.dumps(trace()["traceEvents"][:50]).encode(), gz=gz)
    refused(capsys, tmp_path, path, path, "not")


# ---------------------------------------------------------------- events without a duration


def test_some_events_without_dur_are_left_out_with_a_warning(tmp_path: Path, capsys) -> None:
    data = trace()
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[::10]:
        del e["dur"]
    path = write(tmp_path, data)
    code, err, out = run(capsys, tmp_path, path)
    assert code == 0, err
    assert len(warned(err, path.name, f"{len(kernels[::10]):,} events without a usable time or duration")) == 1, err
    assert kernel_totals(load_profile(path)) == json_kernel_totals(data["traceEvents"])
    assert (out / "dlagg_kernel.csv").exists()


def test_all_events_without_dur_is_one_clear_line(tmp_path: Path, capsys) -> None:
    data = trace()
    for e in data["traceEvents"]:
        e.pop("dur", None)
    path = write(tmp_path, data)
    refused(capsys, tmp_path, path, path, "events has a usable time and duration (ts, dur)")


# ---------------------------------------------------------------- odd but readable: a warning, the same figures


def test_unknown_categories_are_named_and_figures_stay(tmp_path: Path, capsys) -> None:
    data = trace()
    renamed = 0
    for e in data["traceEvents"]:
        if e.get("cat") == "gpu_user_annotation":
            e["cat"], renamed = "gpu_mystery", renamed + 1
    data["traceEvents"].append({"ph": "X", "cat": "quantum_op", "name": "q", "pid": 1, "tid": 1, "ts": 1.0,
                                "dur": 1.0})
    path = write(tmp_path, data)
    code, err, _ = run(capsys, tmp_path, path)
    assert code == 0 and renamed > 0, err
    assert len(warned(err, path.name, "categories dlagg does not know", f"gpu_mystery ({renamed:,})",
                      "quantum_op (1)")) == 1, err
    assert kernel_totals(load_profile(path)) == kernel_totals(reference())


SCHEMAS = [(None, None), (1, None), (2, "newer profiler")]


@pytest.mark.parametrize(("version", "warning"), quick_on(SCHEMAS[-1], SCHEMAS, pytest.mark.variants))
def test_schema_versions(version: int | None, warning: str | None, tmp_path: Path, capsys) -> None:
    data = trace()
    data.pop("schemaVersion")
    if version is not None:
        data = {"schemaVersion": version, **data}
    path = write(tmp_path, data, gz=True)
    code, err, _ = run(capsys, tmp_path, path)
    assert code == 0, err
    schema = warned(err, "schemaVersion")
    assert (len(schema) == 1 and warning in schema[0] and path.name in schema[0]) if warning else not schema, err
    assert figures(load_profile(path)) == figures(reference())


def test_pytorch_1_8_capitalised_categories_map_the_same(tmp_path: Path, capsys) -> None:
    data = trace()
    for e in data["traceEvents"]:
        if e.get("cat") in OLD_CATS:
            e["cat"] = OLD_CATS[e["cat"]]
    assert {e.get("cat") for e in data["traceEvents"]} >= set(OLD_CATS.values())
    data.pop("schemaVersion")  # 1.8 wrote none
    path = write(tmp_path, data)
    code, err, _ = run(capsys, tmp_path, path)
    assert code == 0 and not warned(err, "does not know"), err
    assert figures(load_profile(path)) == figures(reference())


def test_cpu_only_trace_warns_and_writes_the_summary(tmp_path: Path, capsys) -> None:
    data = trace()
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") not in CUDA_CATS]
    path = write(tmp_path, data, gz=True)
    code, err, out = run(capsys, tmp_path, path, "--reports=summary")
    assert code == 0, err
    assert len(warned(err, path.name, "no CUDA activity")) == 1, err
    assert (out / "dlagg_summary.csv").exists()
    assert len(load_profile(path).kernels) == 0


def test_keys_in_another_order(tmp_path: Path, capsys) -> None:
    """traceEvents first, the keys after it: the reader parses the trace whole, the probe finds distributedInfo."""
    data = trace()
    data = {"traceEvents": data.pop("traceEvents"), **data,
            "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2}}
    path = write(tmp_path, data)
    assert kineto.probe_kineto(path).distributed == kineto.Distributed("nccl", 1, 2)
    assert figures(load_profile(path)) == figures(reference())
    code, err, _ = run(capsys, tmp_path, path)
    assert code == 0 and len(warned(err, "no trace for rank 0")) == 1, err


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_trace_on_one_line(gz: bool, tmp_path: Path) -> None:
    """No newline anywhere (another writer's layout): the block splitter finds no boundary and the trace is
    parsed whole."""
    path = write(tmp_path, text("resnet_amp").replace(b"\n", b""), gz=gz)
    assert figures(load_profile(path)) == figures(reference())


def test_small_blocks_give_the_same_figures(tmp_path: Path, monkeypatch) -> None:
    """The profiler's own layout cut into many blocks (each a few events) reads as one block does."""
    monkeypatch.setattr(kineto, "BLOCK_BYTES", 4096)
    path = write(tmp_path, text("resnet_amp"))
    assert figures(load_profile(path)) == figures(reference())


def test_integer_timestamps(tmp_path: Path) -> None:
    data = trace()
    for e in data["traceEvents"]:
        if "ts" in e:
            e["ts"] = int(e["ts"])
    path = write(tmp_path, data)
    profile = load_profile(path)
    assert kernel_totals(profile) == kernel_totals(reference())
    assert not [w for w in profile.meta.warnings if "usable" in w]


def test_pid_and_tid_as_strings(tmp_path: Path) -> None:
    data = trace()
    for e in data["traceEvents"]:
        for key in ("pid", "tid"):
            if key in e:
                e[key] = str(e[key])
    path = write(tmp_path, data)
    assert figures(load_profile(path)) == figures(reference())


# ---------------------------------------------------------------- a folder of ranks


def ranks_folder(tmp_path: Path, *traces: tuple[str, dict | Path]) -> Path:
    """A folder holding (name, trace) pairs: a JSON to write, or a fixture to copy."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for name, content in traces:
        if isinstance(content, Path):
            shutil.copy(content, folder / name)
        else:
            write(folder, content, name, gz=True)
    return folder


@pytest.mark.processes
def test_different_world_sizes(tmp_path: Path, capsys) -> None:
    other = trace("ddp2", 1)
    other["distributedInfo"]["world_size"] = 4
    folder = ranks_folder(tmp_path, ("rank0.1.pt.trace.json.gz", fixture("ddp2", 0)),
                          ("rank1.1.pt.trace.json", other))
    refused(capsys, tmp_path, folder, folder / "rank1.1.pt.trace.json.gz", "different world sizes (2, 4)",
            "rank0.1.pt.trace.json.gz of 2")


@pytest.mark.processes
def test_traces_recorded_at_different_times(tmp_path: Path, capsys) -> None:
    """Same world size, but rank 1's profile was recorded an hour after rank 0's: not one run."""
    other = trace("ddp2", 1)
    other["baseTimeNanoseconds"] += 3600 * 10**9
    folder = ranks_folder(tmp_path, ("rank0.1.pt.trace.json.gz", fixture("ddp2", 0)),
                          ("rank1.1.pt.trace.json", other))
    err = refused(capsys, tmp_path, folder, folder / "rank1.1.pt.trace.json.gz", "do not overlap", "one run")
    assert "rank0.1.pt.trace.json.gz" in err


def test_the_ranks_of_one_run_overlap() -> None:
    """The check above leaves the real ranks alone (their profiles overlap all along)."""
    job = discover([fixture("ddp2", 0), fixture("ddp2", 1)])
    assert [s.rank for s in job.sources] == [0, 1] and not job.notes


def test_two_traces_for_one_rank(tmp_path: Path, capsys) -> None:
    folder = ranks_folder(tmp_path, ("rank0.1.pt.trace.json.gz", fixture("ddp2", 0)),
                          ("rank0.2.pt.trace.json.gz", fixture("ddp2", 0)))
    refused(capsys, tmp_path, folder, folder / "rank0.2.pt.trace.json.gz", "a second trace for rank 0")


@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_rank_missing_is_a_warning(given: str, tmp_path: Path, capsys) -> None:
    folder = ranks_folder(tmp_path, ("rank1.1.pt.trace.json.gz", fixture("ddp2", 1)))
    code, err, out = run(capsys, tmp_path, folder if given == "folder" else folder / "rank1.1.pt.trace.json.gz",
                         "--reports=summary")
    assert code == 0, err
    assert len(warned(err, "the run had 2 ranks; no trace for rank 0")) == 1, err
    assert (out / "dlagg_summary.csv").exists()
