// Internal to attention_kv_cuda: device helpers shared by its two translation units (the CUDA-core tiled
// kernel in attention_kv_cuda.cu, the tensor-core kernel in attention_kv_mma.cu), and the launcher of
// the tensor-core kernel. Element conversions of the K/V storage types, warp reductions, mma.sync /
// ldmatrix / cp.async wrappers (the same instructions as attention_cuda.cu's, which keeps its own copy
// private).
// Tests: attention_kv_cuda_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/attention/attention_kv.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::kernels::attention_kv_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kKeyTile = 64;  // keys per online-softmax step in both kernels

// Stored K/V element -> f32 (before its scale). FP8 E4M3 and INT8 values are exact in f16, bf16 and f32.
__device__ __forceinline__ float kv_to_f32(float v) {
  return v;
}
__device__ __forceinline__ float kv_to_f32(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float kv_to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float kv_to_f32(__nv_fp8_e4m3 v) {
  return static_cast<float>(v);
}
__device__ __forceinline__ float kv_to_f32(__nv_fp8_e5m2 v) {  // the paged KV cache's E5M2 pools
  return static_cast<float>(v);
}
__device__ __forceinline__ float kv_to_f32(int8_t v) {
  return static_cast<float>(v);
}

// Visible keys of batch row b: [0, L_b), L_b = kv_lengths[b] clamped to [0, kv_len], or kv_len.
__device__ __forceinline__ int kv_length(const int32_t* kv_lengths, int b, int kv_len) {
  if (kv_lengths == nullptr) return kv_len;
  return min(max(kv_lengths[b], 0), kv_len);
}

// Keys visible to query row i (of q_len) of a batch row with L visible keys: [0, result).
__device__ __forceinline__ int row_visible(int i, int q_len, int L, bool causal) {
  if (!causal) return L;
  return min(max(L - q_len + i + 1, 0), L);
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The tensor-core path (attention_kv_mma.cu): f16/bf16 q/out, head_dim <= 128, any storage.
constexpr int64_t kMmaHeadDimMax = 128;
Status launch_attention_kv_mma(const AttentionKvArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels::attention_kv_detail
