// Tests of the KV-cache CPU twins (kv_cache.h) against naive loops written here: append at per-batch
// positions (rows past the capacity dropped, strided sources), gather out of place and in place (with
// duplicated and permuted indices, bad indices rejected), FP8 E4M3 conversion on hand-checked values
// (rounding ties to even, subnormals, saturation, NaN, signed zero) and its round trip over every code, and
// quantize_kv for FP8 and INT8 (scale = absmax / 448 or / 127, stored values against a plain loop,
// all-zero blocks, the argument checks).
#include "kernels/kv_cache/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(KvCacheCpu, AppendWritesAtPositions) {
  const int64_t batch = 3, n = 2, capacity = 5, width = 6, src_ld = 9;
  const std::vector<float> k = random_floats(static_cast<size_t>(batch * n * src_ld), 1);
  const std::vector<float> v = random_floats(static_cast<size_t>(batch * n * src_ld), 2);
  std::vector<float> kc(static_cast<size_t>(batch * capacity * width), -7.0f), vc = kc;
  const std::vector<int32_t> positions = {0, 4, 2};  // batch 1: its second row (position 5) is dropped
  KvCacheAppendArgs a;
  a.k = k.data();
  a.v = v.data();
  a.src_ld = src_ld;
  a.k_cache = kc.data();
  a.v_cache = vc.data();
  a.dtype = DType::kF32;
  a.batch = batch;
  a.n = n;
  a.capacity = capacity;
  a.width = width;
  a.positions = positions.data();
  ASSERT_TRUE(kv_cache_append_cpu(a).ok());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < capacity; ++r) {
      const int64_t i = r - positions[b];
      for (int64_t c = 0; c < width; ++c) {
        const bool written = i >= 0 && i < n;
        const float ek = written ? k[(b * n + i) * src_ld + c] : -7.0f;
        const float ev = written ? v[(b * n + i) * src_ld + c] : -7.0f;
        EXPECT_EQ(kc[(b * capacity + r) * width + c], ek) << b << " " << r << " " << c;
        EXPECT_EQ(vc[(b * capacity + r) * width + c], ev) << b << " " << r << " " << c;
      }
    }
  }
  KvCacheAppendArgs bad = a;
  bad.src_ld = width - 1;
  EXPECT_EQ(kv_cache_append_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.v_cache = nullptr;
  EXPECT_EQ(kv_cache_append_cpu(bad).code(), StatusCode::kInvalidArgument);
}

TEST(KvCacheCpu, GatherOutOfPlaceAndInPlace) {
  const int64_t batch = 4, capacity = 6, rows = 4, width = 5;
  const std::vector<float> src = random_floats(static_cast<size_t>(batch * capacity * width), 3);
  const std::vector<int32_t> index = {2, 2, 0, 3};
  KvCacheGatherArgs a;
  a.element_bytes = 4;
  a.batch = batch;
  a.batch_src = batch;
  a.capacity = capacity;
  a.rows = rows;
  a.width = width;
  a.src_index = index.data();
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    std::vector<float> dst(src.size(), -1.0f);
    std::vector<uint8_t> scratch;
    if (in_place) dst = src;
    a.src = in_place ? dst.data() : src.data();
    a.dst = dst.data();
    if (in_place) {
      scratch.resize(kv_cache_gather_scratch_bytes(a));
      a.scratch = scratch.data();
      a.scratch_bytes = scratch.size();
    }
    ASSERT_TRUE(kv_cache_gather_cpu(a).ok());
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t r = 0; r < capacity; ++r) {
        for (int64_t c = 0; c < width; ++c) {
          const float before = in_place ? src[(i * capacity + r) * width + c] : -1.0f;
          const float expected = r < rows ? src[(index[i] * capacity + r) * width + c] : before;
          ASSERT_EQ(dst[(i * capacity + r) * width + c], expected) << i << " " << r << " " << c;
        }
      }
    }
    if (in_place) {
      KvCacheGatherArgs bad = a;
      bad.scratch_bytes = 3;
      EXPECT_EQ(kv_cache_gather_cpu(bad).code(), StatusCode::kInvalidArgument);
    }
  }
  std::vector<float> dst(src.size());
  const std::vector<int32_t> bad_index = {0, 1, 4, 0};
  a.src = src.data();
  a.dst = dst.data();
  a.src_index = bad_index.data();
  EXPECT_EQ(kv_cache_gather_cpu(a).code(), StatusCode::kInvalidArgument);
}

