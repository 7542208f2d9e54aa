"""Property tests: generated exports, valid and damaged, through the command line (tests/exports.py).

On every example: kernel totals per name equal a direct SQL sum over the rows the reader must keep;
the iterations partition the aggregated window; every percentage lies in [0, 100]; the summary's
duration rows add up to 100 %; no time at stake exceeds the longest iteration; and the run never
ends in an internal error (exit 3). The checks read the written JSON files and the export
(tests/invariants.py). The default run draws a few hundred examples; ``pytest -m slow`` draws many
more (the figures of the last run are in the closing note of issue 17).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlagg.cli import main

from .exports import KEY_NODE, GeneratedExport, apply, damages, exports
from .invariants import check_run, sql_expected

# Examples per test in the default run (both together take about two minutes on two cores) and in
# the slow run.
VALID_EXAMPLES = 120
DAMAGED_EXAMPLES = 150
SLOW_EXAMPLES = 2_000
COMMON = dict(deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REPORTS = "summary,kernel,iteration,expert_systems"


def run_and_check(export: GeneratedExport, damage: list | None = None, capsys=None) -> None:  # noqa: ANN001
    with tempfile.TemporaryDirectory() as tmp:
        db = export.write(Path(tmp) / "generated.sqlite")
        if damage:
            apply(db, export, damage)
        out = Path(tmp) / "out"
        code = main([f"--nsys_database={db}", f"--reports={REPORTS}", "--formats=json", "-b", "-v", "quiet",
                     f"--output_path={out}", f"--key_node={KEY_NODE}"])
        assert code in (0, 1), f"exit {code}: an internal error"
        if code == 1:  # a clear refusal is allowed only for damage that leaves nothing to report
            assert damage, "a valid export was refused"
            return
        expected = sql_expected(db, KEY_NODE)
        problems = check_run(out, expected)
        assert not problems, problems
        if expected.kernels:
            assert (out / "dlagg_kernel.json").exists(), "kernels in the window but no kernel report"


@settings(max_examples=VALID_EXAMPLES, **COMMON)
@given(export=exports())
def test_valid_exports_satisfy_every_invariant(export: GeneratedExport) -> None:
    run_and_check(export)


@settings(max_examples=DAMAGED_EXAMPLES, **COMMON)
@given(data=st.data())
def test_damaged_exports_satisfy_every_invariant(data: st.DataObject) -> None:
    export = data.draw(exports())
    run_and_check(export, data.draw(damages(export)))


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(export=exports())
def test_valid_exports_satisfy_every_invariant_slow(export: GeneratedExport) -> None:
    run_and_check(export)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(data=st.data())
def test_damaged_exports_satisfy_every_invariant_slow(data: st.DataObject) -> None:
    export = data.draw(exports())
    run_and_check(export, data.draw(damages(export)))
