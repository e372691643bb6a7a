// RoPE against HF's formulas written out in double: the default frequencies, linear and dynamic NTK scaling, the
// llama3 bands (low frequencies divided by the factor, high ones kept, the middle blended; checked on a Llama 3.1
// configuration: theta 500000, factor 8, bands 1 / 4, original context 8192), and the rotate_half rotation over
// several heads with a row stride and arbitrary positions; the dtype-generic entry (RopeArgs) against the f32 one.
#include "kernels/rope/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

double default_freq(int64_t i, int64_t dim, double base) { return 1.0 / std::pow(base, 2.0 * i / dim); }

TEST(Rope, InverseFrequenciesOfEachScaling) {
  const int64_t dim = 64;
  RopeScaling plain;
  const std::vector<float> d = rope_inv_freq(dim, 10000.0, plain, 2048);
  ASSERT_EQ(d.size(), 32u);
  for (int64_t i = 0; i < 32; ++i) EXPECT_NEAR(d[i], default_freq(i, dim, 10000.0), 1e-6 * d[i]) << i;
  RopeScaling linear{"linear", 4.0};
  const std::vector<float> l = rope_inv_freq(dim, 10000.0, linear, 2048);
  for (int64_t i = 0; i < 32; ++i) EXPECT_NEAR(l[i], default_freq(i, dim, 10000.0) / 4, 1e-6 * l[i]) << i;
  RopeScaling dynamic{"dynamic", 2.0};
  EXPECT_EQ(rope_inv_freq(dim, 10000.0, dynamic, 2048, 2048), d);  // within the trained length: unchanged
  const std::vector<float> dy = rope_inv_freq(dim, 10000.0, dynamic, 2048, 4096);
  const double base = 10000.0 * std::pow(2.0 * 4096 / 2048 - 1.0, 64.0 / 62.0);
  for (int64_t i = 0; i < 32; ++i) EXPECT_NEAR(dy[i], default_freq(i, dim, base), 1e-5 * dy[i]) << i;
  RopeScaling llama3{"llama3", 8.0, 1.0, 4.0, 8192};
  const std::vector<float> l3 = rope_inv_freq(128, 500000.0, llama3, 131072);
  for (int64_t i = 0; i < 64; ++i) {
    const double f = default_freq(i, 128, 500000.0), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192.0) {
      want = f / 8;
    } else if (wavelen >= 8192.0 / 4) {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8 + smooth * f;
    }
    EXPECT_NEAR(l3[i], want, 2e-6 * want) << i;
  }
  EXPECT_EQ(l3[0], rope_inv_freq(128, 500000.0, plain, 131072)[0]);  // the highest frequency is kept
}

TEST(Rope, RotatesHalvesOfEveryHead) {
  const int64_t rows = 5, heads = 3, head_dim = 10, ld = heads * head_dim + 4;
  std::vector<float> x = test_util::random_floats(static_cast<size_t>(rows * ld), 21, -2.0f, 2.0f);
  const std::vector<float> before = x;
  const std::vector<int32_t> positions = {0, 1, 7, 300, 4095};
  const std::vector<float> inv = rope_inv_freq(head_dim, 10000.0, {}, 4096);
  apply_rope(x.data(), rows, ld, heads, head_dim, positions.data(), inv.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        const double f = double{float(positions[r]) * inv[i]};
        const double x1 = before[r * ld + h * head_dim + i], x2 = before[r * ld + h * head_dim + i + 5];
        EXPECT_NEAR(x[r * ld + h * head_dim + i], x1 * std::cos(f) - x2 * std::sin(f), 2e-6) << r << h << i;
        EXPECT_NEAR(x[r * ld + h * head_dim + i + 5], x2 * std::cos(f) + x1 * std::sin(f), 2e-6) << r << h << i;
      }
    }
    for (int64_t c = heads * head_dim; c < ld; ++c) EXPECT_EQ(x[r * ld + c], before[r * ld + c]) << "padding";
  }
}

