"""file names as the user has them (a comma in a name; a newline or ESC printed safely)."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlagg.cli import main
from dlagg.log import shown
from dlagg.reader.discover import input_paths

from .conftest import recording


def test_a_name_with_a_comma_that_exists_is_one_file(tmp_path: Path, capsys) -> None:
    db = tmp_path / "run,1.sqlite"
    shutil.copy(recording("cuda_basic"), db)
    assert input_paths(str(db)) == [db]
    code = main([f"--nsys_database={db}", "--reports=summary", "--formats=json", "-b",
                 f"--output_path={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 0, err


def test_commas_still_separate_names_that_do_not_exist_whole(tmp_path: Path) -> None:
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    for path in (a, b):
        shutil.copy(recording("cuda_basic"), path)
    assert input_paths(f"{a},{b}") == [a, b]


def test_shown_escapes_control_characters_only() -> None:
    assert shown("plain name é.sqlite") == "plain name é.sqlite"
    assert shown("a\nb\x1b[2J.sqlite") == "a\\nb\\x1b[2J.sqlite"
    assert shown(Path("x\udcff")) == "x\\xff"


def test_a_newline_and_esc_in_a_file_name_reach_stderr_escaped(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "evil\n\x1b[2Jname.sqlite"
    bad.write_bytes(b"not a database at all")
    code = main([f"--nsys_database={bad}", "--formats=json", "-b", f"--output_path={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 1
    assert "\x1b" not in err and err.count("\n") == 1, repr(err)
    assert "evil\\n\\x1b[2Jname.sqlite" in err
    missing = tmp_path / "gone\n.sqlite"
    code = main([f"--nsys_database={missing}", "--formats=json", "-b", f"--output_path={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "gone\\n.sqlite" in err, repr(err)
