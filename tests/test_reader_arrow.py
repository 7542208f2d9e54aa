"""The Arrow read path: odd bytes and odd types in real-looking exports read like sqlite3 reads them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

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


def test_a_column_that_changes_type_mid_table_still_reads(tmp_path: Path) -> None:
    b = ExportBuilder()
    for k in range(5):
        b.launch(10 * k, 10 * k + 2, 10 * k + 3, 10 * k + 5, grid=(k + 1, 1, 1))
    path = b.write(tmp_path / "types.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = '4' WHERE gridX = 4")  # SQLite: TEXT in INTEGER column
    conn.commit()
    conn.close()
    profile = load_profile(path)
    assert profile.kernels["grid_x"].tolist() == [1, 2, 3, 4, 5]
    assert profile.kernels["grid_x"].dtype == np.int64


def test_sliced_nvtx_read_equals_a_plain_read(tmp_path: Path, monkeypatch) -> None:
    """Many small slices, row-id holes, marks and domain rows between ranges: same ranges as SQL says."""
    import dlagg.reader.sqlite as reader

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
