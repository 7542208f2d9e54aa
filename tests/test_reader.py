"""The reader on every real export: row counts, strings, schema differences, read-only access."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dlagg.options import Options
from dlagg.pipeline import run
from dlagg.reader import load_profile

from .builders import ExportBuilder
from .conftest import RECORDINGS, public_fixtures, recording, recording_dir

TABLES = {"kernels": "CUPTI_ACTIVITY_KIND_KERNEL", "runtime": "CUPTI_ACTIVITY_KIND_RUNTIME",
          "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY", "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}


@pytest.mark.parametrize("name", RECORDINGS)
def test_row_counts_equal_the_export(name: str) -> None:
    profile = load_profile(recording(name))
    counts = json.loads((recording_dir(name) / "meta.json").read_text())["table_row_counts"]
    for frame, table in TABLES.items():
        assert len(getattr(profile, frame)) == counts.get(table, 0), table
    by_type = json.loads((recording_dir(name) / "meta.json").read_text())["summary"]["nvtx_events_by_type"]
    ranges = sum(n for kind, n in by_type.items() if kind.endswith("Range"))  # no marks, no domain rows
    assert len(profile.nvtx) == ranges


def test_nvtx_text_and_registered_strings_are_both_read(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 10, "inline_name")
    b.range(20, 30, "registered_name", registered=True)
    profile = load_profile(b.write(tmp_path / "t.sqlite"))
    assert profile.strings.decode(profile.nvtx["text_id"]).tolist() == ["inline_name", "registered_name"]


def test_nvtx_domains_and_negative_domain_starts() -> None:
    profile = load_profile(recording("no_emit_nvtx"))
    meta = json.loads((recording_dir("no_emit_nvtx") / "meta.json").read_text())["summary"]
    assert profile.meta.domains[1] == meta["nvtx_domains"]["1"] == "cuBLAS"
    assert (profile.nvtx["start"] >= 0).all()  # domain-create rows (negative starts) are not events
    assert profile.meta.start > 0


def test_open_ranges_end_with_the_profile(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 50, "train_step")
    b.range(60, None, "never_closed")
    b.launch(70, 80, 90, 120)
    profile = load_profile(b.write(tmp_path / "open.sqlite"))
    row = profile.nvtx[profile.strings.decode(profile.nvtx["text_id"]).to_numpy() == "never_closed"]
    assert row["end"].tolist() == [profile.meta.end] and profile.meta.end == 120


def test_invalid_named_api_rows_are_kept_as_calls() -> None:
    profile = load_profile(recording("cuda_basic"))
    names = profile.strings.decode(profile.runtime["name_id"])
    meta = json.loads((recording_dir("cuda_basic") / "meta.json").read_text())["summary"]
    assert (names == "INVALID").sum() == meta["cuda_api_rows_named_INVALID"] == 56


def test_mangled_kernel_names_are_read_when_the_export_has_them(tmp_path: Path) -> None:
    path = recording("resnet_amp")
    profile = load_profile(path)
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        expected = [v for (v,) in conn.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                               "JOIN StringIds s ON s.id = k.mangledName ORDER BY k.rowid")]
    assert profile.strings.decode(profile.kernels["mangled_name_id"]).tolist() == expected
    b = ExportBuilder()  # the builder's kernel table has no mangledName column, like nsys 2021.2's
    b.launch(0, 10, 20, 30, "k")
    older = load_profile(b.write(tmp_path / "old.sqlite"))
    assert older.kernels["mangled_name_id"].tolist() == [-1]


def test_export_metadata_of_old_and_new_schemas() -> None:
    newest = [p for p in public_fixtures() if p.name.startswith("cestwc")]
    oldest = [p for p in public_fixtures() if p.name.startswith("bwyogatama")]
    if not newest or not oldest:
        pytest.skip("public fixtures not available")
    new = load_profile(newest[0])  # nsys 2025.5: META_DATA_EXPORT, greenContextId, extra columns
    assert new.meta.nsys_version.startswith("2025.5") and len(new.kernels) == sql_count(newest[0]) > 0
    old = load_profile(oldest[0])  # nsys 2021.2: no metadata table, no mangledName
    assert old.meta.nsys_version == "" and len(old.kernels) == sql_count(oldest[0]) > 0
    # kernel counts by SQL (public/SOURCES.md lists the same: 9359 and 12); the version as the export states it
    with sqlite3.connect(f"file:{newest[0]}?mode=ro&immutable=1", uri=True) as conn:
        (version,) = conn.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
    conn.close()
    assert new.meta.nsys_version == version


def sql_count(path: Path, table: str = "CUPTI_ACTIVITY_KIND_KERNEL") -> int:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        (count,) = conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
    conn.close()
    return count


@pytest.mark.parametrize("path", public_fixtures(), ids=lambda p: p.name.split("__")[0])
def test_every_public_export_gives_reports_or_a_clean_message(path: Path, tmp_path: Path) -> None:
    before = path.stat().st_mtime_ns
    result = run(Options(nsys_database=path, reports=("all",), formats=("csv", "json"), output_path=tmp_path,
                         suppress_tb_files=True, verbosity="quiet"))
    assert any(r.name == "summary" for r in result.reports)
    assert (tmp_path / "dlagg_summary.csv").exists()
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        kernel_tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                         if t.startswith("CUPTI_ACTIVITY_KIND_KERNEL")]
        launched = kernel_tables and conn.execute(f"SELECT COUNT(*) FROM {kernel_tables[0]}").fetchone()[0] > 0
    if launched:
        kernel = next(r for r in result.reports if r.name == "kernel")
        if not result.iterations.found:  # one iteration spans the profile: every kernel is in it
            with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
                total, count = conn.execute(
                    'SELECT SUM("end" - start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
            assert kernel.main.frame["gpu_time_total_ns"].sum() == total
            assert kernel.main.frame["calls"].sum() == count
    else:
        assert any("no CUDA kernels" in w for w in result.warnings)
    assert path.stat().st_mtime_ns == before


def test_reader_never_writes(tmp_path: Path) -> None:
    """Even on a writable copy: no journal, no index, no new column (DLProf added columns)."""
    path = tmp_path / "copy.sqlite"
    path.write_bytes(recording("resnet_amp").read_bytes())
    schema_before = sqlite3.connect(path).execute("SELECT sql FROM sqlite_master").fetchall()
    load_profile(path)
    assert sqlite3.connect(path).execute("SELECT sql FROM sqlite_master").fetchall() == schema_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite"]
