// Tests of rms_norm_cuda() against its CPU twin rms_norm(const RmsNormArgs&) on the same inputs, for every
// (x dtype, y dtype) pair, over odd shapes (both register paths and the fallback), Qwen3's per-head segments inside
// a fused QKV row, padded and odd strides, misaligned pointers, in place, and broken arguments. Skipped, with the
// reason, where no GPU is visible.
//
// Tolerance per element: |gpu - cpu| <= rel * |cpu| + 1e-6 * max|cpu|. Both compute the same f32 formula; they
// differ only in the order of the f32 sum of squares (tree vs sequential: ~sqrt(cols) ulp of the sum, halved
// by the square root) and in rsqrtf (<= 2 ulp) against 1 / sqrtf, so a few ulp of f32: rel = 1e-5 for f32 y.
// A 16-bit y rounds that f32 value once; the few-ulp difference can push it across a rounding boundary, one
// 16-bit ulp: rel = 2^-7 (bf16) and 2^-10 (f16), the ulp relative to the smallest value of its binade.
#include "kernels/rms_norm/rms_norm_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rms_norm/rms_norm.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceArray;
using cuda_test::kSentinel;
using cuda_test::round_through;
using test_util::random_floats;

struct Case {
  int64_t rows = 1, cols = 1, segments = 1;
  DType x_dtype = DType::kF32, y_dtype = DType::kBF16;
  int64_t x_pad = 0, y_pad = 0;
  bool in_place = false, misaligned = false;
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.x_dtype)) + "->" + dtype_name(c.y_dtype) + " rows=" + std::to_string(c.rows) +
         " cols=" + std::to_string(c.cols) + " segments=" + std::to_string(c.segments) +
         " x_pad=" + std::to_string(c.x_pad) + " y_pad=" + std::to_string(c.y_pad) + (c.in_place ? " in-place" : "") +
         (c.misaligned ? " misaligned" : "");
}

double rel_tolerance(DType d) {
  return d == DType::kF32 ? 1e-5 : d == DType::kF16 ? 1.0 / 1024 : 1.0 / 128;
}

void check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const int64_t width = c.segments * c.cols, x_ld = width + c.x_pad, y_ld = c.in_place ? x_ld : width + c.y_pad;
  const int64_t shift = c.misaligned ? 1 : 0;
  const std::vector<float> x = round_through(random_floats(c.rows * x_ld, seed, -3.0f, 3.0f), c.x_dtype);
  const std::vector<float> w = round_through(random_floats(c.cols, seed + 1, 0.5f, 1.5f), c.y_dtype);

  // The twin, on host copies in the same dtypes.
  const std::vector<uint8_t> hx = cuda_test::encode(x, c.x_dtype), hw = cuda_test::encode(w, c.y_dtype);
  std::vector<uint8_t> hy = cuda_test::encode(std::vector<float>(c.rows * y_ld, kSentinel), c.y_dtype);
  if (c.in_place) hy = hx;
  RmsNormArgs a;
  a.x = c.in_place ? static_cast<const void*>(hy.data()) : hx.data();
  a.x_dtype = c.x_dtype;
  a.x_ld = x_ld;
  a.weight = hw.data();
  a.y = hy.data();
  a.y_dtype = c.y_dtype;
  a.y_ld = y_ld;
  a.rows = c.rows;
  a.cols = c.cols;
  a.segments = c.segments;
  a.eps = 1e-6f;
  ASSERT_TRUE(rms_norm(a).ok());
  const std::vector<float> want = cuda_test::decode(hy, c.y_dtype);

  const DeviceArray dx(x, c.x_dtype, shift), dw(w, c.y_dtype, shift);
  const DeviceArray dy(std::vector<float>(c.in_place ? 0 : c.rows * y_ld, kSentinel), c.y_dtype, shift);
  ASSERT_TRUE(dx.allocated() && dw.allocated() && (c.in_place || dy.allocated()));
  a.x = dx.data();
  a.weight = dw.data();
  a.y = c.in_place ? dx.data() : dy.data();
  const Status status = rms_norm_cuda(a, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = c.in_place ? dx.download() : dy.download();
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const double tol = rel_tolerance(c.y_dtype) * std::fabs(want[i]) + 1e-6 * scale;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {
      ++bad;
      ADD_FAILURE() << "at " << i / y_ld << "," << i % y_ld << ": gpu " << got[i] << " cpu " << want[i];
    }
  }
}

