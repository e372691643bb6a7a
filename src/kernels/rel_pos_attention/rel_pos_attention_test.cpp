// The CPU twin of the attention with SAM's decomposed relative position bias against a double-precision loop that
// materialises the whole bias matrix (the contract read literally), over odd shapes: windows of 1x1, 3x5 and 14x14,
// a 9x7 grid, head_dim 1..80, with and without tables, strided rows. Rule: the flash-attention one (kernel_test_util.h)
// against a naive f32 version of the same loop.
#include "kernels/rel_pos_attention/rel_pos_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

struct Shape {
  int64_t sequences, height, width, heads, head_dim;
  bool bias;
  int64_t pad;  // extra columns of qkv and out
};

// The contract, materialised: bias[i][j] = q_i . Rh[qy - ky + H - 1] + q_i . Rw[qx - kx + W - 1].
template <typename R>
std::vector<R> reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& rh,
                         const std::vector<float>& rw, float scale) {
  const int64_t tokens = s.height * s.width, hidden = s.heads * s.head_dim, ld = 3 * hidden + s.pad;
  const int64_t out_ld = hidden + s.pad;
  std::vector<R> out(static_cast<size_t>(s.sequences * tokens * out_ld), R(0));
  for (int64_t q_seq = 0; q_seq < s.sequences; ++q_seq) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < tokens; ++i) {
        const float* q = qkv.data() + (q_seq * tokens + i) * ld + h * s.head_dim;
        std::vector<R> sc(static_cast<size_t>(tokens));
        R max = -INFINITY;
        for (int64_t j = 0; j < tokens; ++j) {
          const float* k = qkv.data() + (q_seq * tokens + j) * ld + hidden + h * s.head_dim;
          R dot = 0, bh = 0, bw = 0;
          const int64_t qy = i / s.width, qx = i % s.width, ky = j / s.width, kx = j % s.width;
          for (int64_t c = 0; c < s.head_dim; ++c) {
            dot += R(q[c]) * R(k[c]);
            if (s.bias) {
              bh += R(q[c]) * R(rh[(qy - ky + s.height - 1) * s.head_dim + c]);
              bw += R(q[c]) * R(rw[(qx - kx + s.width - 1) * s.head_dim + c]);
            }
          }
          sc[j] = R(scale) * dot + bh + bw;
          max = std::max(max, sc[j]);
        }
        R sum = 0;
        for (R& x : sc) sum += (x = std::exp(x - max));
        R* o = out.data() + (q_seq * tokens + i) * out_ld + h * s.head_dim;
        for (int64_t j = 0; j < tokens; ++j) {
          const float* v = qkv.data() + (q_seq * tokens + j) * ld + 2 * hidden + h * s.head_dim;
          for (int64_t c = 0; c < s.head_dim; ++c) o[c] += sc[j] / sum * R(v[c]);
        }
      }
    }
  }
  return out;
}

TEST(RelPosAttention, CpuTwinMatchesDoubleReference) {
  const Shape shapes[] = {{2, 1, 1, 1, 1, true, 0},  {3, 3, 5, 2, 7, true, 3},   {1, 9, 7, 3, 16, true, 1},
                          {2, 4, 4, 2, 8, false, 0}, {1, 14, 14, 2, 80, true, 0}, {1, 5, 5, 1, 64, true, 5}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.sequences << "x" << s.height << "x" << s.width << " h" << s.heads << " d"
                                      << s.head_dim << (s.bias ? " bias" : ""));
    const int64_t tokens = s.height * s.width, hidden = s.heads * s.head_dim;
    const std::vector<float> qkv = random_floats(static_cast<size_t>(s.sequences * tokens * (3 * hidden + s.pad)), seed++);
    const std::vector<float> rh = random_floats(static_cast<size_t>((2 * s.height - 1) * s.head_dim), seed++);
    const std::vector<float> rw = random_floats(static_cast<size_t>((2 * s.width - 1) * s.head_dim), seed++);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    std::vector<float> out(static_cast<size_t>(s.sequences * tokens * (hidden + s.pad)), 0.0f);
    RelPosAttentionArgs a;
    a.qkv = qkv.data(), a.qkv_ld = 3 * hidden + s.pad, a.out = out.data(), a.out_ld = hidden + s.pad;
    a.dtype = DType::kF32, a.sequences = s.sequences, a.height = s.height, a.width = s.width, a.heads = s.heads;
    a.head_dim = s.head_dim, a.scale = scale;
    if (s.bias) a.rel_pos_h = rh.data(), a.rel_pos_w = rw.data();
    ASSERT_TRUE(rel_pos_attention_cpu(a).ok());
    const std::vector<double> ref = reference<double>(s, qkv, rh, rw, scale);
    const std::vector<float> naive = reference<float>(s, qkv, rh, rw, scale);
    test_util::expect_within_naive_error(out, naive, ref, 1e-6, "rel_pos_attention_cpu");
  }
}

TEST(RelPosAttention, RejectsBadArguments) {
  std::vector<float> buf(64);
  RelPosAttentionArgs a;
  a.qkv = buf.data(), a.out = buf.data() + 32, a.dtype = DType::kF32, a.sequences = 1, a.height = 2, a.width = 2;
  a.heads = 1, a.head_dim = 2, a.qkv_ld = 5, a.out_ld = 2;
  EXPECT_EQ(rel_pos_attention_cpu(a).code(), StatusCode::kInvalidArgument);  // qkv_ld < 6
  a.qkv_ld = 6;
  a.rel_pos_h = buf.data();
  EXPECT_EQ(rel_pos_attention_cpu(a).code(), StatusCode::kInvalidArgument);  // one table only
  a.rel_pos_h = nullptr;
  a.height = 0;
  EXPECT_EQ(rel_pos_attention_cpu(a).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::kernels
