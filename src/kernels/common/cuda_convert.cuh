// Device-side helpers shared by the element-wise CUDA kernels: 16-bit <-> f32 conversions (round to nearest
// even, as torch) and Pack, kVec consecutive elements moved as one access of kVec * sizeof(T) bytes (<= 16).
// Every kernel computes in f32 whatever its storage dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mmserve::kernels {

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Two packed 16-bit values (one 32-bit word of a 16-byte load) as f32, low half first: the GEMV kernels' unpacking
// (gemm_small_m_cuda.cu, moe_cuda.cu).
template <typename T>
__device__ __forceinline__ float2 packed_to_float2(uint32_t v);
template <>
__device__ __forceinline__ float2 packed_to_float2<__nv_bfloat16>(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}
template <>
__device__ __forceinline__ float2 packed_to_float2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// One lane's share of a warp's dot product of two 16-bit rows of k values (k % 8 == 0, 16-byte aligned): lane l
// takes the 8-value packs l, l + 32, ...; the caller sums the lanes (moe_cuda.cu's expert GEMV, lora_cuda.cu's
// shrink). w is read through the read-only cache.
template <typename T>
__device__ __forceinline__ float dot16_lane(const T* x, const T* w, int64_t k, int lane) {
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t c = lane * 8; c < k; c += 32 * 8) {
    const uint4 w4 = __ldg(reinterpret_cast<const uint4*>(w + c));
    const uint4 x4 = *reinterpret_cast<const uint4*>(x + c);
    const uint32_t wv[4] = {w4.x, w4.y, w4.z, w4.w}, xv[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 wf = packed_to_float2<T>(wv[j]), xf = packed_to_float2<T>(xv[j]);
      acc = fmaf(xf.x, wf.x, fmaf(xf.y, wf.y, acc));
    }
  }
  return acc;
}

}  // namespace mmserve::kernels
