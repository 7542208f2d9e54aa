"""The Nsight Compute metrics the roofline reads, declared once: what each quantity is made of,
the fallbacks when a CSV lacks the counter itself, and which ncu option collects it.

A quantity (FP32 add instructions, DRAM bytes, a ceiling) has recipes, tried in order; the first
whose metrics are all columns of the CSV gives the value. A recipe is a sum of terms, a term a
product of metrics times a constant. The first recipe is the counter ncu's documentation and the
NERSC method name (``sm__sass_thread_inst_executed_op_ffma_pred_on.sum``); the later ones rebuild
it from what ncu's own roofline sections collect (``smsp__..._pred_on.sum.per_cycle_elapsed`` x
cycles elapsed), which is how those sections compute their achieved values. ncu prints those
rates rounded to two decimals, so a derived value is marked inexact.

Units: every metric is read in base units (ncu's units row is applied by ``roofline.ncu``):
durations in ns, frequencies in Hz, rates per second, counts as counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

NS = 1e-9  # a duration in ns times a rate per second
TIME = "gpu__time_duration.sum"
SASS = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"


@dataclass(frozen=True)
class Term:
    metrics: tuple[str, ...]  # multiplied together
    factor: float = 1.0


@dataclass(frozen=True)
class Recipe:
    terms: tuple[Term, ...]  # summed
    exact: bool = True  # False: rebuilt from rates ncu prints rounded

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for term in self.terms for m in term.metrics))

    def available(self, columns: Mapping[str, np.ndarray]) -> bool:
        return all(m in columns for m in self.metrics)

    def evaluate(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        total: np.ndarray | float = 0.0
        for term in self.terms:
            product: np.ndarray | float = term.factor
            for metric in term.metrics:
                product = product * columns[metric]
            total = total + product
        return np.asarray(total, dtype=np.float64)

    def describe(self) -> str:
        def one(term: Term) -> str:
            factor = "" if term.factor == 1.0 else ("1e-9" if term.factor == NS else f"{term.factor:g}") + " x "
            return factor + " x ".join(term.metrics)

        return " + ".join(one(t) for t in self.terms)


def product(*metrics: str, factor: float = 1.0, exact: bool = True) -> Recipe:
    return Recipe((Term(metrics, factor),), exact)


@dataclass(frozen=True)
class Quantity:
    name: str  # what it is, for warnings ("FP32 FLOPs")
    recipes: tuple[Recipe, ...]
    section: str  # the ncu section (or set) that collects them, "" when only --metrics does

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for r in self.recipes for m in r.metrics))


def counter(metric: str, unit: str, name: str, section: str) -> Quantity:
    """A ``.sum`` counter, else its rate over the kernel's cycles or duration (as ncu's sections hold it).

    `unit` is the hardware unit (``smsp``, ``sm``, ``dram``, ...) whose cycles the
    ``.per_cycle_elapsed`` rate is counted in; SM and SM sub-partitions share one clock.
    """
    base = metric.removesuffix(".sum")
    if metric.startswith("sm__sass"):  # the sections collect the smsp__ form of SASS counters
        base = "smsp__" + base.removeprefix("sm__")
    per_cycle = f"{base}.sum.per_cycle_elapsed"
    cycles = (f"{unit}__cycles_elapsed.avg", *(("sm__cycles_elapsed.avg",) if unit == "smsp" else ()))
    rates = [product(per_cycle, c, exact=False) for c in cycles]
    rates += [product(per_cycle, f"{unit}__cycles_elapsed.avg.per_second", TIME, factor=NS, exact=False),
              product(f"{base}.sum.per_second", TIME, factor=NS, exact=False)]
    return Quantity(name, (product(metric), *rates), section)


# SASS floating-point instructions, as ncu's Hierarchical{Double,Single,Half}RooflineChart sections
# count FLOPs: add + mul + 2 x fma; half precision instructions are packed pairs (HADD2, HMUL2,
# HFMA2), so they count twice that.
SIMT: dict[str, dict[str, tuple[str, float]]] = {
    "FP64": {"add": ("dadd", 1.0), "mul": ("dmul", 1.0), "fma": ("dfma", 2.0)},
    "FP32": {"add": ("fadd", 1.0), "mul": ("fmul", 1.0), "fma": ("ffma", 2.0)},
    "FP16": {"add": ("hadd", 2.0), "mul": ("hmul", 2.0), "fma": ("hfma", 4.0)},
}
SIMT_SECTION = {"FP64": "Double", "FP32": "Single", "FP16": "Half"}

# Tensor-pipe work by source type: these counters are FLOPs already (2 per MAC; integer types
# count operations). sm__inst_executed_pipe_tensor is NOT used: on Hopper it also counts HFMA2
# instructions issued to the tensor pipe (see docs/roofline.md).
TENSOR_SOURCES: dict[str, str] = {
    "FP16": "sm__ops_path_tensor_src_fp16.sum",
    "BF16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "TF32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "FP64": "sm__ops_path_tensor_src_fp64.sum",
    "FP8": "sm__ops_path_tensor_src_fp8.sum",
    "INT8": "sm__ops_path_tensor_src_int8.sum",
    "INT1": "sm__ops_path_tensor_src_int1.sum",
}
IN_SETS = "(in --set full and --set roofline)"
TENSOR_OPTION = f"--section SpeedOfLight_HierarchicalTensorRooflineChart {IN_SETS}"

# Dense tensor peaks per source type: the fastest instruction path without 2:4 sparsity. The plain
# sm__ops_path_tensor_src_fp16/bf16/tf32/int8/fp8 peaks are the sparse ones (twice the dense).
TENSOR_DENSE_PATHS: dict[str, tuple[str, ...]] = {
    "FP16": ("sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off",
             "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off",
             "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16_sparsity_off"),
    "BF16": ("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off",
             "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off"),
    "TF32": ("sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off",
             "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off"),
    "FP64": ("sm__ops_path_tensor_src_fp64",),  # DMMA has no sparse mode
    "FP8": ("sm__ops_path_tensor_src_fp8_sparsity_off",),
    "INT8": ("sm__ops_path_tensor_op_igmma_src_int8_sparsity_off",
             "sm__ops_path_tensor_op_imma_src_int8_sparsity_off"),
    "INT1": ("sm__ops_path_tensor_src_int1",),  # BMMA has no sparse mode
}

# Bytes moved at each level of the memory hierarchy (NERSC's metrics) and their clock domains.
MEMORY: dict[str, tuple[str, str]] = {
    "DRAM": ("dram__bytes.sum", "dram"),
    "L2": ("lts__t_bytes.sum", "lts"),
    "L1": ("l1tex__t_bytes.sum", "l1tex"),
}
# The section that collects the bytes (as a rate): only DRAM's; L2 and L1 need --metrics.
MEMORY_SECTION = {"DRAM": "--section SpeedOfLight_RooflineChart", "L2": "", "L1": ""}

SM_CLOCKS = ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second")


def _simt_section(precision: str) -> str:
    return f"--section SpeedOfLight_Hierarchical{SIMT_SECTION[precision]}RooflineChart {IN_SETS}"


def _simt_quantity(precision: str, op: str) -> Quantity:
    instruction = SIMT[precision][op][0]
    return counter(SASS.format(instruction), "smsp", f"{precision} FLOPs", _simt_section(precision))


def _tensor_quantity(precision: str) -> Quantity:
    metric = TENSOR_SOURCES[precision]
    quantity = counter(metric, "sm", "Tensor FLOPs", TENSOR_OPTION)
    if precision != "FP8":
        return quantity
    # FP8: the plain counter, else its dense and sparse parts (the ones the section collects)
    parts = [metric.replace(".sum", f"_sparsity_{s}") for s in ("off", "on")]
    split = (Recipe(tuple(Term((f"{p}.sum",)) for p in parts)),
             Recipe(tuple(Term((f"{p}.sum.per_cycle_elapsed", "sm__cycles_elapsed.avg")) for p in parts), exact=False),
             Recipe(tuple(Term((f"{p}.sum.per_cycle_elapsed", "sm__cycles_elapsed.avg.per_second", TIME), NS)
                          for p in parts), exact=False))
    return Quantity(quantity.name, (quantity.recipes[0], *split, *quantity.recipes[1:]), quantity.section)


def _memory_quantity(level: str) -> Quantity:
    metric, unit = MEMORY[level]
    return counter(metric, unit, f"{level} bytes", MEMORY_SECTION[level])


# Per-kernel quantities, by dlagg column name.
QUANTITIES: dict[str, Quantity] = {
    "time_ns": Quantity("kernel duration", (product(TIME),), "--section SpeedOfLight (in every set)"),
    **{f"{p.lower()}_{op}": _simt_quantity(p, op) for p in SIMT for op in SIMT[p]},
    **{f"tensor_{p.lower()}": _tensor_quantity(p) for p in TENSOR_SOURCES},
    **{f"bytes_{level.lower()}": _memory_quantity(level) for level in MEMORY},
}

# Tensor Core use when the sm__ops_path_tensor_* counters are absent: tensor-pipe instructions that
# are not HFMA2 (Hopper issues packed half FMAs to the tensor pipe).
PIPE_TENSOR = "sm__inst_executed_pipe_tensor.sum"
PIPE_TENSOR_HFMA2 = "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"


def _clocked(peak: str, clocks: tuple[str, ...], factor: float = 1.0) -> tuple[Recipe, ...]:
    return tuple(product(peak, clock, factor=factor) for clock in clocks)


@dataclass(frozen=True)
class CeilingSpec:
    resource: str  # "DRAM", "FP32", "Tensor FP16", ...
    unit: str  # "B/s" or "FLOP/s" (integer tensor types: "OP/s")
    recipes: tuple[Recipe, ...]  # first available; for tensor types: every available, row-wise max
    section: str  # the ncu section that collects the metrics of the first recipe, "" when only --metrics does
    best_of_all: bool = False  # the ceiling is the fastest of several instruction paths

    @property
    def metrics(self) -> tuple[str, ...]:
        return self.recipes[0].metrics


def _memory_ceiling(level: str) -> CeilingSpec:
    metric, unit = MEMORY[level]
    recipes = (*_clocked(f"{metric}.peak_sustained", (f"{unit}__cycles_elapsed.avg.per_second",)),)
    return CeilingSpec(level, "B/s", recipes, MEMORY_SECTION[level])


def _simt_ceiling(precision: str) -> CeilingSpec:
    instruction, flops = SIMT[precision]["fma"]
    peak = SASS.format(instruction) + ".peak_sustained"
    derived = f"derived__sm__sass_thread_inst_executed_op_{instruction}_pred_on_x{flops:.0f}"
    recipes = (*_clocked(peak, SM_CLOCKS, flops), *_clocked(derived, SM_CLOCKS))
    return CeilingSpec(precision, "FLOP/s", recipes, _simt_section(precision))


def _tensor_ceiling(precision: str) -> CeilingSpec:
    recipes: list[Recipe] = []
    for path in TENSOR_DENSE_PATHS[precision]:
        recipes += [*_clocked(f"{path}.sum.peak_sustained", SM_CLOCKS),
                    product(f"{path}.sum.peak_sustained_elapsed.per_second")]
    unit = "OP/s" if precision.startswith("INT") else "FLOP/s"
    return CeilingSpec(f"Tensor {precision}", unit, tuple(recipes), TENSOR_OPTION, best_of_all=True)


CEILINGS: dict[str, CeilingSpec] = {
    **{level: _memory_ceiling(level) for level in MEMORY},
    **{p: _simt_ceiling(p) for p in SIMT},
    **{f"Tensor {p}": _tensor_ceiling(p) for p in TENSOR_SOURCES},
}
MEMORY_LEVELS = tuple(MEMORY)
COMPUTE = tuple(r for r in CEILINGS if r not in MEMORY)


def work_column(resource: str) -> str:
    """The KernelWork column holding the work a resource does (bytes or FLOPs)."""
    if resource in MEMORY:
        return f"bytes_{resource.lower()}"
    if resource.startswith("Tensor "):
        return f"tensor_{resource.removeprefix('Tensor ').lower()}"
    return f"flops_{resource.lower()}"


def known_metrics() -> tuple[str, ...]:
    """Every metric column any recipe may read (the CSV reader reads only these)."""
    names = [m for q in QUANTITIES.values() for m in q.metrics]
    names += [m for c in CEILINGS.values() for r in c.recipes for m in r.metrics]
    names += [PIPE_TENSOR, PIPE_TENSOR_HFMA2]
    return tuple(dict.fromkeys(names))
