"""Draw docs/roofline.md's pictures from the bundled resnet_amp recordings (ncu + nsys).

    python docs/images/make_roofline.py

Writes ``roofline_resnet_amp.png`` (one dot per kernel name and launch shape) and
``roofline_resnet_amp_op_type.png`` (one dot per op type) next to this script, with ncu's own
ceilings and the nsys kernel times, exactly as ``dlagg.roofline`` computes them, and prints the
tables of docs/roofline.md (the kernels and op types with the most GPU time) as Markdown.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlagg.options import Options
from dlagg.reader import load_profile
from dlagg.reports.base import ReportContext
from dlagg.roofline import analyse, chart_spec, kernel_table, op_type_table, op_types_of, render_png
from dlagg.timeline.correlate import KERNEL
from dlagg.timeline.iterations import detect_iterations

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NAME = "resnet_amp"
SCALE = 1.0  # keeps the pictures light for the docs
TOP = 5


def op_type_of_kernel_row(ctx: ReportContext) -> pd.Series:
    """Op type per row of profile.kernels, from dlagg's op layer ('' where no op launched it)."""
    work = ctx.work
    kernels = work[work["kind"].to_numpy() == KERNEL]
    op_type = ctx.op_columns(kernels.index, ("Op Type",))["Op Type"]
    return pd.Series(pd.Series(op_type).astype(str).to_numpy(), index=kernels["row"].to_numpy())


def main() -> None:
    database = ROOT / "fixtures" / "nsys-2022.4" / NAME / f"{NAME}.sqlite"
    profile = load_profile(database)
    iterations = detect_iterations(profile, None, None, None)
    ctx = ReportContext(profile, iterations, Options(nsys_database=database))
    roof, match = analyse(ROOT / "fixtures" / "ncu" / NAME / f"{NAME}_raw.csv.gz", profile=profile,
                          iterations=iterations, gpu_work=ctx.work)
    kernels = kernel_table(roof)
    op_types = op_type_table(roof, op_types_of(match, op_type_of_kernel_row(ctx)))
    pictures = {
        f"roofline_{NAME}.png": chart_spec(kernels, roof.ceilings,
                                           title=f"{NAME}: one training step, per kernel (ncu metrics, nsys times)"),
        f"roofline_{NAME}_op_type.png": chart_spec(op_types, roof.ceilings, label="Op Type",
                                                   title=f"{NAME}: one training step, per op type (ncu metrics, "
                                                         "nsys times)"),
    }
    for name, spec in pictures.items():
        path = HERE / name
        path.write_bytes(render_png(spec, scale=SCALE))
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size:,} bytes)")
    print(markdown(kernels, "Kernel Name", TOP))
    print(markdown(op_types, "Op Type", TOP))


def markdown(table: pd.DataFrame, label: str, top: int) -> str:
    """The `top` rows with the most GPU time, as a Markdown table."""
    columns = [label, "Invocations" if "Invocations" in table else "Kernels", "% of GPU Time", "AI DRAM (FLOP/B)",
               "AI L2 (FLOP/B)", "AI L1 (FLOP/B)", "Achieved FLOP/s", "Bound", "% of Ceiling"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for _, row in table.head(top).iterrows():
        cells = [f"`{row[label]}`", str(row[columns[1]]), f"{row['% of GPU Time']:.1f}",
                 *(f"{row[c]:,.3g}" for c in columns[3:6]), f"{row['Achieved FLOP/s'] / 1e12:.2f} T",
                 row["Bound"], f"{row['% of Ceiling']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
