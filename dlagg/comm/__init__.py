"""Communication between ranks: collective kernels per rank (``collectives``) and, across ranks,
clock alignment, matching, waits and late arrivals (``match``)."""

from .collectives import COMM_RULES, ITERATION_COLUMNS, RankComm, is_comm_kernel, operation, rank_comm
from .match import Matched, RankInput, match_collectives

__all__ = ["COMM_RULES", "ITERATION_COLUMNS", "Matched", "RankComm", "RankInput", "is_comm_kernel",
           "match_collectives", "operation", "rank_comm"]
