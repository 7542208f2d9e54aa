"""Parameters of a check over several recordings: the default run (the quick set) checks one, CI every one.

pyproject.toml declares the marks; README ("Run the tests") says which run takes which.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest


def quick_on(keep: str, names: Sequence[str]) -> list:
    """`names` as parameters, each but `keep` marked `recordings` (left out of the default run, run by CI)."""
    assert keep in names, keep
    return [name if name == keep else pytest.param(name, marks=pytest.mark.recordings) for name in names]
