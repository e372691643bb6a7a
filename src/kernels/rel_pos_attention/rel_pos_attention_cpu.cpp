// The CPU twin of the attention with SAM's decomposed relative position bias (contract: rel_pos_attention.h), as
// plain loops in the contract's order: the two bias projections of each query, the scores, a softmax, P V.
// Tests: rel_pos_attention_test.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/rel_pos_attention/rel_pos_attention.h"

namespace mmserve::kernels {

int64_t rel_pos_attention_bias_floats(const RelPosAttentionArgs& a) {
  return a.sequences * a.heads * a.height * a.width * (a.height + a.width);
}

Status rel_pos_attention_validate(const RelPosAttentionArgs& a) {
  const int64_t hidden = a.heads * a.head_dim;
  if (a.sequences < 0 || a.height <= 0 || a.width <= 0 || a.heads <= 0 || a.head_dim <= 0) {
    return invalid_argument("rel_pos_attention: sequences, height, width, heads and head_dim must be positive");
  }
  if (a.qkv == nullptr || a.out == nullptr) return invalid_argument("rel_pos_attention: null qkv or out");
  if (a.qkv_ld < 3 * hidden) return invalid_argument("rel_pos_attention: qkv_ld < 3 * heads * head_dim");
  if (a.out_ld < hidden) return invalid_argument("rel_pos_attention: out_ld < heads * head_dim");
  if ((a.rel_pos_h == nullptr) != (a.rel_pos_w == nullptr)) {
    return invalid_argument("rel_pos_attention: rel_pos_h and rel_pos_w come together");
  }
  if (a.dtype != DType::kF32 && a.dtype != DType::kF16 && a.dtype != DType::kBF16) {
    return invalid_argument("rel_pos_attention: dtype must be f32, f16 or bf16");
  }
  return ok_status();
}

Status rel_pos_attention_cpu(const RelPosAttentionArgs& a) {
  RETURN_IF_ERROR(rel_pos_attention_validate(a));
  if (a.dtype != DType::kF32) return invalid_argument("rel_pos_attention_cpu: f32 only");
  const int64_t height = a.height, width = a.width, tokens = height * width, hd = a.head_dim;
  const int64_t hidden = a.heads * hd;
  const float* qkv = static_cast<const float*>(a.qkv);
  float* out = static_cast<float*>(a.out);
  const bool bias = a.rel_pos_h != nullptr;
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < a.sequences * a.heads; ++task) {
    const int64_t s = task / a.heads, h = task % a.heads;
    std::vector<float> scores(static_cast<size_t>(tokens)), rel_h(height), rel_w(width);
    const float* rows = qkv + s * tokens * a.qkv_ld;
    for (int64_t i = 0; i < tokens; ++i) {
      const float* q = rows + i * a.qkv_ld + h * hd;
      const int64_t qy = i / width, qx = i % width;
      std::fill(rel_h.begin(), rel_h.end(), 0.0f);
      std::fill(rel_w.begin(), rel_w.end(), 0.0f);
      if (bias) {
        for (int64_t ky = 0; ky < height; ++ky) {
          const float* r = a.rel_pos_h + (qy - ky + height - 1) * hd;
          float dot = 0.0f;
          for (int64_t c = 0; c < hd; ++c) dot += q[c] * r[c];
          rel_h[ky] = dot;
        }
        for (int64_t kx = 0; kx < width; ++kx) {
          const float* r = a.rel_pos_w + (qx - kx + width - 1) * hd;
          float dot = 0.0f;
          for (int64_t c = 0; c < hd; ++c) dot += q[c] * r[c];
          rel_w[kx] = dot;
        }
      }
      float max = -INFINITY;
      for (int64_t j = 0; j < tokens; ++j) {
        const float* k = rows + j * a.qkv_ld + hidden + h * hd;
        float dot = 0.0f;
        for (int64_t c = 0; c < hd; ++c) dot += q[c] * k[c];
        scores[j] = a.scale * dot + rel_h[j / width] + rel_w[j % width];
        max = std::max(max, scores[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < tokens; ++j) {
        scores[j] = std::exp(scores[j] - max);
        sum += scores[j];
      }
      float* o = out + (s * tokens + i) * a.out_ld + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t j = 0; j < tokens; ++j) {
        const float* v = rows + j * a.qkv_ld + 2 * hidden + h * hd;
        const float p = scores[j] / sum;
        for (int64_t c = 0; c < hd; ++c) o[c] += p * v[c];
      }
    }
  }
  return ok_status();
}

}  // namespace mmserve::kernels
