"""Draw docs/roofline.md's pictures from the bundled resnet_amp recordings (ncu + nsys).

    python docs/images/make_roofline.py

Builds the roofline report as ``dlagg --nsys_database=... --ncu_report=... --reports=roofline`` does
(ncu's own ceilings, nsys kernel times) and writes its two pictures next to this script,
``roofline_resnet_amp.png`` (one dot per kernel name and launch shape) and
``roofline_resnet_amp_op_type.png`` (one dot per op type), redrawn from the report's Vega-Lite specs at a
smaller scale to keep the docs light. Prints the tables of docs/roofline.md (the kernels and op types
with the most GPU time) as Markdown.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlagg.context import RankContext
from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.reports import build_reports
from dlagg.roofline import render_png
from dlagg.timeline.iterations import detect_iterations

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NAME = "resnet_amp"
SCALE = 1.0  # keeps the pictures light for the docs (dlagg writes them at 1.5)
TOP = 5
PICTURES = {"kernels": f"roofline_{NAME}.png", "op_types": f"roofline_{NAME}_op_type.png"}


def main() -> None:
    database = ROOT / "fixtures" / "nsys-2022.4" / NAME / f"{NAME}.sqlite"
    profile = load_profile(database)
    iterations = detect_iterations(profile, None, None, None)
    options = Options(nsys_database=database, ncu_report=ROOT / "fixtures" / "ncu" / NAME / f"{NAME}_raw.csv.gz")
    report = build_reports(RankContext(profile, iterations, options), ["roofline"])["roofline"]
    for image in report.images:
        path = HERE / PICTURES[image.key]
        path.write_bytes(render_png(image.spec, scale=SCALE))
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size:,} bytes)")
    print(markdown(report.table("kernels").frame, "kernel_name", "Kernel Name", "invocations", "Invocations"))
    print(markdown(report.table("op_types").frame, "op_type", "Op Type", "kernels", "Kernels"))


def markdown(frame: pd.DataFrame, label: str, title: str, count: str, count_title: str) -> str:
    """The TOP rows with the most GPU time, as a Markdown table."""
    columns = [title, count_title, "% of GPU Time", "AI DRAM", "AI L2", "AI L1", "Achieved FLOP/s", "Bound",
               "% of Ceiling"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for _, row in frame.head(TOP).iterrows():
        cells = [f"`{row[label]}`", str(row[count]), f"{row['gpu_time_pct']:.1f}",
                 *(f"{row[c]:,.3g}" for c in ("ai_dram_flop_per_byte", "ai_l2_flop_per_byte", "ai_l1_flop_per_byte")),
                 f"{row['achieved_flop_per_s'] / 1e12:.2f} T", row["bound"], f"{row['pct_of_ceiling']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
