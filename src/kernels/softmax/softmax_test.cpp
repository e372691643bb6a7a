// Tests of softmax_rows()/softmax_row() against a double-precision loop, under the flash-attention rule.
//
// Cases: widths 1..1000 (vector tails, parallel rows), -inf entries (exactly zero probability), fully
// masked rows (zeros, not NaN), logits far beyond exp's range (the max subtraction), and the raw-row entry
// point on a sub-range.
#include "kernels/softmax/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::expect_within_naive_error;
using test_util::random_floats;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Double reference and naive f32 of a row-wise softmax (an all -inf row gives zeros).
void softmax_references(const std::vector<float>& x, int64_t cols, std::vector<double>& reference,
                        std::vector<float>& naive) {
  reference.assign(x.size(), 0.0);
  naive.assign(x.size(), 0.0f);
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const float* row = x.data() + r * cols;
    const float max_value = *std::max_element(row, row + cols);
    if (max_value == kNegInf) continue;
    double sum = 0.0;
    float sum_f = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      sum += std::exp(static_cast<double>(row[j]) - max_value);
      sum_f += std::exp(row[j] - max_value);
    }
    for (int64_t j = 0; j < cols; ++j) {
      reference[r * cols + j] = std::exp(static_cast<double>(row[j]) - max_value) / sum;
      naive[r * cols + j] = std::exp(row[j] - max_value) / sum_f;
    }
  }
}

void check_softmax(std::vector<float> x, int64_t cols, const std::string& what) {
  std::vector<double> reference;
  std::vector<float> naive;
  softmax_references(x, cols, reference, naive);
  Tensor t(x.data(), DType::kF32, {static_cast<int64_t>(x.size()) / cols, cols});
  softmax_rows(t);
  expect_within_naive_error(x, naive, reference, 1e-7, what);
  for (size_t i = 0; i < x.size(); ++i) {
    if (reference[i] == 0.0) {
      EXPECT_EQ(x[i], 0.0f) << what << " at " << i;
    }
  }
}

TEST(SoftmaxTest, WidthsMatchDoubleReference) {
  uint32_t seed = 1;
  for (int64_t cols : {1, 5, 50, 77, 1000}) {
    for (int64_t rows : {1, 3, 600}) {
      check_softmax(random_floats(rows * cols, seed++, -8.0f, 8.0f), cols, "cols=" + std::to_string(cols));
    }
  }
}

TEST(SoftmaxTest, NegativeInfinityEntriesGetExactlyZero) {
  std::vector<float> x = random_floats(size_t{3} * 17, 11, -4.0f, 4.0f);
  for (size_t i = 0; i < x.size(); i += 3) x[i] = kNegInf;
  check_softmax(x, 17, "-inf entries");
}

TEST(SoftmaxTest, FullyMaskedRowBecomesZeros) {
  std::vector<float> x = random_floats(size_t{3} * 9, 21);
  for (int64_t j = 0; j < 9; ++j) x[9 + j] = kNegInf;
  Tensor t(x.data(), DType::kF32, {3, 9});
  softmax_rows(t);
  for (int64_t j = 0; j < 9; ++j) EXPECT_EQ(x[9 + j], 0.0f);
  float sum0 = 0.0f;
  for (int64_t j = 0; j < 9; ++j) sum0 += x[j];
  EXPECT_NEAR(sum0, 1.0f, 1e-6f);
}

TEST(SoftmaxTest, HugeLogitsDoNotOverflow) {
  std::vector<float> x = random_floats(size_t{4} * 33, 31, -50.0f, 50.0f);
  for (float& v : x) v += 1e4f;  // exp(1e4) would be inf without the max subtraction
  check_softmax(x, 33, "huge logits");
}

TEST(SoftmaxTest, RawRowOnAPrefixLeavesTheRestAlone) {
  std::vector<float> row = random_floats(20, 41, -3.0f, 3.0f);
  const std::vector<float> before = row;
  softmax_row(row.data(), 13);
  std::vector<float> prefix(before.begin(), before.begin() + 13);
  std::vector<double> reference;
  std::vector<float> naive;
  softmax_references(prefix, 13, reference, naive);
  std::vector<float> ours(row.begin(), row.begin() + 13);
  expect_within_naive_error(ours, naive, reference, 1e-7, "softmax_row");
  for (int j = 13; j < 20; ++j) EXPECT_EQ(row[j], before[j]);
  softmax_row(row.data(), 0);  // no-op
}

}  // namespace
}  // namespace mmserve::kernels

// log_sum_exp against a double-precision reference over vocabulary-sized rows with -inf holes, and its edges.
TEST(LogSumExpTest, MatchesDoubleAndHandlesInfinities) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t cols : {1, 7, 64, 51866}) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (float& v : row) v = normal(rng);
    for (int64_t j = 3; j < cols; j += 5) row[static_cast<size_t>(j)] = -std::numeric_limits<float>::infinity();
    double max = -INFINITY, sum = 0.0;
    for (float v : row) max = std::max(max, static_cast<double>(v));
    for (float v : row) sum += std::exp(static_cast<double>(v) - max);
    const double expected = std::log(sum) + max;
    EXPECT_NEAR(mmserve::kernels::log_sum_exp(row.data(), cols), expected, 2e-6 * std::max(1.0, std::fabs(expected))) << cols;
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> masked = {-inf, -inf, -inf};
  EXPECT_EQ(mmserve::kernels::log_sum_exp(masked.data(), 3), -inf);
  EXPECT_EQ(mmserve::kernels::log_sum_exp(masked.data(), 0), -inf);
  std::vector<float> with_inf = {1.0f, inf, 2.0f};
  EXPECT_EQ(mmserve::kernels::log_sum_exp(with_inf.data(), 3), inf);
  std::vector<float> big = {1000.0f, 1000.0f};  // no overflow: max-subtracted
  EXPECT_NEAR(mmserve::kernels::log_sum_exp(big.data(), 2), 1000.0f + std::log(2.0f), 1e-3);
}
