// Internal to paged_attention_cuda: the kernel parameters both translation units share (paged_attention_cuda.cu:
// decode, plain kernel, dispatch; paged_attention_mma.cu: the tensor-core prefill), the per-row visibility
// rule of the contract, the pool's element types (the activation type, or FP8 codes) and the tensor-core launcher.
// Tests: paged_attention_cuda_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/status.h"
#include "kernels/fp8/fp8_cuda_codes.cuh"
#include "kernels/paged_attention/paged_attention.h"

namespace mmserve::kernels::paged_detail {

constexpr float kLog2e = 1.4426950408889634f;

struct PagedParams {
  const void* q;
  int64_t q_ld;
  const void* k_cache;
  const void* v_cache;
  void* out;
  int64_t out_ld;
  const int32_t* block_tables;
  int64_t block_table_ld;
  const int32_t* seq_lens;
  const int32_t* query_start;
  int64_t width;  // kv_heads * head_dim
  int heads, group, head_dim, block_size, window;
  float scale_log2;  // scale * log2(e): scores go to the log2 domain
  int min_q;         // sequences with fewer new tokens are another kernel's (decode) or nobody's (0)
  int vec_q, vec_kv, vec_out;
  const float* k_scale;  // FP8 pools: one device float each (value = code * scale); null otherwise
  const float* v_scale;
};

// A pool element type KT: the activation type (float, __half, __nv_bfloat16), or FP8 codes (__nv_fp8_e4m3,
// __nv_fp8_e5m2). The kernels are templates on it, so a 16-bit pool compiles to the code it had before FP8 pools.
template <typename KT>
struct KvCodes {
  static constexpr bool kFp8 = false;
};
template <>
struct KvCodes<__nv_fp8_e4m3> {
  static constexpr bool kFp8 = true;
  static constexpr __nv_fp8_interpretation_t kFormat = __NV_E4M3;
};
template <>
struct KvCodes<__nv_fp8_e5m2> {
  static constexpr bool kFp8 = true;
  static constexpr __nv_fp8_interpretation_t kFormat = __NV_E5M2;
};

// The multiplier of a pool's codes (read on the device: graph replays see a new scale), 1 for 16-bit pools.
template <typename KT>
__device__ __forceinline__ float kv_scale(const float* scale) {
  if constexpr (KvCodes<KT>::kFp8) {
    return *scale;
  } else {
    return 1.0f;
  }
}

// Eight FP8 codes (the first in the low byte) as eight T (f16 or bf16) in one 16-byte word, exactly.
template <typename T, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ uint4 fp8x8_to_16bit(uint2 codes) {
  const uint32_t words[2] = {codes.x, codes.y};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = fp8x2_to_half2<kFormat>(static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2))));
    if constexpr (std::is_same_v<T, __half>) {
      memcpy(&out[i], &h, 4);
    } else {
      const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(h));  // exact: a code has <= 3 mantissa bits
      memcpy(&out[i], &b, 4);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Keys visible to new token i of a sequence with L keys and q_len new tokens: [lo, hi).
struct KeyRange {
  int lo, hi;
};
__device__ __forceinline__ KeyRange visible_keys(int i, int q_len, int L, int window) {
  const int hi = L - q_len + i + 1;
  return {window > 0 ? max(hi - window, 0) : 0, hi};
}

// Row slot of key j of a sequence through its block-table row.
__device__ __forceinline__ int64_t key_slot(const int32_t* table, int j, int block_size) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

// The tensor-core prefill (paged_attention_mma.cu): f16/bf16, head_dim 64 or 128.
bool paged_prefill_mma_takes(const PagedAttentionArgs& a);
Status launch_paged_prefill_mma(const PagedAttentionArgs& a, const PagedParams& p, cudaStream_t stream);

}  // namespace mmserve::kernels::paged_detail
