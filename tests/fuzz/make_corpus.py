"""Build the fuzzing seed corpus (tests/fuzz/corpus/) from the bundled real recordings.

A seed is a real export cut down to its first rows per table (every table and column kept, the
tables dlagg does not read dropped), vacuumed with 512-byte pages: small inputs let the mutator
reach the b-tree structure, the schema and the rows instead of free pages.

    python tests/fuzz/make_corpus.py
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS = {"cuda_basic": 40, "cpu_nvtx_numpy": 40, "resnet_amp": 25}  # recording -> rows kept per table
READ = ("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "OSRT_API", "StringIds", "EXPORT_META_DATA", "META_DATA_EXPORT",
        "TARGET_INFO_GPU", "TARGET_INFO_SYSTEM_ENV", "ANALYSIS_DETAILS")


def build(name: str, rows: int, out: Path) -> Path:
    target = out / f"{name}.sqlite"
    shutil.copyfile(ROOT / "fixtures" / "nsys-2022.4" / name / f"{name}.sqlite", target)
    conn = sqlite3.connect(target)
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if not table.startswith(READ):
                conn.execute(f'DROP TABLE "{table}"')
            elif table != "StringIds":
                conn.execute(f'DELETE FROM "{table}" WHERE rowid NOT IN (SELECT rowid FROM "{table}" '
                             f"ORDER BY rowid LIMIT {rows})")
        if "StringIds" in tables:  # only the strings the kept rows name
            used = []
            for table, column in (("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"), ("CUPTI_ACTIVITY_KIND_KERNEL",
                                  "shortName"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("NVTX_EVENTS", "textId"),
                                  ("OSRT_API", "nameId")):
                if table in tables:
                    used.append(f'SELECT "{column}" FROM "{table}"')
            conn.execute(f"DELETE FROM StringIds WHERE id NOT IN ({' UNION '.join(used)})")
        conn.commit()
        conn.execute("PRAGMA page_size = 512")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return target


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in SEEDS.items():
        path = build(name, rows, out)
        print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
