// swiglu against silu(g) * u in double over odd widths, a fused [gate | up] layout, in place on gate, and large
// |gate| (sigmoid saturating to 0 and 1 without NaN); the dtype-generic entry (SwigluArgs) over dtypes.
#include "kernels/swiglu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(Swiglu, MatchesFormulaOnFusedLayout) {
  for (int64_t cols : {1, 5, 172, 1000}) {
    const int64_t rows = 6, ld = 2 * cols + 3;  // [gate | up | pad]
    std::vector<float> in = random_floats(static_cast<size_t>(rows * ld), 9, -8.0f, 8.0f);
    in[0] = 100.0f;
    in[1 % cols] = -100.0f;
    std::vector<float> y(static_cast<size_t>(rows * cols), 3.0f);
    swiglu(in.data(), in.data() + cols, ld, rows, cols, y.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double g = in[r * ld + c], u = in[r * ld + cols + c];
        const double want = g / (1.0 + std::exp(-g)) * u;
        EXPECT_NEAR(y[r * cols + c], want, 1e-6 * std::max(1.0, std::fabs(want))) << r << " " << c;
      }
    }
    std::vector<float> in_place = in;  // y over gate's columns
    swiglu(in_place.data(), in_place.data() + cols, ld, rows, cols, in_place.data(), ld);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(in_place[r * ld + c], y[r * cols + c]);
    }
  }
}

TEST(Swiglu, GenericDtypesOnFusedLayout) {
  const int64_t rows = 3, cols = 37, in_ld = 2 * cols + 1, y_ld = cols + 2;
  for (DType in : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType out : {DType::kF32, DType::kBF16}) {
      std::vector<float> x = random_floats(static_cast<size_t>(rows * in_ld), 41, -12.0f, 12.0f);
      std::vector<uint16_t> x16(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x16[i] = in == DType::kBF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
        if (in != DType::kF32) x[i] = in == DType::kBF16 ? bf16_to_f32(x16[i]) : f16_to_f32(x16[i]);
      }
      std::vector<float> y32(static_cast<size_t>(rows * y_ld), 42.0f);
      std::vector<uint16_t> y16(y32.size(), 7);
      const void* base = in == DType::kF32 ? static_cast<const void*>(x.data()) : x16.data();
      SwigluArgs a;
      a.gate = base;
      a.up = static_cast<const char*>(base) + cols * dtype_size(in);
      a.in_dtype = in;
      a.in_ld = in_ld;
      a.rows = rows;
      a.cols = cols;
      a.y = out == DType::kF32 ? static_cast<void*>(y32.data()) : y16.data();
      a.y_dtype = out;
      a.y_ld = y_ld;
      ASSERT_TRUE(swiglu(a).ok());
      const double rel = out == DType::kF32 ? 1e-6 : 1.0 / 256;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < y_ld; ++c) {
          const size_t i = static_cast<size_t>(r * y_ld + c);
          const double got = out == DType::kF32 ? double{y32[i]} : double{bf16_to_f32(y16[i])};
          if (c >= cols) {
            EXPECT_EQ(got, out == DType::kF32 ? 42.0 : double{bf16_to_f32(7)}) << "padding written";
            continue;
          }
          const double g = x[r * in_ld + c], u = x[r * in_ld + cols + c];
          const double want = g / (1.0 + std::exp(-g)) * u;
          EXPECT_NEAR(got, want, rel * std::fabs(want) + 1e-6) << r << " " << c;
        }
      }
    }
  }
  SwigluArgs bad;
  std::vector<float> buf(8);
  bad.gate = buf.data();
  bad.up = buf.data() + 2;
  bad.y = buf.data() + 2;  // aliases up
  bad.in_dtype = bad.y_dtype = DType::kF32;
  bad.rows = 1;
  bad.cols = 2;
  bad.in_ld = bad.y_ld = 4;
  EXPECT_FALSE(swiglu(bad).ok());
  bad.y_dtype = DType::kI32;
  EXPECT_EQ(swiglu(bad).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace mmserve::kernels
