"""dlagg: where each training iteration's time goes, from an Nsight Systems SQLite export."""

from __future__ import annotations

__version__ = "0.1.0"