TEST(Fp8E4M3, HandCheckedValues) {
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0f), 0x38);  // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(f32_to_fp8_e4m3(-2.0f), 0xC0);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // halfway 1.0 / 1.125: to even (1.0)
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3A);  // halfway 1.125 / 1.25: to even (1.25)
  EXPECT_EQ(f32_to_fp8_e4m3(1.07f), 0x39);    // past the midpoint 1.0625: up to 1.125
  EXPECT_EQ(f32_to_fp8_e4m3(1.2f), 0x3A);
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7E);  // the largest finite
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7E);  // halfway to 480 (not representable): to even
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7E);    // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-6f), 0x08);         // the smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-9f), 0x01);         // the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-10f), 0x00);        // halfway 0 / 2^-9: to even (0)
  EXPECT_EQ(f32_to_fp8_e4m3(0x1.8p-9f), 0x02);       // halfway 1 / 2 quanta: to even (2)
  EXPECT_EQ(f32_to_fp8_e4m3(7.5f * 0x1p-9f), 0x08);  // halfway 7 / 8 quanta: to 8 = the smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(15.5f), 0x58);           // 2^3 * 1.9375, halfway: up into 16 = 2^4 * 1.0
  EXPECT_FLOAT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_FLOAT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_FLOAT_EQ(fp8_e4m3_to_f32(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST(KvCacheCpu, QuantizeFp8AndInt8) {
  const int64_t batch = 2, rows = 37, heads = 3, head_dim = 8, src_ld = heads * head_dim + 2;
  const int64_t dst_ld = heads * head_dim + 1, dst_stride = rows + 3;
  std::vector<float> src = random_floats(static_cast<size_t>(batch * rows * src_ld), 5, -3.0f, 3.0f);
  for (int64_t r = 0; r < rows; ++r) {  // batch 1, head 2: all zeros
    for (int64_t d = 0; d < head_dim; ++d) src[((1 * rows) + r) * src_ld + 2 * head_dim + d] = 0.0f;
  }
  for (KvStorage storage : {KvStorage::kFp8E4M3, KvStorage::kInt8}) {
    const bool fp8 = storage == KvStorage::kFp8E4M3;
    SCOPED_TRACE(fp8 ? "fp8" : "int8");
    std::vector<uint8_t> dst(static_cast<size_t>(batch * dst_stride * dst_ld), 0xCD);
    std::vector<float> scale(static_cast<size_t>(batch * heads), -1.0f);
    QuantizeKvArgs a;
    a.src = src.data();
    a.src_ld = src_ld;
    a.dtype = DType::kF32;
    a.dst = dst.data();
    a.dst_ld = dst_ld;
    a.dst_batch_stride = dst_stride;
    a.storage = storage;
    a.scale = scale.data();
    a.batch = batch;
    a.rows = rows;
    a.heads = heads;
    a.head_dim = head_dim;
    ASSERT_TRUE(quantize_kv_cpu(a).ok());
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        float absmax = 0.0f;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < head_dim; ++d)
            absmax = std::max(absmax, std::fabs(src[(b * rows + r) * src_ld + h * head_dim + d]));
        }
        const float s = scale[b * heads + h];
        EXPECT_EQ(s, absmax / (fp8 ? 448.0f : 127.0f));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < head_dim; ++d) {
            const float x = src[(b * rows + r) * src_ld + h * head_dim + d];
            const uint8_t got = dst[(b * dst_stride + r) * dst_ld + h * head_dim + d];
            if (absmax == 0.0f) {
              ASSERT_EQ(got, 0);
              continue;
            }
            const double back =
                fp8 ? fp8_e4m3_to_f32(got) * static_cast<double>(s) : static_cast<int8_t>(got) * static_cast<double>(s);
            if (fp8) {  // within half an E4M3 quantum (relative 2^-4) or half the subnormal step
              EXPECT_LE(std::fabs(back - x), std::max(std::fabs(x) / 16.0, 0x1p-10 * s) * 1.0001);
            } else {
              EXPECT_EQ(static_cast<int8_t>(got), static_cast<int>(std::nearbyint(x / s)));
              EXPECT_LE(std::fabs(back - x), 0.5001 * s);
            }
          }
        }
        for (int64_t r = rows; r < dst_stride; ++r) {  // rows past `rows` untouched
          ASSERT_EQ(dst[(b * dst_stride + r) * dst_ld], 0xCD);
        }
      }
    }
  }
  QuantizeKvArgs bad;
  bad.src = src.data();
  bad.storage = KvStorage::kSame;
  bad.batch = 1;
  bad.heads = 1;
  EXPECT_EQ(quantize_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mmserve::kernels
