// Tests of add(), add_row() and gather_rows() against plain loops (exact: one f32 add or a copy per
// element), including aliasing (y == a, y == x), strided rows, sizes on both sides of the parallel
// threshold, and the abort on an out-of-range gather index.
#include "kernels/elementwise/elementwise.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

TEST(ElementwiseTest, AddMatchesPlainLoop) {
  for (int64_t n : {1, 7, 100003}) {
    std::vector<float> a = random_floats(n, 1), b = random_floats(n, 2), y(n);
    const Tensor at(a.data(), DType::kF32, {n}), bt(b.data(), DType::kF32, {n});
    Tensor yt(y.data(), DType::kF32, {n});
    add(at, bt, yt);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] + b[i]);
  }
}

TEST(ElementwiseTest, AddInPlace) {
  std::vector<float> a = random_floats(size_t{17} * 33, 11), b = random_floats(size_t{17} * 33, 12);
  const std::vector<float> a0 = a;
  Tensor at(a.data(), DType::kF32, {17, 33});
  add(at, Tensor(b.data(), DType::kF32, {17, 33}), at);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], a0[i] + b[i]);
}

TEST(ElementwiseTest, AddRowBroadcastsOverStridedRows) {
  const int64_t rows = 50, cols = 768, ldx = 800, ldy = 770;
  std::vector<float> x = random_floats(rows * ldx, 21), row = random_floats(cols, 22), y(rows * ldy, 5.0f);
  const Tensor xt = Tensor(x.data(), DType::kF32, {rows, ldx}).slice_cols(0, cols);
  Tensor yt = Tensor(y.data(), DType::kF32, {rows, ldy}).slice_cols(0, cols);
  add_row(xt, Tensor(row.data(), DType::kF32, {cols}), yt);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(y[i * ldy + j], x[i * ldx + j] + row[j]);
    for (int64_t j = cols; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], 5.0f);
  }
}

TEST(ElementwiseTest, AddRowInPlace) {
  std::vector<float> x = random_floats(size_t{3} * 7, 31), row = random_floats(7, 32);
  const std::vector<float> x0 = x;
  Tensor xt(x.data(), DType::kF32, {3, 7});
  add_row(xt, Tensor(row.data(), DType::kF32, {7}), xt);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 7; ++j) ASSERT_EQ(x[i * 7 + j], x0[i * 7 + j] + row[j]);
  }
}

TEST(ElementwiseTest, GatherRowsPicksRows) {
  const int64_t rows = 77, cols = 9;
  std::vector<float> x = random_floats(rows * cols, 41), y(4 * cols);
  const std::vector<int64_t> idx = {0, 76, 5, 5};
  Tensor yt(y.data(), DType::kF32, {4, cols});
  gather_rows(Tensor(x.data(), DType::kF32, {rows, cols}), idx.data(), 4, yt);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(y[i * cols + j], x[idx[i] * cols + j]);
  }
}

TEST(ElementwiseTest, GatherRowsOutOfRangeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> x(size_t{3} * 2), y(2);
  const std::vector<int64_t> idx = {3};
  Tensor yt(y.data(), DType::kF32, {1, 2});
  EXPECT_DEATH(gather_rows(Tensor(x.data(), DType::kF32, {3, 2}), idx.data(), 1, yt), "index 3");
}

}  // namespace
}  // namespace mmserve::kernels
