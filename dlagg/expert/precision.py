"""Reduced precision: Tensor-Core-eligible math still running in FP32 (DLProf's amp_detector).

Eligibility is decided per distinct kernel name (GEMM and convolution kernels are what Tensor
Cores run), so the detector also works on profiles without op ranges; when op ranges are known
the Ops column names the ops that launched the FP32 kernels.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .base import MIN_STAKE_NS, Finding, detector, iteration_list, ms, pct, require
from .facts import Facts

# Kernels doing GEMM/convolution math, the work Tensor Cores accelerate (cuDNN conv engines,
# cuBLAS/cuBLASLt/CUTLASS GEMMs, FFT/Winograd convolutions, fused attention). Matched,
# case-insensitively, in the demangled name without its parameter list (parameter types such as
# cudnn::reduced_divisor say nothing about what the kernel computes).
ELIGIBLE_KERNEL = (r"gemm|conv(?!ert)|fprop|dgrad|wgrad|winograd|fft2d|matmul|nvjet|xmma|cutlass|attention|flash"
                   r"|fmha|bmm")
# ... but not their helpers (workspace init, split-K reductions, epilogues, layout transforms),
# memory-bound matrix-vector kernels, or FP64 math, which AMP deliberately leaves alone.
NOT_ELIGIBLE_KERNEL = (r"workspace|splitk|reduce|epilogue|padding|flip_filter|nchwtonhwc|nhwctonchw|scalepacked"
                       r"|transpose|gemv|elementwise|copy|fill|dgemm|zgemm|f64|double")
# Tensor Core kernels that still compute in TF32 (FP32 range, 10-bit mantissa).
TF32_KERNEL = r"tf32"

# Volta (compute capability 7.0) introduced Tensor Cores; bf16 needs Ampere (8.0).
TC_MIN_CC = 7
BF16_MIN_CC = 8
# Fire when most of the eligible GPU time is not at reduced precision on Tensor Cores: a run
# with AMP keeps only leftovers in FP32 (resnet_amp: 1% of eligible time), one without has all.
AMP_MIN_SHARE = 0.5
# ... and when the estimated saving is measurable at all: the report's general minimum (MIN_STAKE_NS,
# what it shows as at least 0.001 ms). There is no threshold relative to the iteration, as DLProf
# had none: it advised AMP to small FP32 models too. Enabling AMP is a few lines, and the finding's
# severity (from the stake's share of the iteration) tells a model where it matters from one where
# it hardly does.
AMP_MIN_STAKE_NS = MIN_STAKE_NS
# Speed-up assumed for FP32 (FFMA) GEMM/conv kernels moved to FP16/bf16 Tensor Cores. NVIDIA's
# mixed-precision training guide reports up to 3x for whole networks; the GEMM/conv kernels
# themselves gain more (H100 dense FP16 Tensor Core peak is ~15x its FP32 FFMA peak), so 3x on
# those kernels alone is conservative.
FP32_TO_TC_SPEEDUP = 3.0
# TF32 -> FP16/bf16 Tensor Cores: 2x peak math on A100/H100, and half the bytes; taken as 1.5x
# because training-size GEMMs rarely reach peak.
TF32_TO_HALF_SPEEDUP = 1.5


def _head(name: str) -> str:
    """A demangled name without its parameter list: the text before the first '(' outside <...>."""
    depth = 0
    for i, ch in enumerate(name):  # one distinct kernel name, not events
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


_ELIGIBLE = re.compile(ELIGIBLE_KERNEL, re.I)
_NOT_ELIGIBLE = re.compile(NOT_ELIGIBLE_KERNEL, re.I)
_TF32 = re.compile(TF32_KERNEL, re.I)


@functools.lru_cache(maxsize=1 << 14)
def _kernel_class(name: str) -> tuple[bool, bool, bool]:
    """One kernel name: (GEMM/conv math, helper of such math, TF32). Kept per process: the ranks of a job, which
    one process reduces one after the other, run the same kernels."""
    head = _head(name)
    helper = bool(_NOT_ELIGIBLE.search(head))
    return bool(_ELIGIBLE.search(head)) and not helper, helper, bool(_TF32.search(head))


def _classes(names: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct kernel name: (GEMM/conv math, helper of such math, TF32)."""
    classes = np.array([_kernel_class(name) for name in names.astype(str)], dtype=bool).reshape(-1, 3)
    return classes[:, 0], classes[:, 1], classes[:, 2]


@dataclass(frozen=True)
class OpLevel:
    """What op ranges add (DLProf's definition: an eligible op uses TC when any of its kernels does)."""

    kernels: pd.DataFrame  # kernels of eligible ops that run no TC kernel at all
    count: int = 0  # such ops
    eligible: int = 0  # eligible ops
    share: float = 0.0  # their share of the eligible ops' kernel time
    names: str = ""  # "CONV2D_4 bprop, ..." (Op ID and direction, most kernel time first)
    types: str = ""  # their op types
    utilization: float | None = None  # the summary's Tensor Core Kernel Utilization % (None: no eligible kernel)


