"""The reader entry points as one fuzz target: an input is a whole export file (fuzz_reader.py).

Entry points: ``check_input`` (what a file is), ``load_profile`` (everything read) and
``NvtxDetails.input_shapes`` (the NVTX texts read on demand). Allowed outcomes: a profile, an
`InputError` (one clear line) or `MemoryError`; anything else escapes, which is a crash.
"""

from __future__ import annotations

from pathlib import Path

from dlagg.errors import InputError
from dlagg.reader import check_input, load_profile


def read_export(path: Path) -> None:
    """Read the export at `path` through every reader entry point; only clear errors are caught."""
    try:
        check_input(path)
        profile = load_profile(path)
        if profile.nvtx_details is not None and len(profile.nvtx):
            profile.nvtx_details.input_shapes(profile.nvtx["row"].to_numpy()[:64])
    except (InputError, MemoryError):
        pass
