"""Reader stage: nsys SQLite export -> `Profile`."""

from .sqlite import check_input, load_profile

__all__ = ["check_input", "load_profile"]
