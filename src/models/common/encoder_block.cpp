// Pre-LN encoder block forward (see encoder_block.h).
#include "models/common/encoder_block.h"

#include <cmath>

#include "kernels/gemm/gemm.h"
#include "kernels/layer_norm/layer_norm.h"

namespace mmserve::models {

static int64_t round_up_16(int64_t n) {
  return (n + 15) / 16 * 16;
}  // keeps every slice 64-byte aligned

int64_t encoder_block_scratch_floats(const EncoderBlockConfig& c, int64_t rows) {
  return round_up_16(rows * c.hidden) * 2 + round_up_16(rows * 3 * c.hidden) + round_up_16(rows * c.intermediate);
}

EncoderBlockScratch make_encoder_block_scratch(const EncoderBlockConfig& c, int64_t rows, float* floats) {
  EncoderBlockScratch s;
  s.normed = Tensor(floats, DType::kF32, {rows, c.hidden});
  floats += round_up_16(rows * c.hidden);
  s.qkv = Tensor(floats, DType::kF32, {rows, 3 * c.hidden});
  floats += round_up_16(rows * 3 * c.hidden);
  s.context = Tensor(floats, DType::kF32, {rows, c.hidden});
  floats += round_up_16(rows * c.hidden);
  s.mlp = Tensor(floats, DType::kF32, {rows, c.intermediate});
  return s;
}

void encoder_block_forward(const EncoderBlockConfig& c, const EncoderBlockWeights& w, Tensor& x,
                           const kernels::AttentionMask& mask, EncoderBlockScratch& s, const TraceFn& trace,
                           const std::string& prefix) {
  const int64_t batch = x.size(0), seq = x.size(1), rows = batch * seq, hidden = c.hidden;
  Tensor x2 = x.reshape({rows, hidden});
  auto dump = [&](const char* name, const Tensor& t) {
    if (trace) trace(prefix + name, t);
  };

  // Attention half.
  kernels::layer_norm(x2, w.ln1_weight, w.ln1_bias, c.layer_norm_eps, s.normed);
  dump("attn_norm", s.normed);
  kernels::linear(s.normed, w.qkv_weight, &w.qkv_bias, s.qkv);
  Tensor qkv = s.qkv.reshape({batch, seq, 3 * hidden});
  Tensor q = qkv.slice_cols(0, hidden);
  Tensor k = qkv.slice_cols(hidden, 2 * hidden);
  Tensor v = qkv.slice_cols(2 * hidden, 3 * hidden);
  Tensor context = s.context.reshape({batch, seq, hidden});
  const float scale = 1.0f / std::sqrt(static_cast<float>(hidden / c.heads));
  kernels::attention(q, k, v, context, c.heads, scale, mask);
  dump("attn_context", s.context);
  kernels::linear(s.context, w.out_weight, &w.out_bias, x2, kernels::Activation::kNone, /*accumulate=*/true);
  dump("attn_residual", x2);

  // MLP half.
  kernels::layer_norm(x2, w.ln2_weight, w.ln2_bias, c.layer_norm_eps, s.normed);
  dump("mlp_norm", s.normed);
  kernels::linear(s.normed, w.fc1_weight, &w.fc1_bias, s.mlp, c.activation);
  dump("mlp_act", s.mlp);
  kernels::linear(s.mlp, w.fc2_weight, &w.fc2_bias, x2, kernels::Activation::kNone, /*accumulate=*/true);
  dump("out", x2);
}

}  // namespace mmserve::models
