"""Shared test helpers: where the real fixtures are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "fixtures"
SHARED = Path(os.environ.get("DLAGG_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))

RECORDINGS = ("cuda_basic", "resnet_fp32", "resnet_amp", "dataloader_bound", "no_emit_nvtx", "h2d_heavy",
              "cuda_graph", "cpu_nvtx_numpy")


def recording_dir(name: str) -> Path:
    """Folder of an nsys-2022.4 recording (bundled first, then ../shared); skips when absent."""
    for base in (BUNDLED, SHARED):
        folder = base / "nsys-2022.4" / name
        if (folder / f"{name}.sqlite").exists():
            return folder
    pytest.skip(f"fixture {name} not available (neither in fixtures/ nor in {SHARED})")


def recording(name: str) -> Path:
    return recording_dir(name) / f"{name}.sqlite"


def public_fixtures() -> list[Path]:
    """Every public export: bundled ones, plus ../shared/fixtures/public when it exists."""
    found = {p.name: p for p in sorted((SHARED / "public").glob("*.sqlite"))}
    found.update({p.name: p for p in sorted((BUNDLED / "public").glob("*.sqlite"))})
    return [found[k] for k in sorted(found)]


def nvprof_fixture(name: str) -> Path:
    """A file of the nvprof fixture (bundled first, then ../shared); skips when absent."""
    for base in (BUNDLED, SHARED):
        path = base / "nvprof" / name
        if path.exists():
            return path
    pytest.skip(f"nvprof fixture {name} not available (neither in fixtures/ nor in {SHARED})")


def ncu_dir(name: str) -> Path:
    """Folder of an Nsight Compute fixture (bundled first, then ../shared); skips when absent."""
    for base in (BUNDLED, SHARED):
        folder = base / "ncu" / name
        if (folder / f"{name}_raw.csv.gz").exists():
            return folder
    pytest.skip(f"ncu fixture {name} not available (neither in fixtures/ nor in {SHARED})")


def ncu_csv(name: str) -> Path:
    return ncu_dir(name) / f"{name}_raw.csv.gz"
