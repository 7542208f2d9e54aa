"""The read cache (dlagg/reader/cache.py): the same report bytes with and without it, and no trust in what it holds.

Expected values come from runs with --cache=false (the reader itself) and from cache entries damaged by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlagg import options
from dlagg.reader import cache, load_profile

from .conftest import dlagg, fixture_path, recording
from .marks import quick_on

NOTE = "dlagg: note:"


def outputs(folder: Path) -> dict[str, bytes]:
    """Every CSV and JSON output under `folder`, by path: the bytes a user reads."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.suffix in (".csv", ".json")}


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(NOTE)]


def run(capsys, tmp_path: Path, out: str, inputs: str, *args: str) -> tuple[dict[str, bytes], str]:
    """One in-process run into tmp_path/out: its CSV and JSON outputs and its stderr."""
    code, _, err = dlagg(capsys, f"--nsys_database={inputs}", "--reports=all", "--formats=csv,json",
                         f"--output_path={tmp_path / out}", *args)
    assert code == 0, err
    written = outputs(tmp_path / out)
    assert written, err
    return written, err


def entries(folder: Path, kind: str = "") -> list[Path]:
    """The read's entries in `folder` (`kind=".ops"`: the ops' entries)."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p.name.endswith(kind) if kind else "." not in p.name))


def two_ranks_nsys(multi) -> str:
    return str(multi("ddp2_gpt_per_rank"))


def kineto_two_ranks() -> str:
    return str(fixture_path("kineto/ddp2/truth_rank0.json", "Kineto fixture ddp2").parent / "rank*.pt.trace.json.gz")


@pytest.mark.parametrize("which", quick_on("resnet_amp", ["resnet_amp", "kineto_ddp2", "nsys_ddp2"]))
def test_reports_are_the_same_bytes_with_and_without_the_cache(which: str, tmp_path: Path, capsys, multi) -> None:
    inputs = {"resnet_amp": lambda: str(recording("resnet_amp")), "kineto_ddp2": kineto_two_ranks,
              "nsys_ddp2": lambda: two_ranks_nsys(multi)}[which]()
    folder = tmp_path / "cache"
    with_cache = f"--cache_dir={folder}"
    bounds = ("--iter_start=2", "--iter_stop=4")
    uncached, _ = run(capsys, tmp_path, "plain", inputs, "--cache=false")
    cold, err = run(capsys, tmp_path, "cold", inputs, with_cache)
    assert entries(folder) and not notes(err)
    warm, err = run(capsys, tmp_path, "warm", inputs, with_cache)
    assert not notes(err)
    assert cold == uncached and warm == uncached
    # the second look: other iteration bounds, from the cache, as the reader would give them
    other_uncached, _ = run(capsys, tmp_path, "other_plain", inputs, "--cache=false", *bounds)
    other_warm, _ = run(capsys, tmp_path, "other_warm", inputs, with_cache, *bounds)
    assert other_warm == other_uncached and other_warm != uncached


def test_the_cache_is_off_with_cache_false_and_the_input_is_never_changed(tmp_path: Path, capsys) -> None:
    export = recording("resnet_amp")
    before = (hashlib.sha256(export.read_bytes()).hexdigest(), export.stat().st_mtime_ns)
    run(capsys, tmp_path, "off", str(export), "--cache=false", f"--cache_dir={tmp_path / 'cache'}")
    assert not (tmp_path / "cache").exists()
    run(capsys, tmp_path, "on", str(export), f"--cache_dir={tmp_path / 'cache'}")
    run(capsys, tmp_path, "again", str(export), f"--cache_dir={tmp_path / 'cache'}")
    assert (hashlib.sha256(export.read_bytes()).hexdigest(), export.stat().st_mtime_ns) == before


def _truncate(entry: Path) -> None:
    path = entry / "nvtx.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _remove(entry: Path) -> None:
    (entry / "kernels.parquet").unlink()


def _wrong_schema(entry: Path) -> None:
    """The kernels file rewritten with one column of another type (a valid Parquet file)."""
    path = entry / "kernels.parquet"
    table = pq.read_table(path)
    table = table.set_column(0, table.field(0).name, pa.array([str(v) for v in table.column(0).to_pylist()]))
    pq.write_table(table, path)


def _fewer_rows(entry: Path) -> None:
    path = entry / "runtime.parquet"
    pq.write_table(pq.read_table(path).slice(0, 10), path)


def _manifest(entry: Path) -> None:
    (entry / cache.MANIFEST).write_text('{"identity": ')


def _another_file(entry: Path) -> None:
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    manifest["identity"]["size"] += 1
    (entry / cache.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", quick_on(_truncate, [_truncate, _remove, _wrong_schema, _fewer_rows, _manifest,
                                                     _another_file], pytest.mark.variants))
def test_a_damaged_entry_is_one_note_and_read_again(damage, tmp_path: Path, capsys) -> None:
    export = str(recording("resnet_amp"))
    folder = tmp_path / "cache"
    uncached, _ = run(capsys, tmp_path, "plain", export, "--cache=false")
    run(capsys, tmp_path, "cold", export, f"--cache_dir={folder}")
    (entry,) = entries(folder)
    damage(entry)
    again, err = run(capsys, tmp_path, "damaged", export, f"--cache_dir={folder}")
    assert again == uncached
    assert len(notes(err)) == 1 and "damaged" in notes(err)[0], err
    assert [e.name for e in entries(folder)] == [entry.name]  # rebuilt
    rebuilt, err = run(capsys, tmp_path, "rebuilt", export, f"--cache_dir={folder}")
    assert rebuilt == uncached and not notes(err)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_cache_folder_that_cannot_be_written_is_one_note(tmp_path: Path, capsys, multi) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    uncached, _ = run(capsys, tmp_path, "plain", two_ranks_nsys(multi), "--cache=false")
    written, err = run(capsys, tmp_path, "blocked", two_ranks_nsys(multi), f"--cache_dir={blocker / 'cache'}")
    assert written == uncached
    assert len(notes(err)) == 1 and "cannot be written" in notes(err)[0], err


def test_a_changed_file_misses_the_cache(tmp_path: Path) -> None:
    """Another size, modification time or content at either end is another key; the folder is not part of it."""
    export = tmp_path / "one" / "resnet_amp.sqlite"
    export.parent.mkdir()
    export.write_bytes(recording("resnet_amp").read_bytes())
    first = cache.identity(export, None)
    moved = tmp_path / "two" / export.name
    moved.parent.mkdir()
    os.rename(export, moved)
    assert cache.identity(moved, None) == first
    assert cache.identity(moved, 123) != first  # one process of the file
    stat = moved.stat()
    os.utime(moved, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert cache.identity(moved, None) != first
    data = bytearray(moved.read_bytes())
    data[-100] ^= 1  # the same size and time, a byte changed near the end
    moved.write_bytes(bytes(data))
    os.utime(moved, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = cache.identity(moved, None)
    assert changed["size"] == first["size"] and changed["mtime_ns"] == first["mtime_ns"] and changed != first


def test_two_runs_writing_one_entry_keep_one_and_say_nothing(tmp_path: Path, capsys) -> None:
    export = recording("resnet_amp")
    profile = load_profile(export)
    ident = cache.identity(export, None)
    entry = tmp_path / cache.entry_name(ident)
    cache.store(tmp_path, entry, ident, profile)
    cache.store(tmp_path, entry, ident, profile)  # the loser of the race: its copy is discarded
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]
    assert not capsys.readouterr().err
    back = cache.read_entry(entry, ident, export, None)
    for name in cache.FRAMES:
        assert getattr(back, name).equals(getattr(profile, name)), name
    assert back.meta == profile.meta


def test_the_folder_comes_from_the_option_the_environment_or_the_xdg_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DLAGG_CACHE_DIR", str(tmp_path / "env"))
    assert options.cache_folder(tmp_path / "given") == tmp_path / "given"
    assert options.cache_folder() == tmp_path / "env"
    monkeypatch.delenv("DLAGG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert options.cache_folder() == tmp_path / "xdg" / "dlagg"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: ignored, as the XDG specification says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert options.cache_folder() == tmp_path / "home" / ".cache" / "dlagg"


def test_pages_found_sound_are_not_checked_again_and_damaged_ones_always_are(tmp_path: Path, capsys,
                                                                            monkeypatch) -> None:
    """A file SQLite's page check found sound is marked in the cache, and its next run skips the check (its read
    comes from the cache too); a damaged file is never marked, so every run refuses it."""
    from dlagg.reader import integrity

    from .test_page_check import _swap_pages

    checked: list[str] = []
    real = integrity._quick_check

    def counted(path: Path) -> str | None:
        checked.append(path.name)
        return real(path)

    monkeypatch.setattr(integrity, "_quick_check", counted)
    folder = tmp_path / "cache"
    export = recording("resnet_amp")
    first, _ = run(capsys, tmp_path, "first", str(export), f"--cache_dir={folder}")
    second, _ = run(capsys, tmp_path, "second", str(export), f"--cache_dir={folder}")
    assert first == second and checked == [export.name]
    assert len(list(folder.glob("*.sound"))) == 1
    damaged = tmp_path / "damaged" / export.name
    damaged.parent.mkdir()
    damaged.write_bytes(export.read_bytes())
    pages = damaged.stat().st_size // 4096
    _swap_pages(damaged, pages // 3, 2 * pages // 3)
    for attempt in ("once", "twice"):
        code, _, err = dlagg(capsys, f"--nsys_database={damaged}", "--reports=summary", f"--cache_dir={folder}",
                             f"--output_path={tmp_path / attempt}")
        assert code != 0 and "damaged" in err, err
    assert checked == [export.name] * 3 and len(list(folder.glob("*.sound"))) == 1


def test_an_exports_ranks_are_probed_once_and_again_when_damaged_or_changed(tmp_path: Path, capsys, monkeypatch,
                                                                            multi) -> None:
    """Discovery's probe of an export (its queries scan the event tables) is kept beside the read: the next run on the
    unchanged file asks the file nothing more; a damaged answer, or a changed file, is probed again."""
    import sqlite3

    from dlagg.reader import discover

    export = tmp_path / "in" / "ddp2.sqlite"
    export.parent.mkdir()
    export.write_bytes((multi("ddp2_gpt_one_session") / "ddp2_gpt_one_session.sqlite").read_bytes())
    folder = tmp_path / "cache"
    quick = ("--workers=1", "--reports=summary")
    first, _ = run(capsys, tmp_path, "first", str(export), f"--cache_dir={folder}", *quick)
    [answer] = folder.glob("*.ranks.json")
    stored = json.loads(answer.read_text(encoding="utf-8"))
    with sqlite3.connect(export) as db:
        pids = sorted(p for (p,) in db.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sorted(pid for pid, _ in stored["processes"]) == pids and len(pids) == 2
    probed: list[Path] = []
    real = discover._probe_export
    monkeypatch.setattr(discover, "_probe_export", lambda path: probed.append(path) or real(path))
    again, _ = run(capsys, tmp_path, "again", str(export), f"--cache_dir={folder}", *quick)
    assert again == first and probed == []
    answer.write_text("{damaged", encoding="utf-8")
    damaged, err = run(capsys, tmp_path, "damaged", str(export), f"--cache_dir={folder}", *quick)
    assert damaged == first and probed == [export] and not notes(err)
    assert json.loads(answer.read_text(encoding="utf-8")) == stored
    stat = export.stat()
    os.utime(export, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    changed, _ = run(capsys, tmp_path, "changed", str(export), f"--cache_dir={folder}", *quick)
    assert changed == first and probed == [export, export] and len(list(folder.glob("*.ranks.json"))) == 2


def counting_op_search(monkeypatch) -> list[int]:
    """Count the op searches of in-process runs (`RankContext.ops` calls `find_ops`)."""
    import dlagg.context

    calls: list[int] = []
    search = dlagg.context.find_ops

    def counted(*args, **kwargs):
        calls.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(dlagg.context, "find_ops", counted)
    return calls


def test_a_second_look_takes_the_ops_from_the_cache_unless_what_they_depend_on_changed(
        tmp_path: Path, capsys, monkeypatch) -> None:
    """Other iteration bounds find the same ops (the search spans the whole profile): no second search, the bytes of
    a run without the cache. Another key node (other iteration windows) searches again."""
    export = str(recording("resnet_amp"))
    folder = tmp_path / "cache"
    calls = counting_op_search(monkeypatch)
    bounds = ("--iter_start=2", "--iter_stop=4")
    run(capsys, tmp_path, "cold", export, f"--cache_dir={folder}")
    assert len(calls) == 1 and len(entries(folder, ".ops")) == 1
    warm, err = run(capsys, tmp_path, "warm", export, f"--cache_dir={folder}", *bounds)
    assert len(calls) == 1 and not notes(err)
    assert warm == run(capsys, tmp_path, "plain", export, "--cache=false", *bounds)[0]
    assert len(calls) == 2  # (the run without the cache)
    other, _ = run(capsys, tmp_path, "other_key", export, f"--cache_dir={folder}", "--key_node=forward")
    assert len(calls) == 3 and len(entries(folder, ".ops")) == 2
    assert other == run(capsys, tmp_path, "other_plain", export, "--cache=false", "--key_node=forward")[0]


def _ops_truncated(entry: Path) -> None:
    path = entry / "instances.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _ops_fewer_rows(entry: Path) -> None:
    path = entry / "work_instance.parquet"
    pq.write_table(pq.read_table(path).slice(0, 10), path)


def _ops_of_another_key(entry: Path) -> None:
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    manifest["key"]["inputs"] = "0" * 64
    (entry / cache.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", quick_on(_ops_truncated, [_ops_truncated, _ops_fewer_rows, _ops_of_another_key],
                                            pytest.mark.variants))
def test_damaged_cached_ops_are_one_note_and_found_again(damage, tmp_path: Path, capsys, monkeypatch) -> None:
    export = str(recording("resnet_amp"))
    folder = tmp_path / "cache"
    uncached, _ = run(capsys, tmp_path, "plain", export, "--cache=false")
    run(capsys, tmp_path, "cold", export, f"--cache_dir={folder}")
    (entry,) = entries(folder, ".ops")
    damage(entry)
    calls = counting_op_search(monkeypatch)
    again, err = run(capsys, tmp_path, "damaged", export, f"--cache_dir={folder}")
    assert again == uncached and len(calls) == 1
    assert len(notes(err)) == 1 and "cached ops" in notes(err)[0] and "damaged" in notes(err)[0], err
    rebuilt, err = run(capsys, tmp_path, "rebuilt", export, f"--cache_dir={folder}")
    assert rebuilt == uncached and not notes(err) and len(calls) == 1


def test_a_frame_comes_back_with_its_dtypes(tmp_path: Path) -> None:
    """Categories of pandas' str dtype and of objects, str columns and numbers: the same frame, dtypes included."""
    import pandas as pd

    text = pd.StringDtype("python")
    frame = pd.DataFrame({
        "str_categories": pd.Categorical(["b", "a", "b"], categories=pd.Index(["a", "b"], dtype=text)),
        "object_categories": pd.Categorical(["x", "y", "x"], categories=pd.Index(["x", "y"], dtype=object)),
        "text": pd.array(["p", "q", "r"], dtype=text),
        "number": [1, 2, 3],
    }, index=pd.Index([7, 8, 9], name="key"))
    back = cache.read_frame(tmp_path / "f.parquet", cache.write_frame(tmp_path / "f.parquet", frame))
    pd.testing.assert_frame_equal(back, frame)
    assert back["str_categories"].cat.categories.dtype == text
    assert back["object_categories"].cat.categories.dtype == object
