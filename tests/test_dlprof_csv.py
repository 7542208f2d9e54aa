"""The test helper that reads DLProf's titled-sections CSV, on hand-written text (so a bug in it
cannot make the oracle tests pass vacuously)."""

from __future__ import annotations

import pytest

from .dlprof_csv import parse

TEXT = '''System Config
"GPU Count",1
"GPU Name(s)","NVIDIA H200"

Iterations
Total Iterations,20
Key Word,bare text
Odd,"a, b"

All Kernels
,GPU Time (ns),CPU Time (ns),# Kernels
All kernels,3490257,5011672.5,9
"Memory",,0,4

Kernel Report
Kernel Name,"Odd, title",Stack Trace
"a, ""quoted"" name","x","line 1
line 2"

Empty Table
Op ID,Op Name
'''


def test_sections_by_kind() -> None:
    sections = parse(TEXT)
    assert list(sections) == ["System Config", "Iterations", "All Kernels", "Kernel Report", "Empty Table"]
    assert sections["System Config"].values() == {"GPU Count": 1, "GPU Name(s)": "NVIDIA H200"}
    # DLProf writes key/value lines bare
    assert sections["Iterations"].values() == {"Total Iterations": 20, "Key Word": "bare text", "Odd": "a, b"}
    kernels = sections["All Kernels"].frame().set_index("")
    assert kernels.loc["All kernels"].tolist() == [3490257, 5011672.5, 9]
    assert kernels.loc["Memory", "GPU Time (ns)"] is None  # a bare empty cell is a missing value
    report = sections["Kernel Report"]
    assert report.header == ("Kernel Name", "Odd, title", "Stack Trace")
    assert report.rows == (('a, "quoted" name', "x", "line 1\nline 2"),)
    assert sections["Empty Table"].frame().empty and sections["Empty Table"].header == ("Op ID", "Op Name")
    with pytest.raises(ValueError):
        sections["All Kernels"].values()


@pytest.mark.parametrize("bad", [
    'T\nA,B\n"x"\n',  # a row shorter than the header
    'T\n"k",1,2\n',  # a key/value row with three cells
    'T\nA\n1\n\nT\nA\n2\n',  # two sections with one title
    'T\n"unterminated\n',
    'T\nA\nword\n',  # a bare word is neither a number nor empty (bare labels only in an untitled column)
    'T\n,A\nx,word\n',  # ... and only in that first column
])
def test_malformed_files_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse(bad)
