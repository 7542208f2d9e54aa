"""Tensor Core kernel classifier and op eligibility: table-driven cases and the real recordings."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from dlagg.classify import TC_ELIGIBLE_OPS, TC_RULES, kernel_uses_tc, op_tc_eligible, uses_tensor_cores
from dlagg.reader import load_profile

from .conftest import recording

# (kernel name, uses TC). Names are real: from the recordings, the public exports, or the
# PyProf / torch-tb-profiler test lists.
CASES = [
    # Volta / Turing / Ampere classic cuBLAS and cuDNN names
    ("volta_h884gemm_64x64_ldg8_nn", True),
    ("volta_sgemm_128x64_nn", False),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", True),
    ("ampere_h16816gemm_128x128_ldg8_stages_32x5_nn", True),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nn", True),
    ("ampere_s16816gemm_64x64_ldg8_stages_64x5_tn", True),  # TF32
    ("ampere_sgemm_128x64_nn", False),
    ("trt_ampere_h16816gemm_64x64_ldg8_relu_stages_64x5_tn_v1", True),
    ("volta_scudnn_128x32_relu_interior_nn_v1", False),
    ("void cudnn::detail::first_layer_wgrad_kernel<__half, float, 3, 4>(cudnnTensorStruct, const __half *)", True),
    # xmma families: f16/bf16/tf32/int8 on TC, ffma is FP32 SIMT
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", True),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1_"
     "tensor16x8x8_execute_kernel__5x_cudnn", True),
    ("sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1_tensor16x8x32_execute_kernel", True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
     True),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_warpsize2x2x1_g1_ffma_"
     "aligna4_alignc4_execute_kernel__5x_cudnn", False),
    ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_nt_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_"
     "execute_kernel__5x_cublas", False),
    ("sm50_xmma_pooling_coalescedC_NHWC_kMAX_3_False_execute_kernel_trt", False),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_execute_segment_k_off_kernel__5x_cublas", False),
    ("sm90_xmma_dgrad_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1_"
     "strided_execute_kernel__5x_cudnn", True),
    ("sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_"
     "execute_split_k_kernel__5x_cudnn", False),  # split-K step: ncu measured no tensor math (test_roofline)
    ("sm90_xmma_wgrad_image_first_layer_f16f16_f32_f32_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_"
     "tensor1688_execute_kernel_kernel__5x_cudnn", True),
    ("void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::implicit_gemm::"
     "wgrad_indexed::Warp_specialized_params<float>>(T1)", False),
    # CUTLASS
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816dgrad_optimized_f16_64x128_64x3_nhwc_align8>"
     "(T1::Params)", True),
    ("cutlass_tensorop_h884fprop_analytic_f16_128x128_32x2_nhwc", True),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized", True),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(T1::Params)", False),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_64x1_tn_align8>(T1::Params)", True),
    # Hopper / Blackwell
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", True),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
     "(Flash_fwd_params)", True),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t>::Params)", True),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm75(PyTorchMemEffAttention::AttentionKernel<float>::Params)", False),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<tcgen05_umma_bf16>>(T1::Params)", True),
    # cuBLAS 12.8+/13 nvjet: type code decides
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", True),
    ("nvjet_sm90_hsh_64x8_64x16_2x4_h_bz_NNT", True),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", True),
    ("nvjet_sm100_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", True),
    ("nvjet_sm90_sss_128x64_32x4_1x2_h_bz_NNN", False),
    # plain FP32 / non-GEMM kernels
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, const float *)", False),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int)", False),
    ("void precomputed_convolve_sgemm<__half, 128, 6, 7, 3, 3, 5, 1, false>(int, int, int, const __half *)", False),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>(cublasLt::cublasSplitKParams)",
     False),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::Half>>(int, T2, T3)", False),
    ("triton_poi_fused_add_0", False),
    ("matmul_tiled<16>", False),
]


@pytest.mark.parametrize(("name", "expected"), CASES)
def test_kernel_names(name: str, expected: bool) -> None:
    assert kernel_uses_tc(name) is expected


def test_every_rule_has_a_source_and_compiles() -> None:
    for rule in TC_RULES:
        assert rule.source.strip()
        re.compile(rule.pattern)
    # every rule is exercised by at least one case above, so none is dead weight
    for rule in TC_RULES:
        assert any(re.search(rule.pattern, name, re.IGNORECASE) for name, _ in CASES), rule.pattern


def test_series_api_matches_scalar() -> None:
    names = pd.Series([n for n, _ in CASES])
    assert uses_tensor_cores(names).tolist() == [e for _, e in CASES]


@pytest.mark.parametrize(("op_type", "eligible"), [
    ("conv2d", True), ("linear", True), ("matmul", True), ("bmm", True), ("addmm", True), ("baddbmm", True),
    ("scaled_dot_product_attention", True), ("_scaled_dot_product_flash_attention", True), ("lstm_cell", True),
    ("convolution_backward", True), ("relu", False), ("batch_norm", False), ("add", False), ("data", False),
])
def test_op_eligibility(op_type: str, eligible: bool) -> None:
    assert op_tc_eligible(pd.Series([op_type])).iloc[0] is np.bool_(eligible)
    assert (op_type in TC_ELIGIBLE_OPS) is eligible


# GEMM and convolution kernels by family name, independently of the classifier's rules.
GEMM_OR_CONV = r"(?i)gemm|conv|fprop|dgrad|wgrad|nvjet|sdpa|flash|fft2d|winograd"


def _tc_shares(name: str) -> tuple[float, float]:
    """(TC share of GEMM/conv kernel time, TC share of all kernel time) in a recording."""
    profile = load_profile(recording(name))
    kernels = profile.kernels
    duration = (kernels["end"] - kernels["start"]).to_numpy()
    ids = np.unique(kernels["name_id"].to_numpy())
    names = profile.strings.decode(pd.Series(ids))
    tc = pd.Series(uses_tensor_cores(names).to_numpy(), index=ids)
    gemm = pd.Series(names.str.contains(GEMM_OR_CONV).to_numpy(), index=ids)
    k_tc = tc.reindex(kernels["name_id"].to_numpy()).to_numpy()
    k_gemm = gemm.reindex(kernels["name_id"].to_numpy()).to_numpy()
    return duration[k_tc & k_gemm].sum() / duration[k_gemm].sum(), duration[k_tc].sum() / duration.sum()


def test_resnet_amp_gemm_and_conv_time_is_mostly_tensor_core() -> None:
    gemm_share, _ = _tc_shares("resnet_amp")
    assert gemm_share > 0.9


@pytest.mark.parametrize("name", ["resnet_fp32", "no_emit_nvtx"])
def test_fp32_recordings_use_no_tensor_cores(name: str) -> None:
    gemm_share, share = _tc_shares(name)
    assert gemm_share == 0.0 and share == 0.0
