// Tests of layer_norm() against a double-precision loop, under the flash-attention rule (naive f32 is the
// same two-pass formula in float, as torch computes it).
//
// Cases: odd widths and row counts (parallel and serial paths), strided input and output rows, in-place
// use, constant rows (variance 0: y must be exactly beta), and a large common offset (|mean| >> std),
// where a one-pass E[x^2] - E[x]^2 would lose every digit.
#include "kernels/layer_norm/layer_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::expect_within_naive_error;
using test_util::random_floats;

struct LayerNormCase {
  int64_t rows = 0, cols = 0;
  int64_t x_pad = 0, y_pad = 0;
  bool in_place = false;
  float offset = 0.0f;  // added to every input
  float spread = 1.0f;  // inputs in offset +- spread
};

void check_layer_norm(const LayerNormCase& c, uint32_t seed) {
  SCOPED_TRACE("rows=" + std::to_string(c.rows) + " cols=" + std::to_string(c.cols) + (c.in_place ? " in place" : ""));
  const float eps = 1e-5f;
  const int64_t ldx = c.cols + c.x_pad;
  const int64_t ldy = c.in_place ? ldx : c.cols + c.y_pad;
  std::vector<float> x_buf = random_floats(c.rows * ldx, seed, -c.spread, c.spread);
  for (float& v : x_buf) v += c.offset;
  const std::vector<float> x_in = x_buf;
  const std::vector<float> gamma = random_floats(c.cols, seed + 1, 0.5f, 1.5f);
  const std::vector<float> beta = random_floats(c.cols, seed + 2);

  std::vector<double> reference(c.rows * c.cols);
  std::vector<float> naive(reference.size()), ours(reference.size());
  for (int64_t i = 0; i < c.rows; ++i) {
    const float* row = x_in.data() + i * ldx;
    double mean = 0.0, var = 0.0;
    float mean_f = 0.0f, var_f = 0.0f;
    for (int64_t j = 0; j < c.cols; ++j) {
      mean += row[j];
      mean_f += row[j];
    }
    mean /= c.cols;
    mean_f /= static_cast<float>(c.cols);
    for (int64_t j = 0; j < c.cols; ++j) {
      var += (row[j] - mean) * (row[j] - mean);
      var_f += (row[j] - mean_f) * (row[j] - mean_f);
    }
    var /= c.cols;
    var_f /= static_cast<float>(c.cols);
    const double rstd = 1.0 / std::sqrt(var + eps);
    const float rstd_f = 1.0f / std::sqrt(var_f + eps);
    for (int64_t j = 0; j < c.cols; ++j) {
      reference[i * c.cols + j] = (row[j] - mean) * rstd * gamma[j] + beta[j];
      naive[i * c.cols + j] = (row[j] - mean_f) * rstd_f * gamma[j] + beta[j];
    }
  }

  std::vector<float> y_buf(c.rows * ldy, 777.0f);
  const Tensor x = Tensor(x_buf.data(), DType::kF32, {c.rows, ldx}).slice_cols(0, c.cols);
  Tensor y = c.in_place ? x : Tensor(y_buf.data(), DType::kF32, {c.rows, ldy}).slice_cols(0, c.cols);
  const Tensor g(const_cast<float*>(gamma.data()), DType::kF32, {c.cols});
  const Tensor b(const_cast<float*>(beta.data()), DType::kF32, {c.cols});
  layer_norm(x, g, b, eps, y);
  const std::vector<float>& out = c.in_place ? x_buf : y_buf;
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.cols; ++j) ours[i * c.cols + j] = out[i * ldy + j];
    for (int64_t j = c.cols; j < ldy; ++j) {
      const float expected = c.in_place ? x_in[i * ldx + j] : 777.0f;
      ASSERT_EQ(out[i * ldy + j], expected) << "padding written";
    }
  }
  expect_within_naive_error(ours, naive, reference, 2e-6, "layer_norm");
}

TEST(LayerNormTest, OddShapesMatchDoubleReference) {
  uint32_t seed = 1;
  for (int64_t rows : {1, 3, 17, 50}) {
    for (int64_t cols : {1, 7, 33, 768}) check_layer_norm({rows, cols}, seed += 3);
  }
  check_layer_norm({800, 768}, 99);  // CLIP vision, batch 16: the parallel path
}

TEST(LayerNormTest, StridedRows) {
  check_layer_norm({17, 33, /*x_pad=*/5, /*y_pad=*/3}, 201);
}

TEST(LayerNormTest, InPlaceAliasing) {
  check_layer_norm({50, 768, 0, 0, /*in_place=*/true}, 211);
  check_layer_norm({3, 33, 4, 0, true}, 212);
}

TEST(LayerNormTest, LargeOffsetKeepsPrecision) {
  check_layer_norm({17, 512, 0, 0, false, /*offset=*/1000.0f, /*spread=*/0.01f}, 221);
}

TEST(LayerNormTest, ConstantRowGivesBetaExactly) {
  const int64_t cols = 33;
  std::vector<float> x(2 * cols, 3.25f);
  const std::vector<float> gamma = random_floats(cols, 231), beta = random_floats(cols, 232);
  Tensor t(x.data(), DType::kF32, {2, cols});
  layer_norm(t, Tensor(const_cast<float*>(gamma.data()), DType::kF32, {cols}),
             Tensor(const_cast<float*>(beta.data()), DType::kF32, {cols}), 1e-5f, t);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(x[i * cols + j], beta[j]);
  }
}

}  // namespace
}  // namespace mmserve::kernels