def _op_level(facts: Facts, kernels: pd.DataFrame) -> OpLevel:
    inst = facts.ctx.op_instances
    eligible = inst[inst["tc_eligible"].to_numpy(dtype=bool)]
    if eligible.empty:
        return OpLevel(kernels.iloc[:0])
    per_op = eligible.groupby("key", sort=False)[["kernel_time", "tc_kernel_time"]].sum()
    not_using = per_op[(per_op["tc_kernel_time"] == 0) & (per_op["kernel_time"] > 0)]
    total = float(per_op["kernel_time"].sum())
    instance = facts.ctx.ops.work_instance[kernels.index.to_numpy()]
    mine = np.isin(instance, eligible.index[eligible["key"].isin(not_using.index)].to_numpy())
    ops = facts.ctx.ops.ops.reindex(not_using.sort_values("kernel_time", ascending=False).index)
    names = [f"{i} {d}" for i, d in zip(ops["op_id"], ops["direction"], strict=True)]
    return OpLevel(
        kernels=kernels[mine],
        count=len(not_using),
        eligible=len(per_op),
        share=float(not_using["kernel_time"].sum()) / total if total else 0.0,
        utilization=100.0 * float(per_op["tc_kernel_time"].sum()) / total if total else None,
        names=", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else ""),
        types=", ".join(sorted(set(ops["op_type"].astype(str)))),
    )


@dataclass(frozen=True)
class _Times:
    """The GEMM/convolution kernel time of the aggregated iterations by precision (ns, all iterations), and
    the part of the FP32/TF32 time on the critical path (ns, per typical iteration)."""

    eligible: float  # GEMM/convolution math, or any kernel on Tensor Cores
    slow: float  # FP32 and TF32 math
    named_fp32: float  # FP32 math known by its name (not the unnamed kernels of eligible ops without TC kernels)
    tf32: float
    half: float  # at 16 bits on Tensor Cores
    on_path: float  # FP32 and TF32 kernels on the critical path, per typical iteration
    tf32_kernels: int  # TF32 kernel launches


def _compute_capability(facts: Facts, kernels: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the GPUs that ran `kernels`, or all GPUs when none is known, their lowest compute capability major)."""
    gpus = facts.profile.gpus
    require(len(gpus) > 0, "the GPU's compute capability (no TARGET_INFO_GPU table)")
    mine = gpus[gpus["device_id"].isin(np.unique(kernels["device_id"].to_numpy()))]
    gpus = mine if len(mine) else gpus
    known = gpus["cc_major"].dropna()  # <NA> where the export holds no usable compute capability
    require(len(known) > 0, "the GPU's compute capability (TARGET_INFO_GPU has none)")
    return gpus, int(known.min())


def _recommendation(mixed: bool, cc: int) -> str:
    """What to do: bring the leftovers under mixed precision when it is on (`mixed`), else enable AMP (bf16
    where the GPU has it)."""
    if mixed:  # mixed precision is on already: advise the leftovers, not AMP from scratch
        return ("Mixed precision is already on for part of the math: bring these kernels' ops under it too. "
                "Run them inside the autocast region (ops outside it, custom ops, and ops autocast keeps in "
                "FP32 stay FP32), keep their shapes multiples of 8, and let cuDNN pick Tensor Core "
                "algorithms (torch.backends.cudnn.benchmark = True).")
    if cc >= BF16_MIN_CC:
        return ("Enable automatic mixed precision with bf16: run the forward pass and loss under "
                "torch.autocast('cuda', dtype=torch.bfloat16) (no GradScaler needed); TensorFlow: "
                "mixed_precision.set_global_policy('mixed_bfloat16'). Where FP32 must stay, at least allow "
                "TF32 (torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True)."
                " See https://developer.nvidia.com/automatic-mixed-precision")
    return ("Enable automatic mixed precision with FP16: torch.autocast('cuda', dtype=torch.float16) "
            "with torch.amp.GradScaler; TensorFlow: mixed_precision.set_global_policy('mixed_float16'). "
            "See https://developer.nvidia.com/automatic-mixed-precision")


def _problem_and_evidence(gpu: str, times: _Times, n_iter: int, n_slow: int, ops: OpLevel) -> tuple[str, str]:
    """The finding's Problem and evidence texts; `gpu`: 'name (compute capability x.y)'."""
    evidence = (f"{gpu} has Tensor Cores; of {ms(times.eligible / n_iter)} of "
                f"GEMM/convolution kernel time per iteration, {pct(times.named_fp32, times.eligible)} runs without "
                "Tensor Cores")
    if times.tf32_kernels:
        evidence += f" and {pct(times.tf32, times.eligible)} in TF32"
    evidence += (f", {pct(times.half, times.eligible)} at 16 bits on Tensor Cores ("
                 + ("mixed precision is on: AMP is not advised from scratch" if times.half > 0 else "none: AMP is off")
                 + f"; kernel report: Uses TC; {n_slow} distinct kernels not at 16 bits); "
                 f"{ms(times.on_path)} of them per typical iteration on the critical path (GPU work queued "
                 "behind them, or the host waiting for them)")
    problem = (f"{n_slow} kernels were eligible to use Tensor Cores at reduced precision but run in "
               f"{'FP32' if not times.tf32_kernels else 'FP32/TF32'}: {pct(times.slow, times.eligible)} of the "
               "GEMM/convolution GPU time")
    if ops.count:
        evidence += (f"; tensor report: {ops.count} of {ops.eligible} Tensor-Core-eligible ops ({ops.types}) use no "
                     f"Tensor Core kernel, {ops.share:.1%} of the eligible ops' kernel time")
        problem = f"{ops.count} ops were eligible to use Tensor Cores but none of their kernels do; {problem}"
    if ops.utilization is not None:
        evidence += f"; summary: Tensor Core Kernel Utilization % {ops.utilization:.1f}"
    return problem, evidence


