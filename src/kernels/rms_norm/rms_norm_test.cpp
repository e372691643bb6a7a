// rms_norm against the definition in double, over odd widths, strided rows, in place, and rows of zeros (eps
// keeps them finite: zeros out); the dtype-generic entry (RmsNormArgs) over dtypes, segments and strides.
#include "kernels/rms_norm/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(RmsNorm, MatchesDoubleDefinition) {
  for (int64_t cols : {1, 7, 64, 172, 1001}) {
    for (int64_t pad : {0, 5}) {
      const int64_t rows = 9, ld = cols + pad;
      std::vector<float> x = random_floats(static_cast<size_t>(rows * ld), 3, -3.0f, 3.0f);
      for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(4 * ld + c)] = 0.0f;  // a zero row
      const std::vector<float> w = random_floats(static_cast<size_t>(cols), 4, 0.5f, 1.5f);
      std::vector<float> y(static_cast<size_t>(rows * ld), 42.0f);
      rms_norm(x.data(), ld, w.data(), rows, cols, 1e-5f, y.data(), ld);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t c = 0; c < cols; ++c) ss += double{x[r * ld + c]} * x[r * ld + c];
        const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
        for (int64_t c = 0; c < cols; ++c) {
          const double want = w[c] * (x[r * ld + c] * inv);
          EXPECT_NEAR(y[r * ld + c], want, 2e-6 * std::max(1.0, std::fabs(want))) << r << " " << c;
        }
        for (int64_t c = cols; c < ld; ++c) EXPECT_EQ(y[r * ld + c], 42.0f) << "padding written";
      }
      std::vector<float> in_place = x;  // y aliasing x
      rms_norm(in_place.data(), ld, w.data(), rows, cols, 1e-5f, in_place.data(), ld);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(in_place[r * ld + c], y[r * ld + c]);
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

// The dtype-generic twin (RmsNormArgs) against the double definition: x rounded to x_dtype, weight to y_dtype,
// the result rounded once to y_dtype (so the error is the f32 one plus half an ulp of y_dtype).
TEST(RmsNorm, GenericDtypesSegmentsAndStrides) {
  for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType y_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t segments : {1, 3}) {
        const int64_t rows = 5, cols = 36, x_ld = segments * cols + 7, y_ld = segments * cols + 2;
        const std::vector<float> xf = random_floats(static_cast<size_t>(rows * x_ld), 11, -2.0f, 2.0f);
        const std::vector<float> wf = random_floats(static_cast<size_t>(cols), 12, 0.5f, 1.5f);
        std::vector<uint16_t> x16(xf.size()), w16(wf.size()), y16(static_cast<size_t>(rows * y_ld), 7);
        std::vector<float> y32(static_cast<size_t>(rows * y_ld), 42.0f);
        auto to16 = [](DType d, float v) { return d == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v); };
        auto from16 = [](DType d, uint16_t h) { return d == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h); };
        for (size_t i = 0; i < xf.size(); ++i) x16[i] = to16(x_dtype, xf[i]);
        for (size_t i = 0; i < wf.size(); ++i) w16[i] = to16(y_dtype, wf[i]);
        RmsNormArgs a;
        a.x = x_dtype == DType::kF32 ? static_cast<const void*>(xf.data()) : x16.data();
        a.x_dtype = x_dtype;
        a.x_ld = x_ld;
        a.weight = y_dtype == DType::kF32 ? static_cast<const void*>(wf.data()) : w16.data();
        a.y = y_dtype == DType::kF32 ? static_cast<void*>(y32.data()) : y16.data();
        a.y_dtype = y_dtype;
        a.y_ld = y_ld;
        a.rows = rows;
        a.cols = cols;
        a.segments = segments;
        a.eps = 1e-6f;
        ASSERT_TRUE(rms_norm(a).ok());
        const double half_ulp = y_dtype == DType::kF32 ? 1e-6 : y_dtype == DType::kF16 ? 1.0 / 2048 : 1.0 / 256;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t s = 0; s < segments; ++s) {
            auto xv = [&](int64_t c) {
              const size_t i = static_cast<size_t>(r * x_ld + s * cols + c);
              return x_dtype == DType::kF32 ? double{xf[i]} : double{from16(x_dtype, x16[i])};
            };
            double ss = 0;
            for (int64_t c = 0; c < cols; ++c) ss += xv(c) * xv(c);
            const double inv = 1.0 / std::sqrt(ss / cols + 1e-6);
            for (int64_t c = 0; c < cols; ++c) {
              const double w = y_dtype == DType::kF32 ? double{wf[c]} : double{from16(y_dtype, w16[c])};
              const double want = w * xv(c) * inv;
              const size_t i = static_cast<size_t>(r * y_ld + s * cols + c);
              const double got = y_dtype == DType::kF32 ? double{y32[i]} : double{from16(y_dtype, y16[i])};
              EXPECT_NEAR(got, want, half_ulp * std::fabs(want) + 1e-6) << r << " " << s << " " << c;
            }
          }
          for (int64_t c = segments * cols; c < y_ld; ++c) {
            const size_t i = static_cast<size_t>(r * y_ld + c);
            if (y_dtype == DType::kF32) EXPECT_EQ(y32[i], 42.0f) << "padding written";
            else EXPECT_EQ(y16[i], 7) << "padding written";
          }
        }
      }
    }
  }
}

TEST(RmsNorm, GenericRejectsBrokenArguments) {
  std::vector<float> x(64, 1.0f), w(16, 1.0f), y(64);
  RmsNormArgs good;
  good.x = x.data();
  good.x_dtype = DType::kF32;
  good.x_ld = 16;
  good.weight = w.data();
  good.y = y.data();
  good.y_dtype = DType::kF32;
  good.y_ld = 16;
  good.rows = 4;
  good.cols = 16;
  ASSERT_TRUE(rms_norm(good).ok());
  RmsNormArgs a = good;
  a.segments = 2;  // 2 * 16 > x_ld
  EXPECT_FALSE(rms_norm(a).ok());
  a = good;
  a.y_dtype = DType::kI32;
  EXPECT_EQ(rms_norm(a).code(), StatusCode::kUnimplemented);
  a = good;
  a.y = x.data();
  a.y_dtype = DType::kBF16;  // alias with another dtype
  EXPECT_FALSE(rms_norm(a).ok());
  a = good;
  a.weight = nullptr;
  EXPECT_FALSE(rms_norm(a).ok());
  a = good;
  a.eps = -1.0f;
  EXPECT_FALSE(rms_norm(a).ok());
}

}  // namespace
}  // namespace mmserve::kernels
