"""Decisions made once per distinct string: does a kernel use Tensor Cores?

Kernel names say what instructions a kernel runs only by convention, so the rules live in one
table with the reason for each. A kernel uses Tensor Cores when some USES_TC rule matches and no
NOT_TC rule does (FP32 SIMT variants of otherwise TC-looking families carry ``ffma``/``simt``).
"""

from __future__ import annotations

import re

import pandas as pd

# (regular expression, where it comes from). Matched case-insensitively anywhere in the demangled name.
USES_TC: tuple[tuple[str, str], ...] = (
    (r"h884|s884|h1688|s1688|i8816|c1688|16816|hmma|imma",
     "Volta/Turing/Ampere HMMA/IMMA shape markers (NVIDIA PyProf tc.py, torch-tb-profiler)"),
    (r"tensor1688|tensor16x8|tensorop",
     "cuDNN/CUTLASS tensor-op kernels: cutlass_tensorop_*, *_tensor1688_* (cuDNN 8/9 names)"),
    (r"xmma_(?:implicit_gemm|gemm|sparse|warp_specialized)|sm\d+_xmma_",
     "cuDNN/cuBLAS xmma kernels (PyProf list); FP32 ones are excluded by the ffma rule below"),
    (r"wgmma|gmma|mma_sync|\bmma\b",
     "Hopper/Blackwell warp-group MMA (wgmma/gmma) and explicit mma.sync kernels"),
    (r"flash|fmha|sdpa",
     "fused attention (FlashAttention, cuDNN fused MHA / SDPA) runs its GEMMs on Tensor Cores"),
    (r"nvjet_sm\d+_(?!sss|ddd|zzz|ccc)[a-z]{3}_",
     "cuBLAS 12/13 nvjet GEMMs: 3-letter type code (hsh half, tst bf16, ...); sss is plain FP32"),
    (r"ampere_(?:fp16|bf16|h)|turing_(?:fp16|h)|volta_(?:fp16|h)|sm\d+_tensor",
     "cuBLAS arch-named kernels with half/bf16 inputs (ampere_fp16_s1688gemm..., sm80_tensor...)"),
)

NOT_TC: tuple[tuple[str, str], ...] = (
    (r"ffma|simt|sgemm(?!.*(?:1688|tensor))",
     "FP32 SIMT math: *_ffma_*, cutlass_*_simt_*, sgemm (no Tensor Cores, TF32 off)"),
)


def _combined(rules: tuple[tuple[str, str], ...]) -> str:
    return "(?i)(?:" + "|".join(f"(?:{pattern})" for pattern, _ in rules) + ")"


_USES = re.compile(_combined(USES_TC))
_NOT = re.compile(_combined(NOT_TC))


def uses_tensor_cores(names: pd.Series) -> pd.Series:
    """Boolean per kernel name (call it on distinct names only)."""
    text = names.astype(str)
    return text.map(lambda s: bool(_USES.search(s)) and not _NOT.search(s)).astype(bool)


# NVTX ranges that mean "the training loop waits for its input": user ranges named for data
# loading (our recordings use `data`), PyTorch profiler's `enumerate(DataLoader)#...__next__`,
# DALI pipeline ranges.
DATALOADER_RANGE = (r"(?i)(?:data|dataloader|data_?load(?:er|ing)?|load_?data|next_?batch|get_?batch|input_?pipeline"
                    r"|.*DataLoader.*|.*dali.*)")

# OS runtime calls that are file or socket I/O (OSRT_API names; nsys appends no suffix here).
IO_CALL = (r"(?:p?read(?:v|64)?|p?write(?:v|64)?|fread|fwrite|f?open(?:64|at)?|fopen64|close|fclose|fsync|fdatasync"
           r"|recv(?:from|msg)?|send(?:to|msg)?|mmap(?:64)?|sendfile(?:64)?|splice)")