@detector("amp")
def amp(facts: Facts) -> list[Finding]:
    """Tensor-Core-eligible kernels (and ops) running in FP32 or TF32 on a GPU with Tensor Cores."""
    kernels = facts.selected_kernels
    require(len(kernels) > 0, "GPU kernels in the aggregated iterations")
    gpus, cc = _compute_capability(facts, kernels)
    if cc < TC_MIN_CC:
        return []
    ids = np.unique(kernels["name_id"].to_numpy())
    uses_tc = facts.ctx.uses_tc(ids)
    math, helper, tf32 = _classes(facts.profile.strings.decode(pd.Series(ids)))
    name_id = kernels["name_id"].to_numpy()
    eligible = kernels[np.isin(name_id, ids[math | uses_tc])]
    fp32 = kernels[np.isin(name_id, ids[math & ~uses_tc])]
    tf = kernels[np.isin(name_id, ids[tf32 & uses_tc])]
    half = kernels[np.isin(name_id, ids[math & uses_tc & ~tf32])]  # GEMM/convolution at 16 bits on Tensor Cores
    eligible_time = float(eligible["dur"].sum())
    slow_time = float(fp32["dur"].sum() + tf["dur"].sum())
    ops = _op_level(facts, kernels)
    kernel_share = slow_time / eligible_time if eligible_time else 0.0
    if kernel_share < AMP_MIN_SHARE and ops.share < AMP_MIN_SHARE:
        return []
    # Kernels of eligible ops without any TC kernel count too when their names say nothing (Triton,
    # new libraries), but not the layout/workspace helpers those ops also launch.
    unnamed = ops.kernels[~np.isin(ops.kernels["name_id"].to_numpy(), ids[math | helper | uses_tc])]
    fp32 = pd.concat([fp32, unnamed])
    fp32_bound = facts.gpu_bound_ns(fp32)
    tf32_bound = facts.gpu_bound_ns(tf)
    stake = fp32_bound * (1 - 1 / FP32_TO_TC_SPEEDUP) + tf32_bound * (1 - 1 / TF32_TO_HALF_SPEEDUP)
    if stake < AMP_MIN_STAKE_NS:
        return []
    slow = pd.concat([fp32, tf])
    text, _ = facts.top_kernels(slow, limit=5, total=float(kernels["dur"].sum()))
    times = _Times(eligible=eligible_time, slow=slow_time, named_fp32=float(fp32["dur"].sum() - unnamed["dur"].sum()),
                   tf32=float(tf["dur"].sum()), half=float(half["dur"].sum()), on_path=fp32_bound + tf32_bound,
                   tf32_kernels=len(tf))
    gpu = f"{', '.join(sorted(set(gpus['name'].astype(str))))} (compute capability {cc}.{int(gpus['cc_minor'].min())})"
    problem, evidence = _problem_and_evidence(gpu, times, len(facts.aggregated), len(np.unique(facts.short_ids(slow))),
                                              ops)
    per = facts.per_iteration(slow["dur"].to_numpy(), slow["iteration"].to_numpy())
    return [Finding(
        detector="amp",
        problem=problem,
        recommendation=_recommendation(times.half > 0, cc),
        evidence=evidence,
        time_at_stake_ns=stake,
        estimate=(f"their median per-iteration GPU time on the critical path, times (1 - 1/"
                  f"{FP32_TO_TC_SPEEDUP:g}) for FP32 kernels and (1 - 1/{TF32_TO_HALF_SPEEDUP:g}) for TF32 ones "
                  f"(assumed speed-ups on Tensor Cores at 16-bit precision)"),
        iterations=iteration_list(facts.aggregated[per > 0]),
        ops=ops.names,
        kernels=text,
    )]
