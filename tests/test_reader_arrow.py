"""The Arrow read path: odd bytes and odd types in real-looking exports read like sqlite3 reads them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dlagg.reader import load_profile

from .builders import ExportBuilder

REPLACEMENT = "\ufffd"


def test_invalid_utf8_in_strings_and_nvtx_text_is_replaced(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 10, "placeholder")
    b.range(20, 30, "registered", registered=True)
    b.launch(1, 2, 3, 4, name="kern")
    path = b.write(tmp_path / "bad_utf8.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE NVTX_EVENTS SET text = CAST(X'6F70FF31' AS TEXT) WHERE text = 'placeholder'")
    conn.execute("UPDATE StringIds SET value = CAST(X'72FE67' AS TEXT) WHERE value = 'registered'")
    conn.commit()
    conn.close()
    profile = load_profile(path)
    assert profile.strings.decode(profile.nvtx["text_id"]).tolist() == [f"op{REPLACEMENT}1", f"r{REPLACEMENT}g"]
    assert profile.strings.decode(profile.kernels["name_id"]).tolist() == ["kern"]


def test_range_names_get_one_id_each_after_the_registered_strings_and_domains_resolve(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 10, "a")
    b.range(5, 8, "a")  # same name twice: one id
    b.range(20, 30, "reg", registered=True)
    b.launch(1, 2, 3, 4)
    domain_text = b.string("MyDomain")
    path = b.write(tmp_path / "ids.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO NVTX_EVENTS VALUES (-5, NULL, 75, NULL, 0, 3, ?)", (domain_text,))
    conn.execute("INSERT INTO NVTX_EVENTS VALUES (-4, NULL, 75, 'InlineDomain', 0, 4, NULL)")
    conn.execute("INSERT INTO NVTX_EVENTS VALUES (7, NULL, 34, 'a mark', 0, 0, NULL)")
    conn.commit()
    conn.close()
    profile = load_profile(path)
    ids = profile.nvtx["text_id"].to_numpy()
    assert len(profile.nvtx) == 3  # ranges only: no domain rows, no marks
    assert ids[0] == ids[1] != ids[2] and ids.min() > max(b.strings.values())
    assert ids[2] in profile.strings.ids_equal("reg")
    assert profile.strings.decode(ids).tolist() == ["a", "a", "reg"]
    assert profile.meta.domains == {0: "", 3: "MyDomain", 4: "InlineDomain"}


def test_emit_nvtx_details_are_cut_and_read_on_demand(tmp_path: Path) -> None:
    b = ExportBuilder()
    b.range(0, 10, "aten::conv2d, seq = 12, op_id = 200, sizes = [[32, 3], [3, 3]], input_op_ids = [(1,0)]")
    b.range(20, 30, "ConvolutionBackward0, seq = 12, op_id = 300")
    b.range(40, 50, "aten::empty, sizes = [[], []]")  # older PyTorch: no op_id
    b.range(60, 70, "aten::add, seq = 3")  # older PyTorch: seq only
    b.range(80, 90, "data, epoch 3")  # a user range with a comma keeps its whole text
    b.range(95, 99, "{'mod': 'torch', 'op': 'mm', 'args': [{'shape': (2, 3), 'dtype': 'float32'}]}", registered=True)
    b.launch(1, 2, 3, 4)
    profile = load_profile(b.write(tmp_path / "emit.sqlite"))
    nvtx = profile.nvtx
    assert profile.strings.decode(nvtx["text_id"]).tolist() == [
        "aten::conv2d", "ConvolutionBackward0", "aten::empty", "aten::add", "data, epoch 3",
        "{'mod': 'torch', 'op': 'mm', 'args': [{'shape': (2, 3), 'dtype': 'float32'}]}"]
    assert nvtx["seq"].tolist() == [12, 12, -1, 3, -1, -1]
    emit = profile.nvtx_names["emit"]
    assert emit.reindex(nvtx["text_id"].to_numpy()).tolist() == [True, True, True, True, False, False]
    shapes = profile.nvtx_details.input_shapes(nvtx["row"].to_numpy()[[2, 0, 1, 0]])
    assert shapes.tolist() == ["[[], []]", "[[32, 3], [3, 3]]", "", "[[32, 3], [3, 3]]"]


def kernels_with(tmp_path: Path, count: int, value: str, row: int) -> Path:
    """`count` kernels with gridX = 1, 2, ...; row `row`'s gridX replaced by the SQL literal `value`."""
    b = ExportBuilder()
    b.range(0, 10 * count + 10, "train_step")
    for k in range(count):
        b.launch(10 * k, 10 * k + 2, 10 * k + 3, 10 * k + 5, grid=(k + 1, 1, 1))
    path = b.write(tmp_path / "types.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = {value} WHERE rowid = ?", (row,))
        assert conn.execute("SELECT typeof(gridX) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?",
                            (row,)).fetchone()[0] != "integer", "premise: SQLite keeps the value's own type"
    conn.close()
    return path


