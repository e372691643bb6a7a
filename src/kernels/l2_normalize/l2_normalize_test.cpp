// Tests of l2_normalize_rows() against a double-precision loop, under the flash-attention rule.
//
// Cases: odd widths, a zero row (must stay exactly zero, never NaN), and rows of 1e-30 and 1e30 whose
// squares under- or overflow in f32 (the double accumulation must still give unit rows).
#include "kernels/l2_normalize/l2_normalize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::expect_within_naive_error;
using test_util::random_floats;

void check_l2(std::vector<float> x, int64_t cols, const std::string& what) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  std::vector<double> reference(x.size());
  std::vector<float> naive(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double squares = 0.0;
    float squares_f = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      squares += static_cast<double>(x[i * cols + j]) * x[i * cols + j];
      squares_f += x[i * cols + j] * x[i * cols + j];
    }
    for (int64_t j = 0; j < cols; ++j) {
      reference[i * cols + j] = squares == 0.0 ? 0.0 : x[i * cols + j] / std::sqrt(squares);
      naive[i * cols + j] = squares_f == 0.0f ? 0.0f : x[i * cols + j] / std::sqrt(squares_f);
    }
  }
  Tensor t(x.data(), DType::kF32, {rows, cols});
  l2_normalize_rows(t);
  expect_within_naive_error(x, naive, reference, 1e-7, what);
}

TEST(L2NormalizeTest, OddWidthsMatchDoubleReference) {
  uint32_t seed = 1;
  for (int64_t cols : {1, 7, 33, 512}) {
    for (int64_t rows : {1, 3, 64}) check_l2(random_floats(rows * cols, seed++), cols, std::to_string(cols));
  }
}

TEST(L2NormalizeTest, ZeroRowStaysZero) {
  std::vector<float> x = random_floats(size_t{3} * 7, 11);
  for (int j = 0; j < 7; ++j) x[7 + j] = 0.0f;
  Tensor t(x.data(), DType::kF32, {3, 7});
  l2_normalize_rows(t);
  for (int j = 0; j < 7; ++j) EXPECT_EQ(x[7 + j], 0.0f);
  double norm0 = 0.0;
  for (int j = 0; j < 7; ++j) norm0 += static_cast<double>(x[j]) * x[j];
  EXPECT_NEAR(norm0, 1.0, 1e-6);
}

TEST(L2NormalizeTest, TinyAndHugeRowsStillUnitLength) {
  std::vector<float> x = random_floats(size_t{2} * 33, 21);
  for (int j = 0; j < 33; ++j) {
    x[j] *= 1e-30f;      // squares underflow in f32
    x[33 + j] *= 1e30f;  // squares overflow in f32
  }
  std::vector<float> expected_direction = random_floats(size_t{2} * 33, 21);
  Tensor t(x.data(), DType::kF32, {2, 33});
  l2_normalize_rows(t);
  for (int i = 0; i < 2; ++i) {
    double norm = 0.0, expected_norm = 0.0;
    for (int j = 0; j < 33; ++j)
      expected_norm += static_cast<double>(expected_direction[i * 33 + j]) * expected_direction[i * 33 + j];
    for (int j = 0; j < 33; ++j) norm += static_cast<double>(x[i * 33 + j]) * x[i * 33 + j];
    EXPECT_NEAR(norm, 1.0, 1e-6) << "row " << i;
    for (int j = 0; j < 33; ++j) {
      EXPECT_NEAR(x[i * 33 + j], expected_direction[i * 33 + j] / std::sqrt(expected_norm), 1e-6);
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
