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

}  // namespace mmserve::kernels
