// Device-side FP8 codes (fp8.h's formats) for the kernels that store or read them: fp8_cuda.cu's quantisers and the
// paged KV cache (paged_attention_cuda.cu, paged_attention_mma.cu). The encode is fp8.h's fp8_encode(x / scale)
// (IEEE f32 division, cvt.rn.satfinite), so device codes equal the CPU twins' bit for bit; the decode converts two
// codes at once to f16 (cvt.rn.f16x2.e4m3x2 / e5m2x2), which is exact: every E4M3 and E5M2 value is an f16 value
// (and a bf16 and f32 one).
// Tests: fp8_cuda_test.cpp (codes against fp8_quantize), paged_attention_cuda_test.cpp (FP8 KV pools).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace mmserve::kernels {

// x / scale in IEEE f32 (not the fast reciprocal), then cvt.rn.satfinite: fp8_encode(x / scale) of the CPU twin.
__device__ __forceinline__ uint8_t fp8_encode_scaled(float x, float scale, bool e4m3) {
  const float v = __fdiv_rn(x, scale);
  return e4m3 ? __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3) : __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
}

// Two codes (the low byte first) as f16, exactly.
template <__nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ __half2 fp8x2_to_half2(uint16_t pair) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kFormat));
}

template <__nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t pair) {
  return __half22float2(fp8x2_to_half2<kFormat>(pair));
}

}  // namespace mmserve::kernels
