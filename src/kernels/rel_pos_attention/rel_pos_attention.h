// Multi-head self-attention with the decomposed relative position bias of MViTv2 / SAM (HF's SamVisionAttention):
// the attention of SAM's ViT image encoder, windowed (a sequence is one window) or global (a sequence is the whole
// token grid). This header holds the contract shared by the CPU twin (below) and the CUDA kernel
// (rel_pos_attention_cuda.h).
//
// Contract (row-major, H = heads * head_dim, tokens = height * width, token t at grid (t / width, t % width)):
//   qkv [sequences * tokens rows, qkv_ld]: q in columns [0, H), k in [H, 2H), v in [2H, 3H) (one fused projection);
//   out [sequences * tokens rows, out_ld], columns [0, H); must not alias qkv.
//   For sequence s, head h, query i = (qy, qx), key j = (ky, kx), q_i, k_j, v_j the head's columns:
//     rel_h[i][ky] = q_i . rel_pos_h[qy - ky + height - 1]      (rel_pos_h [2 height - 1, head_dim], f32)
//     rel_w[i][kx] = q_i . rel_pos_w[qx - kx + width - 1]       (rel_pos_w [2 width - 1, head_dim], f32)
//     out_i = sum_j softmax_j(scale * q_i . k_j + rel_h[i][ky] + rel_w[i][kx]) v_j
//   (q unscaled in the bias, as HF); without tables (both null) the bias is zero. Every key is visible.
// Types: qkv and out have `dtype` (f32, f16 or bf16); the tables are f32; scores, softmax and accumulation f32.
// Tests: rel_pos_attention_test.cpp (the twin against a double-precision loop), rel_pos_attention_cuda_test.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

struct RelPosAttentionArgs {
  const void* qkv = nullptr;
  int64_t qkv_ld = 0;  // elements between rows of qkv (>= 3 * heads * head_dim)
  void* out = nullptr;
  int64_t out_ld = 0;  // elements between rows of out (>= heads * head_dim)
  DType dtype = DType::kBF16;
  int64_t sequences = 0, height = 0, width = 0, heads = 0, head_dim = 0;
  float scale = 1.0f;
  const float* rel_pos_h = nullptr;  // [2 * height - 1, head_dim] or null (no bias)
  const float* rel_pos_w = nullptr;  // [2 * width - 1, head_dim] or null
  // CUDA only: scratch for the projections rel_h | rel_w, rel_pos_attention_bias_floats() floats (unused and may be
  // null without tables).
  float* bias = nullptr;
};

// Floats of RelPosAttentionArgs::bias: sequences * heads * tokens * (height + width).
int64_t rel_pos_attention_bias_floats(const RelPosAttentionArgs& args);

// The checks that do not depend on the data (shapes, strides, pointers); kInvalidArgument naming the field.
Status rel_pos_attention_validate(const RelPosAttentionArgs& args);

// The CPU twin: host pointers, dtype f32 only. Parallel over (sequence, head) with OpenMP.
Status rel_pos_attention_cpu(const RelPosAttentionArgs& args);

}  // namespace mmserve::kernels