def sqlite_grid_x(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT CAST(gridX AS INTEGER) FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid").fetchall()
    conn.close()
    return [r[0] for r in rows]


def test_a_real_value_mid_integer_column_reads_as_sqlite_casts_it(tmp_path: Path) -> None:
    """A REAL among INTEGERs: the one-batch Arrow read widens the column, the reader casts back."""
    path = kernels_with(tmp_path, 5, "4.5", row=4)
    profile = load_profile(path)
    assert profile.kernels["grid_x"].tolist() == sqlite_grid_x(path) == [1, 2, 3, 4, 5]
    assert profile.kernels["grid_x"].dtype == np.int64


def adbc_batches_fail(path: Path, batch_rows: int) -> bool:
    """Whether the ADBC driver itself rejects the kernel table read in batches of `batch_rows`."""
    import adbc_driver_sqlite.dbapi as adbc
    from adbc_driver_sqlite import StatementOptions

    with adbc.connect(str(path)) as conn, conn.cursor() as cursor:
        cursor.adbc_statement.set_options(**{StatementOptions.BATCH_ROWS.value: str(batch_rows)})
        try:
            cursor.execute("SELECT gridX FROM CUPTI_ACTIVITY_KIND_KERNEL")
            cursor.fetch_arrow_table()
        except OSError as exc:
            return "Type mismatch" in str(exc)
    return False


def test_the_sqlite3_fallback_reads_a_column_that_changes_type_after_the_first_batch(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """The fallback runs when both Arrow reads fail: the one-batch read (it fails for a string column
    over 2 GiB; here its batch is made 1024 rows, the driver's default) and the 1024-row batches, which
    fix each column's type from the first batch and reject a later value of another type."""
    import dlagg.reader.database as reader

    path = kernels_with(tmp_path, 2000, "4.5", row=1500)
    assert adbc_batches_fail(path, 1024) and not adbc_batches_fail(path, 4096)  # premise: as described
    monkeypatch.setattr(reader, "MAX_BATCH_ROWS", 1024)
    profile = load_profile(path)
    expected = sqlite_grid_x(path)
    assert expected[1499] == 4 and profile.kernels["grid_x"].tolist() == expected
    assert profile.kernels["grid_x"].dtype == np.int64


def driver_refusal(kind: str) -> Exception:
    from adbc_driver_manager import AdbcStatusCode, OperationalError

    return {"driver": OperationalError("refused", status_code=AdbcStatusCode.IO),
            "arrow": pa.ArrowInvalid("refused"),  # (ArrowInvalid is also a ValueError)
            "stream": OSError("[SQLite] Type mismatch in column 9: expected INT64 but got DOUBLE")}[kind]


@pytest.mark.parametrize("kind", ["driver", "arrow", "stream"])
def test_only_the_drivers_refusals_take_the_slower_paths(tmp_path: Path, monkeypatch, kind: str) -> None:
    """A refusal by the driver (its own error, Arrow's, or the OSError Arrow raises for a stream the driver broke
    off, as a type change mid-table does) sends the read down the next path, and the sqlite3 fallback then reads
    the table; anything else is a bug in dlagg and is raised as it is, never reported as a damaged file."""
    import dlagg.reader.database as reader

    path = kernels_with(tmp_path, 20, "4.5", row=7)
    refusals: list[int | None] = []

    def refuse(self: object, sql: str, batch_rows: int | None) -> object:
        refusals.append(batch_rows)
        raise driver_refusal(kind)

    monkeypatch.setattr(reader.Database, "_adbc_table", refuse)
    profile = load_profile(path)  # every table through the sqlite3 fallback
    assert profile.kernels["grid_x"].tolist() == sqlite_grid_x(path)
    assert None in refusals and any(b is not None for b in refusals)  # both Arrow paths were tried first

    def bug(self: object, sql: str, batch_rows: int | None) -> object:
        raise KeyError("a bug")

    monkeypatch.setattr(reader.Database, "_adbc_table", bug)
    with pytest.raises(KeyError, match="a bug"):
        load_profile(path)


def test_running_out_of_memory_in_the_driver_is_not_retried(tmp_path: Path, monkeypatch) -> None:
    """MemoryError (Arrow's ArrowMemoryError is one) reaches the caller, which says how much memory the run
    needs; a slower path would only need more."""
    import dlagg.reader.database as reader

    path = kernels_with(tmp_path, 20, "4.5", row=7)
    tried: list[int | None] = []

    def out_of_memory(self: object, sql: str, batch_rows: int | None) -> object:
        tried.append(batch_rows)
        raise pa.ArrowMemoryError("malloc of size 8589934592 failed")

    monkeypatch.setattr(reader.Database, "_adbc_table", out_of_memory)
    monkeypatch.setattr(reader.Database, "_sqlite3_table", lambda *a: pytest.fail("the fallback was tried"))
    with pytest.raises(MemoryError):
        load_profile(path)
    assert tried and all(b is not None for b in tried)  # each read stopped at its first, one-batch attempt


@pytest.mark.parametrize("few_gaps", [0, 5, 1_000_000], ids=["selection", "boundary", "block-moves"])
@pytest.mark.parametrize("seed", range(4))
def test_compacting_the_nvtx_columns_is_a_boolean_selection(monkeypatch, few_gaps: int, seed: int) -> None:
    """Both ways of dropping rows (block moves up to FEW_GAPS dropped rows, else a selection) give each column
    what numpy's boolean selection gives, whatever the runs: dropped rows first, last, in runs or alone."""
    import dlagg.reader.nsys as reader

    monkeypatch.setattr(reader, "FEW_GAPS", few_gaps)
    rng = np.random.default_rng(seed)
    rows = 200
    keep = rng.random(rows) < [0.2, 0.6, 0.95, 1.0][seed]
    keep[[0, -1]] = seed % 2 == 0  # the first and last rows dropped in half the cases
    columns = {"a": np.arange(rows, dtype=np.int64), "b": rng.integers(-5, 5, rows).astype(np.int32),
               "c": rng.random(rows) < 0.5}
    expected = {name: values[keep].copy() for name, values in columns.items()}
    got = reader._compact({name: values.copy() for name, values in columns.items()}, keep)
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name].dtype == expected[name].dtype and got[name].tolist() == expected[name].tolist(), name


@pytest.mark.parametrize("fallback", [False, True], ids=["one-batch", "fallback"])
def test_text_in_a_numeric_column_drops_the_row_with_one_warning(tmp_path: Path, monkeypatch, capsys,
                                                                 fallback: bool) -> None:
    """Text among integers: the row is dropped and counted (reader/validate.py), whichever read path
    meets it (one batch, or the sqlite3 fallback when 1024-row batches reject the type change)."""
    import dlagg.reader.database as reader
    from dlagg.cli import main

    path = kernels_with(tmp_path, 2000, "'7x'", row=1500)
    if fallback:
        monkeypatch.setattr(reader, "MAX_BATCH_ROWS", 1024)
    code = main([f"--nsys_database={path}", "--reports=kernel", f"--output_path={tmp_path / 'out'}", "-b"])
    err = capsys.readouterr().err
    assert code == 0 and "internal error" not in err
    named = [line for line in err.splitlines() if "not an integer" in line]
    assert len(named) == 1 and path.name in named[0] and "CUPTI_ACTIVITY_KIND_KERNEL.gridX 1" in named[0]
    assert len(load_profile(path).kernels) == 1999


def test_sliced_nvtx_read_equals_a_plain_read(tmp_path: Path, monkeypatch) -> None:
    """Many small slices, row-id holes, marks and domain rows between ranges: same ranges as SQL says."""
    import dlagg.reader.nsys as reader

    b = ExportBuilder()
    for k in range(40):
        b.range(10 * k, 10 * k + 5, f"op{k % 7}, seq = {k}, op_id = {k}, sizes = [[{k}]]", tid=101 + k % 3)
    b.launch(1, 2, 3, 4)
    path = b.write(tmp_path / "slices.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM NVTX_EVENTS WHERE rowid IN (5, 6, 17)")  # holes
    conn.execute("INSERT INTO NVTX_EVENTS VALUES (3, NULL, 34, 'a mark', 0, 0, NULL)")
    conn.execute("INSERT INTO NVTX_EVENTS VALUES (-1, NULL, 75, 'Dom', 0, 2, NULL)")
    conn.commit()
    expected = conn.execute(
        "SELECT start, \"end\", globalTid, rowid, substr(text, 1, instr(text, ',') - 1), "
        "CAST(substr(text, instr(text, 'seq = ') + 6) AS INTEGER) FROM NVTX_EVENTS "
        "WHERE eventType = 59 ORDER BY rowid").fetchall()
    conn.close()
    monkeypatch.setattr(reader, "NVTX_SLICE_ROWS", 4)
    profile = load_profile(path)
    nvtx = profile.nvtx
    got = list(zip(nvtx["start"].tolist(), nvtx["end"].tolist(), nvtx["global_tid"].tolist(), nvtx["row"].tolist(),
                   profile.strings.decode(nvtx["text_id"]).tolist(), nvtx["seq"].tolist(), strict=True))
    assert got == expected and len(got) == 37
    assert profile.meta.domains == {0: "", 2: "Dom"}
    shapes = profile.nvtx_details.input_shapes(nvtx["row"].to_numpy())
    assert list(shapes) == [f"[[{k}]]" for k in range(40) if k + 1 not in (5, 6, 17)]


def test_threaded_nvtx_slices_above_100k_rows_equal_a_plain_read(tmp_path: Path, monkeypatch) -> None:
    """Over 100,000 NVTX rows the reader cuts the table into one slice per read thread (at least):
    120,000 rows with marks, domain rows, registered names, emit_nvtx texts, open ranges and a hole
    across the slice bounds read as plain SQL reads them."""
    import dlagg.reader.nsys as reader

    b = ExportBuilder()
    b.launch(1, 2, 3, 4)
    reg = b.string("registered step")
    path = b.write(tmp_path / "big.sqlite")
    n = 120_000
    k = np.arange(n)
    text = np.where(k % 3 == 0, None, np.char.add("op", (k % 11).astype(str)))
    text = np.where(k % 7 == 1, np.char.add(np.char.add("aten::mm, seq = ", k.astype(str)), ", op_id = 9"), text)
    rows = [(int(10 * i), None if i % 5000 == 4 else int(10 * i + 5), 34 if i % 1000 == 2 else 59,
             None if t is None else str(t), int((100 << 24) | (101 + i % 3)), 0, reg if t is None else None)
            for i, t in zip(k.tolist(), text.tolist(), strict=True)]
    rows.append((-1, None, 75, "Dom", 0, 2, None))
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("DELETE FROM NVTX_EVENTS WHERE rowid BETWEEN 59990 AND 60010")  # a hole at the middle bound
        expected = conn.execute("""
            SELECT e.start, e."end", e.globalTid, e.rowid,
                   CASE WHEN instr(COALESCE(e.text, s.value), ', seq = ') > 0
                        THEN substr(e.text, 1, instr(e.text, ', seq = ') - 1) ELSE COALESCE(e.text, s.value) END,
                   CASE WHEN instr(e.text, ', seq = ') > 0
                        THEN CAST(substr(e.text, instr(e.text, ', seq = ') + 8) AS INTEGER) ELSE -1 END
            FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59
            ORDER BY e.rowid""").fetchall()
    conn.close()
    assert len(expected) > 100_000
    monkeypatch.setattr(reader, "READ_THREADS", 4)  # the slice count does not depend on this machine's cores
    profile = load_profile(path)
    nvtx = profile.nvtx
    end = profile.meta.end
    got = list(zip(nvtx["start"].tolist(), nvtx["end"].tolist(), nvtx["global_tid"].tolist(), nvtx["row"].tolist(),
                   profile.strings.decode(nvtx["text_id"]).tolist(), nvtx["seq"].tolist(), strict=True))
    assert got == [(s, end if e is None else e, *rest) for s, e, *rest in expected]
    assert profile.meta.domains == {0: "", 2: "Dom"}


@pytest.mark.parametrize(("table", "column"), [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "end"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
    ("NVTX_EVENTS", "eventType"),
])
def test_a_missing_required_column_is_one_line_and_exit_1(tmp_path: Path, capsys, table: str, column: str) -> None:
    from dlagg.cli import main

    b = ExportBuilder()
    b.range(0, 100, "train_step")
    b.launch(10, 20, 30, 40)
    path = b.write(tmp_path / "cut.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute(f'ALTER TABLE {table} DROP COLUMN "{column}"')
    conn.close()
    code = main([f"--nsys_database={path}", "--reports=summary", f"--output_path={tmp_path / 'out'}", "-b"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == f"dlagg: error: {path}: table {table} lacks column(s) {column}; this does not look like an " \
                  "nsys export\n"


def damage_a_middle_page(path: Path, table: str) -> None:
    """Overwrite one leaf page in the middle of `table` (its first and last pages stay readable)."""
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        leaves = [p for (p,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path", (table,))]
    conn.close()
    assert len(leaves) >= 3, "premise: the table spans several pages"
    with path.open("r+b") as handle:
        handle.seek((leaves[len(leaves) // 2] - 1) * page_size)
        handle.write(b"\xff" * page_size)


@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS"])
def test_damage_found_mid_read_is_one_line_and_exit_1(tmp_path: Path, capsys, monkeypatch, table: str) -> None:
    """The metadata reads fine; the error comes from a worker thread while it reads the table."""
    import dlagg.reader.nsys as reader
    from dlagg.cli import main

    b = ExportBuilder()
    for i in range(3000):
        b.range(100 * i, 100 * i + 90, "train_step")
        b.launch(100 * i + 5, 100 * i + 10, 100 * i + 20, 100 * i + 30, name=f"kernel_{i % 50}")
    path = b.write(tmp_path / "damaged.sqlite")
    damage_a_middle_page(path, table)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:  # premise: min/max still answer
        conn.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()  # one b-tree seek each (as the reader asks)
        conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute(f'SELECT * FROM "{table}"').fetchall()
    conn.close()
    monkeypatch.setattr(reader, "NVTX_SLICE_ROWS", 500)  # several NVTX slices, read on the pool's threads
    before = path.read_bytes()
    code = main([f"--nsys_database={path}", "--reports=summary", f"--output_path={tmp_path / 'out'}", "-b"])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"dlagg: error: {path}: cannot read the database (") and "export the nsys report again" in err
    assert path.read_bytes() == before


def test_a_blob_nvtx_text_reads_like_invalid_utf8_text(tmp_path: Path) -> None:
    """sqlite3 hands a BLOB back as bytes; like invalid UTF-8 text, it should read with replacements."""
    b = ExportBuilder()
    b.range(0, 10, "placeholder")
    b.range(20, 30, "train_step")
    b.launch(1, 2, 3, 4)
    path = b.write(tmp_path / "blob.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = X'626C6FFF' WHERE text = 'placeholder'")
    conn.close()
    profile = load_profile(path)
    assert profile.strings.decode(profile.nvtx["text_id"]).tolist() == [f"blo{REPLACEMENT}", "train_step"]
