"""Decisions made once per distinct string: does a kernel use Tensor Cores, is an op eligible?

Kernel names say what instructions a kernel runs only by convention, so the rules live in one
table, ``TC_RULES``, each with where it comes from. A kernel uses Tensor Cores when some rule with
verdict True matches its demangled name and no rule with verdict False does: the False rules
catch the FP32 SIMT members of otherwise tensor-core families (``ffma``/``simt`` kernels of the
same ``sm80_xmma_*`` or ``cutlass_*`` families) and helper kernels that carry a family name.

Op eligibility (``TC_ELIGIBLE_OPS``) is decided on the normalised op type (``conv2d``, ``linear``,
...) that ``dlagg.ops`` derives from the NVTX markers; see docs/ops.md.

Call the functions on distinct strings only, then map the answer onto the big frames.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class TcRule:
    pattern: str  # regular expression, matched case-insensitively anywhere in the demangled name
    uses_tc: bool  # verdict when it matches; False rules win over True rules
    source: str  # where the rule comes from


TC_RULES: tuple[TcRule, ...] = (
    # --- kernels that run on Tensor Cores -------------------------------------------------
    TcRule(r"h884|s884|h1688|s1688|i8816|c1688|16816|hmma|imma", True,
           "Volta/Turing/Ampere HMMA/IMMA shape markers: NVIDIA PyProf pyprof/prof/tc.py, copied by "
           "torch-tb-profiler tensor_core.py (volta_h884gemm, turing_fp16_s1688gemm, ampere_h16816gemm)"),
    TcRule(r"dgrad_1x1_stride_2x2|first_layer_wgrad_kernel|conv1x1|conv2d_c1_k1|direct_group", True,
           "cuDNN 7/8 tensor-core convolution kernels named without a shape marker (PyProf tc.py list)"),
    TcRule(r"tensor1688|tensor16x8|tensorop", True,
           "cuDNN/CUTLASS tensor-op kernels: cutlass_tensorop_*, cutlass3x_sm90_tensorop_*, cutlass "
           "templates with MmaTensorOp, cuDNN 9 *_tensor1688_* (resnet_amp recording)"),
    TcRule(r"xmma_(?:implicit_gemm|gemm|sparse|warp_specialized)|sm(?:[7-9]\d|1\d\d)_xmma_", True,
           "cuDNN/cuBLAS/TensorRT xmma kernels of sm70+ (PyProf list; sm80/sm90 names in the "
           "recordings); their FP32 members carry ffma and are excluded below"),
    TcRule(r"wgmma|gmma|mma_sync|\bmma\b|tcgen05|(?<![a-z])umma", True,
           "Hopper warp-group MMA (wgmma/gmma), Blackwell tcgen05/UMMA, explicit mma.sync kernels"),
    TcRule(r"flash|fmha|sdpa", True,
           "fused attention (FlashAttention, xformers/PyTorch mem-efficient fmha, cuDNN SDPA "
           "cudnn_generated_fort_native_sdpa_sm90_flash_*_wgmma_f16 in transformer_amp_large)"),
    TcRule(r"nvjet_(?:sm\d+_)?(?!sss|ddd|ccc|zzz)[a-z]{3}_", True,
           "cuBLAS 12.8+/13 nvjet GEMMs: the 3-letter code is A/B, compute, C type (hsh = half, tst = "
           "bf16 in transformer_amp_large and resnet_amp); sss/ddd/ccc/zzz are full FP32/FP64"),
    TcRule(r"ampere_(?:fp16|bf16|h)|turing_(?:fp16|h)|volta_(?:fp16|h)|sm\d+_tensor", True,
           "cuBLAS arch-named kernels with half/bf16 inputs (ampere_fp16_s1688gemm, sm80_tensorop)"),
    # --- kernels that do not, although a rule above may match --------------------------------
    TcRule(r"ffma|simt|sgemm(?!.*(?:1688|tensor))", False,
           "FP32 SIMT math: *_ffma_* (sm80_xmma_gemm_f32f32_*_ffma in resnet_fp32/no_emit_nvtx), "
           "cutlass_*_simt_sgemm_*, *sgemm* (no Tensor Cores with TF32 off)"),
    TcRule(r"_f32f32_f32f32_f32_", False,
           "xmma kernels whose inputs, compute and output are all FP32 without TF32 (the TF32 ones read "
           "tf32f32_tf32f32 or f32f32_tf32f32, as in dataloader_bound): FP32 SIMT math"),
    TcRule(r"fmha_cutlass[fb]_f32_.*_sm(?:50|70|75)", False,
           "mem-efficient attention in FP32 before sm80 uses SIMT (xformers gemm_kernel_utils.h "
           "DefaultGemmType uses TensorOp for float only from sm80)"),
    TcRule(r"init_device_workspace|splitkreduce|reduce_?splitk|xmma_pooling", False,
           "helper kernels of TC families run no MMA: cask xmma workspace init and cutlass ReduceSplitK "
           "(resnet_amp), cuBLASLt split-K reduction (resnet_fp32), TensorRT xmma pooling (memfusion export)"),
    TcRule(r"execute_split_k_kernel", False,
           "cuDNN 9's split-K step of the sm90 xmma wgrad kernels (sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_..."
           "_execute_split_k_kernel__5x_cudnn in resnet_amp) carries the xmma family name but runs no MMA: Nsight "
           "Compute measured sm__ops_path_tensor_src_* = 0 in all 5 launches of the resnet_amp step (fixtures/ncu), "
           "only FP32/FP16 adds of the partial sums; the TC kernels of the family end in execute_kernel or "
           "execute_segment_k_off_kernel"),
)


def _combined(uses_tc: bool) -> re.Pattern[str]:
    return re.compile("(?i)(?:" + "|".join(f"(?:{r.pattern})" for r in TC_RULES if r.uses_tc is uses_tc) + ")")


_USES = _combined(True)
_NOT = _combined(False)


@functools.lru_cache(maxsize=1 << 14)
def kernel_uses_tc(name: str) -> bool:
    """One kernel name: True when a True rule matches and no False rule does. Kept per process: the ranks of a job,
    which one process reduces one after the other, run the same kernels, and searching the rules costs more than a
    cache lookup."""
    return bool(_USES.search(name)) and not _NOT.search(name)


def uses_tensor_cores(names: pd.Series) -> pd.Series:
    """Boolean per kernel name (call it on distinct names only)."""
    return names.astype(str).map(kernel_uses_tc).astype(bool)


# Op types whose math can run on Tensor Cores (normalised as dlagg.ops does: no namespace, no
# trailing in-place underscore; backward ops inherit their forward op's type). Sources:
# torch-tb-profiler tensor_core.py TC_OP_ALLOWLIST (convolutions, GEMM family, RNN cells), DLProf
# v1.8 sample (conv2d and linear ops marked eligible), plus the attention and RNN ops of
# PyTorch 2.x that run fused GEMMs. prelu (in the tb-profiler list) is left out: it is elementwise.
TC_ELIGIBLE_OPS: frozenset[str] = frozenset({
    # convolutions
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution", "_convolution_nogroup", "cudnn_convolution", "cudnn_convolution_transpose",
    "cudnn_convolution_relu", "cudnn_convolution_add_relu", "convolution_backward",
    "cudnn_convolution_backward", "cudnn_convolution_backward_input", "cudnn_convolution_backward_weight",
    "cudnn_convolution_transpose_backward", "cudnn_convolution_transpose_backward_input",
    "cudnn_convolution_transpose_backward_weight", "convolution_overrideable",
    # matrix multiplication
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "addr", "dot", "vdot",
    "chain_matmul", "linalg_multi_dot", "multi_dot", "einsum", "tensordot", "bilinear", "_addmm_activation",
    "_scaled_mm", "_int_mm",
    # attention
    "scaled_dot_product_attention", "_scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward", "_efficient_attention_forward", "multi_head_attention_forward",
    "_native_multi_head_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "scaled_dot_product_flash_attention", "scaled_dot_product_efficient_attention",
    "scaled_dot_product_cudnn_attention", "flash_attention", "efficient_attention",
    # recurrent layers and cells
    "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "_cudnn_rnn", "cudnn_rnn",
})


def op_tc_eligible(op_types: pd.Series) -> pd.Series:
    """Boolean per normalised op type (call it on distinct op types only)."""
    return op_types.astype(str).isin(TC_ELIGIBLE_OPS)


@dataclass(frozen=True)
class KernelFamily:
    """Kernels that one piece of advice fits: `name` (what they are, as a finding names them), `pattern` (matched
    case-insensitively anywhere in the kernel's demangled or short name), `advice` (what makes them faster)."""

    name: str
    pattern: str
    advice: str


# The first family whose pattern matches a kernel's name is its family (so attention before the convolutions, whose
# cuDNN kernels it shares a prefix with, and the convolutions before the GEMMs, which implicit-GEMM convolutions name).
KERNEL_FAMILIES: tuple[KernelFamily, ...] = (
    KernelFamily("communication (NCCL)", r"nccl",
                 "overlap it with compute (DDP's gradient buckets, no_sync under gradient accumulation) and balance "
                 "the ranks; see the communication and straggler findings"),
    KernelFamily("fused attention", r"flash|fmha|sdpa|attention",
                 "run it in bf16/fp16 with a head dimension that is a multiple of 8 "
                 "(torch.nn.functional.scaled_dot_product_attention then picks the FlashAttention or cuDNN kernels)"),
    KernelFamily("convolutions (cuDNN)", r"conv|implicit_gemm|implicit_precomp|fprop|dgrad|wgrad|winograd|fft2d",
                 "set torch.backends.cudnn.benchmark = True (cuDNN then times its algorithms for each input shape: "
                 "keep the shapes fixed), use the channels_last memory format and bf16/fp16 (torch.autocast) so that "
                 "they run on Tensor Cores"),
    KernelFamily("matrix multiplications (cuBLAS/CUTLASS GEMMs)",
                 r"gemm|gemv|nvjet|cutlass|cublas|matmul|wgmma|gmma|hmma|[hs]1688|[hs]884|16816",
                 "make their dimensions (batch x sequence, hidden and vocabulary sizes) multiples of 8 for bf16/fp16 "
                 "(16 for int8/fp8), run them in bf16/fp16 (torch.autocast), or let FP32 ones use TF32 "
                 "(torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision('high'))"),
    KernelFamily("elementwise, normalisation and reduction kernels (memory bound)",
                 r"elementwise|reduce_kernel|reduction|softmax|norm|bn_(?:fw|bw)|pool|dropout|copy|fill|index|scatter"
                 r"|gather|CatArray|multi_tensor_apply|triton_(?:poi|red|per)|GammaBeta",
                 "fuse them so that the data passes through memory fewer times (torch.compile; fused optimizers: "
                 "foreach=True / fused=True)"),
)
_FAMILIES = tuple((family, re.compile(family.pattern, re.IGNORECASE)) for family in KERNEL_FAMILIES)


@functools.lru_cache(maxsize=1 << 12)
def kernel_family(name: str) -> KernelFamily | None:
    """The family of a kernel (its demangled or short name, or both joined), None when no family's advice fits."""
    return next((family for family, pattern in _FAMILIES if pattern.search(name)), None)


# NVTX ranges that mean "the training loop waits for its input": user ranges named for data
# loading (our recordings use `data`), PyTorch profiler's `enumerate(DataLoader)#...__next__`,
# DALI pipeline ranges.
DATALOADER_RANGE = (r"(?i)(?:data|dataloader|data_?load(?:er|ing)?|load_?data|next_?batch|get_?batch|input_?pipeline"
                    r"|.*DataLoader.*|.*dali.*)")

# OS runtime calls that are file or socket I/O (OSRT_API names; nsys appends no suffix here).
IO_CALL = (r"(?:p?read(?:v|64)?|p?write(?:v|64)?|fread|fwrite|f?open(?:64|at)?|fopen64|close|fclose|fsync|fdatasync"
           r"|recv(?:from|msg)?|send(?:to|msg)?|mmap(?:64)?|sendfile(?:64)?|splice)")
