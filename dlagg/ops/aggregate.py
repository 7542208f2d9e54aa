"""Op instances -> per-op facts shared by the detail, op_type, group_node and tensor reports.

Contract: ``op_usage(instances)`` says per op key whether any aggregated call ran a Tensor Core
kernel; ``first_non_empty(instances, column)`` gives per op key its first non-empty text;
``path_prefixes(paths)`` lists the group-path prefixes of each distinct path.
"""

from __future__ import annotations

import pandas as pd


def op_usage(instances: pd.DataFrame) -> pd.Series:
    """Per op key: True when any of its calls ran a Tensor Core kernel."""
    return instances.groupby("key", sort=False)["tc_kernels"].sum() > 0


def first_non_empty(instances: pd.DataFrame, column: str) -> pd.Series:
    """Per op key, the first non-empty value of a text column ('' when all are empty)."""
    present = instances[instances[column].astype(bool).to_numpy()]
    return present.groupby("key", sort=False, observed=True)[column].first()


def path_prefixes(paths: pd.Series) -> pd.DataFrame:
    """(path, prefix) pairs: ``/a/b/`` -> ``/``, ``/a/``, ``/a/b/`` (over distinct paths only)."""
    pairs: list[tuple[object, str]] = []
    for path in pd.unique(paths):  # distinct group paths: a handful
        parts = [p for p in str(path).split("/") if p]
        pairs.extend((path, "/" + "".join(f"{p}/" for p in parts[:depth])) for depth in range(len(parts) + 1))
    return pd.DataFrame(pairs, columns=["path", "prefix"], dtype=object)
