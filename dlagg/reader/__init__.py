"""Reader stage: nsys SQLite export, or nvprof database (``reader/nvprof.py``) -> `Profile`."""

from .sqlite import check_input, load_profile

__all__ = ["check_input", "load_profile"]
