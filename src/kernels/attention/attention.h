// Multi-head scaled dot-product attention on CPU (the reference for the fused CUDA kernel).
//
// Contract: q [batch, seq_q, heads * head_dim], k and v [batch, seq_kv, heads * head_dim], out
// [batch, seq_q, heads * head_dim], all f32 with a contiguous last dimension; the row stride (stride(1))
// may be larger than heads * head_dim so that q, k and v can be column slices of one fused QKV projection
// [batch, seq, 3 * hidden]. out must not alias q, k or v.
//   out[b, i, h, :] = sum_j softmax_j(scale * q[b,i,h,:] . k[b,j,h,:] + mask(b,i,j)) * v[b,j,h,:]
// Masks: `causal` hides j > i (+ offset seq_kv - seq_q, so a decoder step sees its whole past);
// `kv_lengths` (nullable, one per batch row) hides keys j >= kv_lengths[b] (padding). A query row that
// sees no key gets zeros. Parallel over (batch, head) with OpenMP.
// Tests: attention_test.cpp (odd heads/dims/lengths, masks, vs a naive loop); bench: attention_bench.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mmserve::kernels {

struct AttentionMask {
  bool causal = false;
  const int32_t* kv_lengths = nullptr;  // [batch] or nullptr
};

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, int64_t heads, float scale,
               const AttentionMask& mask);

}  // namespace mmserve::kernels
