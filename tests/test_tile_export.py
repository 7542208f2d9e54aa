"""The benchmark's tiler: N time-shifted copies that keep every id join of the export valid."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import numpy as np

from dlagg.reader import load_profile
from dlagg.timeline.correlate import gpu_work
from dlagg.timeline.iterations import detect_iterations

from .conftest import recording

TILER = Path(__file__).parents[1] / "benchmarks" / "tile_export.py"
_SPEC = importlib.util.spec_from_file_location("tile_export", TILER)
tile_export = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tile_export)


def test_three_copies_triple_everything_and_keep_every_join(tmp_path: Path) -> None:
    source = recording("cuda_basic")
    before = source.read_bytes()
    target = tile_export.tile(source, tmp_path / "x3.sqlite", 3, log=lambda _: None)
    assert source.read_bytes() == before  # the source is only read

    one, three = load_profile(source), load_profile(target)
    for frame in ("kernels", "runtime", "memcpy", "memset", "nvtx"):
        assert len(getattr(three, frame)) == 3 * len(getattr(one, frame)), frame
    assert three.meta.domains == one.meta.domains  # domain rows are not copied
    # Every GPU operation still finds exactly its launching call: same count of joined rows x3.
    joined_one = (gpu_work(one)["api_start"] >= 0).sum()
    work = gpu_work(three)
    assert (work["api_start"] >= 0).sum() == 3 * joined_one
    assert (work["api_start"] <= work["start"]).all()
    # Strings unchanged: kernel names per copy are the originals.
    names = three.strings.decode(three.kernels["name_id"]).to_numpy()
    assert (names.reshape(3, -1) == one.strings.decode(one.kernels["name_id"]).to_numpy()).all()
    # Copies follow one another: three times the iterations, non-overlapping in time.
    assert detect_iterations(three, "train_step").count == 3 * detect_iterations(one, "train_step").count
    starts = three.kernels["start"].to_numpy().reshape(3, -1)
    ends = three.kernels["end"].to_numpy().reshape(3, -1)
    assert (ends[:-1].max(axis=1) < starts[1:].min(axis=1)).all()
    with sqlite3.connect(target) as conn:
        corr = np.array([r[0] for r in conn.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")])
    assert len(np.unique(corr)) == len(corr)