TEST(RmsNormCudaTest, OddShapesEveryDtypePair) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType xd : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType yd : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t rows : {1, 3, 33}) {
        for (int64_t cols : {1, 7, 128, 1000, 1024, 4096, 5000, 14336, 16384, 20000}) {
          check({rows, cols, 1, xd, yd}, seed += 3);
        }
      }
    }
  }
}

TEST(RmsNormCudaTest, Qwen3HeadSegmentsInAFusedQkvRow) {
  MMSERVE_REQUIRE_GPU();
  // Qwen3-8B: 32 q heads + 8 k heads + 8 v heads of 128 in one bf16 row; q norm over 32 segments, k over 8.
  const int64_t head_dim = 128, row = (32 + 8 + 8) * head_dim;
  uint32_t seed = 100;
  for (int64_t heads : {32, 8}) {
    Case c{17, head_dim, heads, DType::kBF16, DType::kBF16, row - heads * head_dim, row - heads * head_dim};
    check(c, seed += 3);
    c.in_place = true;
    check(c, seed += 3);
  }
  check({5, 64, 3, DType::kF32, DType::kF16, 5, 1}, seed += 3);  // odd stride: fallback
  check({5, 7, 3, DType::kF16, DType::kF16}, seed += 3);
}

TEST(RmsNormCudaTest, StridesMisalignmentAndInPlace) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    check({9, 4096, 1, DType::kF32, d, 4, 8}, seed += 3);
    check({9, 4096, 1, DType::kF32, d, 1, 0}, seed += 3);
    Case m{9, 4096, 1, d, d};
    m.misaligned = true;
    check(m, seed += 3);
    Case ip{9, 4096, 1, d, d, 4};
    ip.in_place = true;
    check(ip, seed += 3);
    ip.cols = 777;
    check(ip, seed += 3);
  }
}

TEST(RmsNormCudaTest, ZeroRowsIsANoOpAndBrokenArgumentsAreRejected) {
  MMSERVE_REQUIRE_GPU();
  RmsNormArgs none;
  none.cols = 64;
  none.x_ld = none.y_ld = 64;
  EXPECT_TRUE(rms_norm_cuda(none, nullptr).ok());
  const DeviceArray dx(random_floats(64, 1), DType::kF32, 0), dw(random_floats(64, 2), DType::kBF16, 0);
  const DeviceArray dy(std::vector<float>(64, kSentinel), DType::kBF16, 0);
  RmsNormArgs good;
  good.x = dx.data();
  good.x_ld = 64;
  good.weight = dw.data();
  good.y = dy.data();
  good.y_ld = 64;
  good.rows = 1;
  good.cols = 64;
  RmsNormArgs a = good;
  a.x = static_cast<const char*>(a.x) + 2;  // not float-aligned
  EXPECT_FALSE(rms_norm_cuda(a, nullptr).ok());
  a = good;
  a.y = const_cast<void*>(a.x);  // alias across dtypes
  EXPECT_FALSE(rms_norm_cuda(a, nullptr).ok());
  a = good;
  a.y_dtype = DType::kI8;
  EXPECT_EQ(rms_norm_cuda(a, nullptr).code(), StatusCode::kUnimplemented);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  for (float v : dy.download()) ASSERT_EQ(v, kSentinel) << "a rejected call wrote y";
}

}  // namespace
}  // namespace mmserve::kernels
