// Tests of attention() against a double-precision loop, under the flash-attention rule (error at most 2x
// that of a naive f32 loop, plus a small floor).
//
// Cases: heads {1,3,12} x head_dim {1,8,64} with seq_q != seq_kv; causal with a positive offset (a decoder
// step sees its whole past) and a negative one (early queries see nothing: zeros); kv_lengths including 0
// with NaN in the padded keys/values (proving they are never read); q/k/v as column slices of one fused
// [batch, t, 3 * hidden] buffer with a strided output; and the CLIP vision and text shapes.
#include "kernels/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::expect_within_naive_error;
using test_util::random_floats;

struct AttentionCase {
  int64_t batch = 2, heads = 3, head_dim = 8, seq_q = 5, seq_kv = 9;
  bool causal = false;
  std::vector<int32_t> kv_lengths;  // empty: no padding mask
  bool fused_qkv = false;           // q, k, v as column slices of one [batch, t, 3 * hidden] buffer
  int64_t out_pad = 0;              // extra columns after each output row
};

// Keys visible to query i of batch row b: the prefix [0, n).
int64_t visible_keys(const AttentionCase& c, int64_t b, int64_t i) {
  int64_t n = c.kv_lengths.empty() ? c.seq_kv : c.kv_lengths[b];
  if (c.causal) n = std::min(n, std::max<int64_t>(0, i + (c.seq_kv - c.seq_q) + 1));
  return n;
}

void check_attention(const AttentionCase& c, uint32_t seed) {
  SCOPED_TRACE("batch=" + std::to_string(c.batch) + " heads=" + std::to_string(c.heads) +
               " head_dim=" + std::to_string(c.head_dim) + " seq_q=" + std::to_string(c.seq_q) +
               " seq_kv=" + std::to_string(c.seq_kv) + (c.causal ? " causal" : "") + (c.fused_qkv ? " fused" : ""));
  const int64_t hidden = c.heads * c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // Row strides: the fused layout interleaves q|k|v per token; otherwise each has its own padded rows.
  const int64_t ldq = c.fused_qkv ? 3 * hidden : hidden + 1;
  const int64_t ldk = c.fused_qkv ? 3 * hidden : hidden + 2;
  const int64_t ldv = c.fused_qkv ? 3 * hidden : hidden;
  const int64_t ldo = hidden + c.out_pad;
  std::vector<float> fused, q_buf, k_buf, v_buf;
  const float *q, *k, *v;
  if (c.fused_qkv) {
    fused = random_floats(c.batch * c.seq_q * 3 * hidden, seed, -2.0f, 2.0f);
    q = fused.data();
    k = fused.data() + hidden;
    v = fused.data() + 2 * hidden;
  } else {
    q_buf = random_floats(c.batch * c.seq_q * ldq, seed, -2.0f, 2.0f);
    k_buf = random_floats(c.batch * c.seq_kv * ldk, seed + 1, -2.0f, 2.0f);
    v_buf = random_floats(c.batch * c.seq_kv * ldv, seed + 2);
    q = q_buf.data();
    k = k_buf.data();
    v = v_buf.data();
  }
  // Padding keys and values hold NaN: any read of them would poison the output.
  for (int64_t b = 0; b < static_cast<int64_t>(c.kv_lengths.size()); ++b) {
    for (int64_t j = c.kv_lengths[b]; j < c.seq_kv; ++j) {
      for (int64_t t = 0; t < hidden; ++t) {
        const_cast<float*>(k)[(b * c.seq_kv + j) * ldk + t] = std::numeric_limits<float>::quiet_NaN();
        const_cast<float*>(v)[(b * c.seq_kv + j) * ldv + t] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  }

  std::vector<double> reference(c.batch * c.seq_q * hidden, 0.0);
  std::vector<float> naive(reference.size(), 0.0f);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < c.seq_q; ++i) {
        const int64_t n = visible_keys(c, b, i);
        if (n == 0) continue;  // sees nothing: zeros
        const float* qi = q + (b * c.seq_q + i) * ldq + h * c.head_dim;
        std::vector<double> p(n);
        std::vector<float> p_f(n);
        for (int64_t j = 0; j < n; ++j) {
          const float* kj = k + (b * c.seq_kv + j) * ldk + h * c.head_dim;
          double dot = 0.0;
          float dot_f = 0.0f;
          for (int64_t t = 0; t < c.head_dim; ++t) {
            dot += static_cast<double>(qi[t]) * kj[t];
            dot_f += qi[t] * kj[t];
          }
          p[j] = dot * scale;
          p_f[j] = dot_f * scale;
        }
        const double max_p = *std::max_element(p.begin(), p.end());
        const float max_f = *std::max_element(p_f.begin(), p_f.end());
        double sum = 0.0;
        float sum_f = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          p[j] = std::exp(p[j] - max_p);
          p_f[j] = std::exp(p_f[j] - max_f);
          sum += p[j];
          sum_f += p_f[j];
        }
        for (int64_t t = 0; t < c.head_dim; ++t) {
          double acc = 0.0;
          float acc_f = 0.0f;
          for (int64_t j = 0; j < n; ++j) {
            const float vj = v[(b * c.seq_kv + j) * ldv + h * c.head_dim + t];
            acc += p[j] / sum * vj;
            acc_f += p_f[j] / sum_f * vj;
          }
          reference[(b * c.seq_q + i) * hidden + h * c.head_dim + t] = acc;
          naive[(b * c.seq_q + i) * hidden + h * c.head_dim + t] = acc_f;
        }
      }
    }
  }

  constexpr float kSentinel = 12345.0f;  // output padding must keep it
  std::vector<float> out_buf(c.batch * c.seq_q * ldo, kSentinel);
  const Tensor qt = Tensor(const_cast<float*>(q), DType::kF32, {c.batch, c.seq_q, ldq}).slice_cols(0, hidden);
  const Tensor kt = Tensor(const_cast<float*>(k), DType::kF32, {c.batch, c.seq_kv, ldk}).slice_cols(0, hidden);
  const Tensor vt = Tensor(const_cast<float*>(v), DType::kF32, {c.batch, c.seq_kv, ldv}).slice_cols(0, hidden);
  Tensor out = Tensor(out_buf.data(), DType::kF32, {c.batch, c.seq_q, ldo}).slice_cols(0, hidden);
  AttentionMask mask;
  mask.causal = c.causal;
  mask.kv_lengths = c.kv_lengths.empty() ? nullptr : c.kv_lengths.data();
  attention(qt, kt, vt, out, c.heads, scale, mask);

  std::vector<float> ours(reference.size());
  for (int64_t r = 0; r < c.batch * c.seq_q; ++r) {
    for (int64_t t = 0; t < hidden; ++t) ours[r * hidden + t] = out_buf[r * ldo + t];
    for (int64_t t = hidden; t < ldo; ++t) ASSERT_EQ(out_buf[r * ldo + t], kSentinel) << "padding written";
  }
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.seq_q; ++i) {
      if (visible_keys(c, b, i) != 0) continue;
      for (int64_t t = 0; t < hidden; ++t) {
        ASSERT_EQ(ours[(b * c.seq_q + i) * hidden + t], 0.0f) << "masked row b=" << b << " i=" << i;
      }
    }
  }
  expect_within_naive_error(ours, naive, reference, 1e-6, "attention");
}

