"""Parameters of a check over several recordings or cases: the default run (the quick set) checks one, CI every one.

pyproject.toml declares the marks; README ("Run the tests") says which run takes which.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest


def quick_on(keep: object, cases: Sequence[object], mark: pytest.MarkDecorator = pytest.mark.recordings) -> list:
    """`cases` as parameters, each but `keep` marked `mark`: `recordings` (the same check on more recordings) or
    `variants` (more cases of one check), left out of the default run and run by CI. A tuple case is the values of
    several parameters."""
    assert keep in cases, keep
    return [case if case == keep else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=mark)
            for case in cases]