// The generic entry applies apply_rope's f32 arithmetic to the decoded values and rounds once to the dtype.
TEST(Rope, GenericDtypesMatchTheF32Rotation) {
  const int64_t rows = 4, heads = 5, head_dim = 12, ld = heads * head_dim + 3;
  const std::vector<int32_t> positions = {0, 9, 4095, 131071};
  const std::vector<float> inv = rope_inv_freq(head_dim, 500000.0, {}, 8192);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<float> x = test_util::random_floats(static_cast<size_t>(rows * ld), 31, -2.0f, 2.0f);
    std::vector<uint16_t> x16(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x16[i] = dtype == DType::kBF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
      if (dtype != DType::kF32) x[i] = dtype == DType::kBF16 ? bf16_to_f32(x16[i]) : f16_to_f32(x16[i]);
    }
    std::vector<float> generic32 = x;
    RopeArgs a;
    a.x = dtype == DType::kF32 ? static_cast<void*>(generic32.data()) : x16.data();
    a.dtype = dtype;
    a.rows = rows;
    a.ld = ld;
    a.heads = heads;
    a.head_dim = head_dim;
    a.positions = positions.data();
    a.inv_freq = inv.data();
    ASSERT_TRUE(apply_rope(a).ok());
    apply_rope(x.data(), rows, ld, heads, head_dim, positions.data(), inv.data());
    const double rel = dtype == DType::kF32 ? 1e-6 : dtype == DType::kF16 ? 1.0 / 2048 : 1.0 / 256;
    for (size_t i = 0; i < x.size(); ++i) {
      const float got = dtype == DType::kF32 ? generic32[i]
                        : dtype == DType::kBF16 ? bf16_to_f32(x16[i]) : f16_to_f32(x16[i]);
      EXPECT_NEAR(got, x[i], rel * std::fabs(x[i]) + 1e-7) << dtype_name(dtype) << " at " << i;
    }
  }
  RopeArgs bad;
  bad.rows = 1;
  bad.heads = 1;
  bad.head_dim = 7;  // odd
  bad.ld = 7;
  EXPECT_FALSE(apply_rope(bad).ok());
  bad.dtype = DType::kI8;
  EXPECT_EQ(apply_rope(bad).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace mmserve::kernels

namespace mmserve::kernels {
namespace {

// apply_rope_and_cache (the CPU twin of the fused CUDA launch) is apply_rope, then the KV write of the rotated k
// and of v: slot -1 writes nowhere, other slots keep their bytes; mismatched row counts are refused.
TEST(Rope, RopeAndCacheRotatesThenWritesTheCache) {
  const int64_t rows = 3, heads = 2, kv_heads = 1, head_dim = 4, ld = (heads + 2 * kv_heads) * head_dim;
  std::vector<float> x(rows * ld), expect(rows * ld);
  for (size_t i = 0; i < x.size(); ++i) x[i] = expect[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  const std::vector<int32_t> positions = {3, 0, 17}, slots = {4, -1, 0};
  const std::vector<float> inv = rope_inv_freq(head_dim, 10000.0, RopeScaling{}, 64);
  apply_rope(expect.data(), rows, ld, heads + kv_heads, head_dim, positions.data(), inv.data());
  std::vector<float> k_cache(6 * head_dim, 9.0f), v_cache(6 * head_dim, 9.0f);
  RopeArgs a;
  a.x = x.data(), a.dtype = DType::kF32, a.rows = rows, a.ld = ld, a.heads = heads + kv_heads, a.head_dim = head_dim;
  a.positions = positions.data(), a.inv_freq = inv.data();
  PagedKvWriteArgs w;
  w.k = x.data() + heads * head_dim, w.v = x.data() + (heads + kv_heads) * head_dim, w.src_ld = ld;
  w.k_cache = k_cache.data(), w.v_cache = v_cache.data(), w.dtype = DType::kF32, w.slot_mapping = slots.data();
  w.num_tokens = rows, w.width = kv_heads * head_dim, w.num_slots = 6;
  ASSERT_TRUE(apply_rope_and_cache(a, w).ok());
  EXPECT_EQ(x, expect);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < head_dim; ++c) {
      if (slots[r] < 0) continue;
      EXPECT_EQ(k_cache[slots[r] * head_dim + c], expect[r * ld + heads * head_dim + c]);
      EXPECT_EQ(v_cache[slots[r] * head_dim + c], expect[r * ld + (heads + kv_heads) * head_dim + c]);
    }
  }
  for (int64_t slot : {1, 2, 3, 5}) EXPECT_EQ(k_cache[slot * head_dim], 9.0f) << "slot " << slot;
  w.num_tokens = 2;
  EXPECT_EQ(apply_rope_and_cache(a, w).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::kernels