TEST(AttentionTest, HeadsByHeadDimGridWithSeqQNotSeqKv) {
  uint32_t seed = 1;
  for (int64_t heads : {1, 3, 12}) {
    for (int64_t head_dim : {1, 8, 64}) {
      AttentionCase c;
      c.heads = heads;
      c.head_dim = head_dim;
      check_attention(c, seed += 3);
      c.seq_q = 9;
      c.seq_kv = 4;
      check_attention(c, seed += 3);
    }
  }
}

TEST(AttentionTest, CausalWithPositiveOffsetSeesThePast) {
  AttentionCase c;
  c.causal = true;
  c.seq_q = 3;
  c.seq_kv = 7;
  check_attention(c, 101);
  c.seq_q = 1;  // one decoder step
  check_attention(c, 102);
}

TEST(AttentionTest, CausalWithMoreQueriesThanKeysZerosEarlyRows) {
  AttentionCase c;
  c.causal = true;
  c.seq_q = 11;
  c.seq_kv = 4;
  check_attention(c, 111);
}

TEST(AttentionTest, KvLengthsIncludingZeroGiveZerosAndNeverReadPadding) {
  AttentionCase c;
  c.batch = 4;
  c.seq_q = 6;
  c.seq_kv = 9;
  c.kv_lengths = {0, 4, 9, 1};
  check_attention(c, 121);
}

TEST(AttentionTest, CausalCombinedWithKvLengths) {
  AttentionCase c;
  c.batch = 3;
  c.heads = 2;
  c.head_dim = 16;
  c.seq_q = 13;
  c.seq_kv = 13;
  c.causal = true;
  c.kv_lengths = {13, 5, 0};
  check_attention(c, 131);
}

TEST(AttentionTest, FusedQkvColumnSlicesAndStridedOutput) {
  AttentionCase c;
  c.batch = 2;
  c.heads = 12;
  c.head_dim = 64;
  c.seq_q = c.seq_kv = 50;  // CLIP ViT-B/32 vision tower
  c.fused_qkv = true;
  c.out_pad = 5;
  check_attention(c, 141);
}

TEST(AttentionTest, ClipTextCausalWithPadding) {
  AttentionCase c;
  c.batch = 2;
  c.heads = 8;
  c.head_dim = 64;
  c.seq_q = c.seq_kv = 77;
  c.causal = true;
  c.fused_qkv = true;
  c.kv_lengths = {77, 9};
  check_attention(c, 151);
}

TEST(AttentionTest, EmptyBatchIsANoOp) {
  AttentionCase c;
  c.batch = 0;
  check_attention(c, 161);
}

}  // namespace
}  // namespace mmserve::kernels
