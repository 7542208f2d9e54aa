"""Ops: NVTX ranges that are framework ops, the GPU work they launch, grouped across iterations.

``find_ops(profile, iterations, work, uses_tc, domains) -> Ops``; see ``assign`` for the rules
and docs/ops.md for the user-facing description.
"""

from .assign import Ops, find_ops, union_by_group

__all__ = ["Ops", "find_ops", "union_by_group"]
