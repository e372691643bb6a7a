// Internal to paged_attention_cuda: the kernel parameters both translation units share (paged_attention_cuda.cu:
// decode, plain kernel, dispatch; paged_attention_mma.cu: the tensor-core prefill), the per-row visibility
// rule of the contract, and the tensor-core launcher.
// Tests: paged_attention_cuda_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
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
};

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
