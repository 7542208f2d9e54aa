"""Reduced precision: Tensor-Core-eligible math still running in FP32 (DLProf's amp_detector).

Eligibility is decided per distinct kernel name (GEMM and convolution kernels are what Tensor
Cores run), so the detector also works on profiles without op ranges; when op ranges are known
the Ops column names the ops that launched the FP32 kernels.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .base import MEDIUM_SHARE, Finding, detector, iteration_list, ms, pct, require
from .facts import Facts

# Kernels doing GEMM/convolution math, the work Tensor Cores accelerate (cuDNN conv engines,
# cuBLAS/cuBLASLt/CUTLASS GEMMs, FFT/Winograd convolutions, fused attention). Matched anywhere in
# the demangled name, case-insensitively.
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
# ... and when the estimated saving is at least this share of the iteration.
AMP_MIN_STAKE = MEDIUM_SHARE
# Speed-up assumed for FP32 (FFMA) GEMM/conv kernels moved to FP16/bf16 Tensor Cores. NVIDIA's
# mixed-precision training guide reports up to 3x for whole networks; the GEMM/conv kernels
# themselves gain more (H100 dense FP16 Tensor Core peak is ~15x its FP32 FFMA peak), so 3x on
# those kernels alone is conservative.
FP32_TO_TC_SPEEDUP = 3.0
# TF32 -> FP16/bf16 Tensor Cores: 2x peak math on A100/H100, and half the bytes; taken as 1.5x
# because training-size GEMMs rarely reach peak.
TF32_TO_HALF_SPEEDUP = 1.5


def _classes(names: pd.Series, uses_tc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct kernel name: (eligible, tf32)."""
    eligible_re = re.compile(ELIGIBLE_KERNEL, re.I)
    not_re = re.compile(NOT_ELIGIBLE_KERNEL, re.I)
    tf32_re = re.compile(TF32_KERNEL, re.I)
    text = names.astype(str)
    eligible = text.map(lambda s: bool(eligible_re.search(s)) and not not_re.search(s)).to_numpy(dtype=bool)
    tf32 = text.map(lambda s: bool(tf32_re.search(s))).to_numpy(dtype=bool)
    return eligible | uses_tc, tf32 & uses_tc


@detector("amp")
def amp(facts: Facts) -> list[Finding]:
    """Tensor-Core-eligible kernels running in FP32 (or TF32) on a GPU with Tensor Cores."""
    kernels = facts.selected_kernels
    require(len(kernels) > 0, "GPU kernels in the aggregated iterations")
    gpus = facts.profile.gpus
    require(len(gpus) > 0, "the GPU's compute capability (no TARGET_INFO_GPU table)")
    mine = gpus[gpus["device_id"].isin(np.unique(kernels["device_id"].to_numpy()))]
    gpus = mine if len(mine) else gpus
    cc = int(gpus["cc_major"].min())
    if cc < TC_MIN_CC:
        return []
    ids = np.unique(kernels["name_id"].to_numpy())
    uses_tc = facts.ctx.kernel_uses_tc.reindex(ids).fillna(False).to_numpy(dtype=bool)
    eligible, tf32 = _classes(facts.profile.strings.decode(pd.Series(ids)), uses_tc)
    fp32_ids = ids[eligible & ~uses_tc]
    tf32_ids = ids[tf32]
    name_id = kernels["name_id"].to_numpy()
    in_eligible = np.isin(name_id, ids[eligible])
    eligible_time = float(kernels["dur"].to_numpy()[in_eligible].sum())
    fp32 = kernels[np.isin(name_id, fp32_ids)]
    tf = kernels[np.isin(name_id, tf32_ids)]
    slow_time = float(fp32["dur"].sum() + tf["dur"].sum())
    if eligible_time == 0 or slow_time / eligible_time < AMP_MIN_SHARE:
        return []
    fp32_bound = facts.gpu_bound_ns(fp32)
    tf32_bound = facts.gpu_bound_ns(tf)
    stake = fp32_bound * (1 - 1 / FP32_TO_TC_SPEEDUP) + tf32_bound * (1 - 1 / TF32_TO_HALF_SPEEDUP)
    if stake < AMP_MIN_STAKE * facts.typical_iteration_ns:
        return []
    slow = pd.concat([fp32, tf])
    text, _ = facts.top_kernels(slow, limit=5, total=float(kernels["dur"].sum()))
    gpu_name = ", ".join(sorted(set(gpus["name"].astype(str))))
    cc_text = f"{cc}.{int(gpus['cc_minor'].min())}"
    if cc >= BF16_MIN_CC:
        recommendation = ("Enable automatic mixed precision with bf16: run the forward pass and loss under "
                          "torch.autocast('cuda', dtype=torch.bfloat16) (no GradScaler needed); TensorFlow: "
                          "mixed_precision.set_global_policy('mixed_bfloat16'). Where FP32 must stay, at least allow "
                          "TF32 (torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True)."
                          " See https://developer.nvidia.com/automatic-mixed-precision")
    else:
        recommendation = ("Enable automatic mixed precision with FP16: torch.autocast('cuda', dtype=torch.float16) "
                          "with torch.amp.GradScaler; TensorFlow: mixed_precision.set_global_policy('mixed_float16'). "
                          "See https://developer.nvidia.com/automatic-mixed-precision")
    n_iter = len(facts.aggregated)
    evidence = (f"{gpu_name} (compute capability {cc_text}) has Tensor Cores; of {ms(eligible_time / n_iter)} of "
                f"GEMM/convolution kernel time per iteration, {pct(float(fp32['dur'].sum()), eligible_time)} runs "
                f"without Tensor Cores")
    if len(tf):
        evidence += f" and {pct(float(tf['dur'].sum()), eligible_time)} in TF32"
    evidence += (f" (kernel report: Uses TC = no; {len(fp32_ids) + len(tf32_ids)} distinct kernels); "
                 f"{ms(fp32_bound + tf32_bound)} of it per typical iteration with GPU work queued behind it")
    per = facts.per_iteration(slow["dur"].to_numpy(), slow["iteration"].to_numpy())
    return [Finding(
        detector="amp",
        problem=(f"{len(fp32_ids) + len(tf32_ids)} kernels were eligible to use Tensor Cores at reduced precision "
                 f"but run in {'FP32' if not len(tf) else 'FP32/TF32'}: "
                 f"{pct(slow_time, eligible_time)} of the GEMM/convolution GPU time"),
        recommendation=recommendation,
        evidence=evidence,
        time_at_stake_ns=stake,
        estimate=(f"their median per-iteration GPU time with work queued behind them, times (1 - 1/"
                  f"{FP32_TO_TC_SPEEDUP:g}) for FP32 kernels and (1 - 1/{TF32_TO_HALF_SPEEDUP:g}) for TF32 ones "
                  f"(assumed speed-ups on Tensor Cores at 16-bit precision)"),
        iterations=iteration_list(facts.aggregated[per > 0]),
        ops=facts.ops_of(slow),
        kernels=text,
    )]
