// Tests of linear() and gemm() against plain double-precision loops written here.
//
// Covers a grid of odd shapes, strided rows of x and y (column slices of wider buffers, whose padding
// must stay untouched), the residual accumulate, every activation in the fused epilogue, k == 0, the four
// transpose combinations of gemm() with padded leading dimensions, and the thread-count setting.
// Tolerance: the flash-attention rule (kernel_test_util.h).
#include "kernels/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::act_double;
using test_util::act_float;
using test_util::expect_within_naive_error;
using test_util::random_floats;

struct LinearCase {
  int64_t m = 0, k = 0, n = 0;
  bool bias = true;
  Activation act = Activation::kNone;
  bool accumulate = false;
  int64_t x_pad = 0;  // extra columns after each row of x (x.stride(0) = k + x_pad)
  int64_t y_pad = 0;
};

// Runs linear() on random data and checks it against double and naive-f32 loops; the padding columns of
// y must keep their values.
void check_linear(const LinearCase& c, uint32_t seed) {
  SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) +
               " act=" + activation_name(c.act) + (c.accumulate ? " accumulate" : "") + (c.bias ? " bias" : ""));
  const int64_t ldx = c.k + c.x_pad, ldy = c.n + c.y_pad;
  std::vector<float> x_buf = random_floats(static_cast<size_t>(c.m * ldx), seed);
  std::vector<float> w = random_floats(static_cast<size_t>(c.n * c.k), seed + 1);
  std::vector<float> b = random_floats(static_cast<size_t>(c.n), seed + 2);
  std::vector<float> y_buf = random_floats(static_cast<size_t>(c.m * ldy), seed + 3);
  const std::vector<float> y_before = y_buf;

  std::vector<double> reference(static_cast<size_t>(c.m * c.n));
  std::vector<float> naive(reference.size()), ours(reference.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0.0;
      float acc_f = 0.0f;
      for (int64_t t = 0; t < c.k; ++t) {
        acc += static_cast<double>(x_buf[i * ldx + t]) * w[j * c.k + t];
        acc_f += x_buf[i * ldx + t] * w[j * c.k + t];
      }
      if (c.bias) {
        acc += b[j];
        acc_f += b[j];
      }
      double r = act_double(acc, c.act);
      float r_f = act_float(acc_f, c.act);
      if (c.accumulate) {
        r += y_before[i * ldy + j];
        r_f += y_before[i * ldy + j];
      }
      reference[i * c.n + j] = r;
      naive[i * c.n + j] = r_f;
    }
  }

  const Tensor x = Tensor(x_buf.data(), DType::kF32, {c.m, ldx}).slice_cols(0, c.k);
  const Tensor wt(w.data(), DType::kF32, {c.n, c.k});
  const Tensor bt(b.data(), DType::kF32, {c.n});
  Tensor y = Tensor(y_buf.data(), DType::kF32, {c.m, ldy}).slice_cols(0, c.n);
  linear(x, wt, c.bias ? &bt : nullptr, y, c.act, c.accumulate);

  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) ours[i * c.n + j] = y_buf[i * ldy + j];
    for (int64_t j = c.n; j < ldy; ++j) ASSERT_EQ(y_buf[i * ldy + j], y_before[i * ldy + j]) << "padding written";
  }
  const double floor = 1e-6 * std::max(1.0, test_util::max_abs(reference));
  expect_within_naive_error(ours, naive, reference, floor, "linear");
}

TEST(LinearTest, OddShapeGridMatchesDoubleReference) {
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 17, 50, 77}) {
    for (int64_t k : {1, 7, 33, 64}) {
      for (int64_t n : {1, 5, 129}) check_linear({m, k, n}, seed++);
    }
  }
}

TEST(LinearTest, NoBias) {
  check_linear({17, 33, 129, /*bias=*/false}, 7);
}

TEST(LinearTest, StridedRowsOfXAndY) {
  check_linear({17, 33, 5, true, Activation::kNone, false, /*x_pad=*/11, /*y_pad=*/3}, 11);
  check_linear({1, 64, 129, true, Activation::kNone, false, 5, 7}, 12);
}

TEST(LinearTest, AccumulateAddsToY) {
  check_linear({50, 64, 129, true, Activation::kNone, /*accumulate=*/true}, 21);
  check_linear({3, 7, 5, false, Activation::kNone, true, 2, 4}, 22);
}

TEST(LinearTest, EveryActivationInTheEpilogue) {
  uint32_t seed = 31;
  for (Activation act : {Activation::kQuickGelu, Activation::kGelu, Activation::kGeluTanh}) {
    check_linear({77, 64, 129, true, act}, seed++);
    check_linear({3, 7, 5, false, act, false, 1, 2}, seed++);
  }
}

TEST(LinearTest, ClipQkvShape) {
  check_linear({50, 768, 2304, true}, 41);
}

TEST(LinearTest, ZeroInnerDimensionGivesBias) {
  const int64_t m = 3, n = 5;
  std::vector<float> b = random_floats(n, 51);
  std::vector<float> y_buf(m * n, std::numeric_limits<float>::quiet_NaN());
  float dummy = 0.0f;
  const Tensor x(&dummy, DType::kF32, {m, 0});
  const Tensor w(&dummy, DType::kF32, {n, 0});
  const Tensor bt(b.data(), DType::kF32, {n});
  Tensor y(y_buf.data(), DType::kF32, {m, n});
  linear(x, w, &bt, y, Activation::kQuickGelu);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_NEAR(y_buf[i * n + j], act_double(b[j], Activation::kQuickGelu), 1e-6);
    }
  }
}

TEST(LinearTest, AccumulateWithActivationAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenMP threads exist by now
  std::vector<float> buf(4, 1.0f);
  const Tensor x(buf.data(), DType::kF32, {2, 2});
  Tensor y(buf.data(), DType::kF32, {2, 2});
  EXPECT_DEATH(linear(x, x, nullptr, y, Activation::kGelu, true), "accumulate");
}

// gemm() with every transpose combination and leading dimensions larger than the matrices.
TEST(GemmTest, AllTransposesWithPaddedLeadingDimensions) {
  const int64_t m = 17, n = 5, k = 33;
  uint32_t seed = 61;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a=") + (ta ? "1" : "0") + " trans_b=" + (tb ? "1" : "0"));
      const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
      const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int64_t lda = a_cols + 3, ldb = b_cols + 2, ldc = n + 4;
      std::vector<float> a = random_floats(a_rows * lda, seed++);
      std::vector<float> b = random_floats(b_rows * ldb, seed++);
      std::vector<float> c = random_floats(m * ldc, seed++);
      const float alpha = 0.75f, beta = -0.5f;
      std::vector<double> reference(m * n);
      std::vector<float> naive(m * n), ours(m * n);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0.0;
          float acc_f = 0.0f;
          for (int64_t t = 0; t < k; ++t) {
            const float av = ta ? a[t * lda + i] : a[i * lda + t];
            const float bv = tb ? b[j * ldb + t] : b[t * ldb + j];
            acc += static_cast<double>(av) * bv;
            acc_f += av * bv;
          }
          reference[i * n + j] = alpha * acc + beta * static_cast<double>(c[i * ldc + j]);
          naive[i * n + j] = alpha * acc_f + beta * c[i * ldc + j];
        }
      }
      gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) ours[i * n + j] = c[i * ldc + j];
      }
      expect_within_naive_error(ours, naive, reference, 1e-6, "gemm");
    }
  }
}

TEST(GemmTest, BetaZeroOverwritesGarbage) {
  const int64_t m = 3, n = 4, k = 2;
  std::vector<float> a = random_floats(m * k, 71), b = random_floats(k * n, 72);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (float v : c) EXPECT_FALSE(std::isnan(v));
  std::vector<float> c0(m * n, std::numeric_limits<float>::quiet_NaN());
  gemm(false, false, m, n, 0, 1.0f, a.data(), 1, b.data(), n, 0.0f, c0.data(), n);
  for (float v : c0) EXPECT_EQ(v, 0.0f);
}

TEST(CpuThreadsTest, SetThenGetAndStillCorrect) {
  const int before = cpu_threads();
  EXPECT_GE(before, 1);
  set_cpu_threads(1);
  EXPECT_EQ(cpu_threads(), 1);
  check_linear({50, 64, 129, true, Activation::kQuickGelu}, 81);
  set_cpu_threads(0);  // 0 leaves the setting alone
  EXPECT_EQ(cpu_threads(), 1);
  set_cpu_threads(before);
  EXPECT_EQ(cpu_threads(), before);
}

// More threads than cores and a prime-ish count: uneven row and column blocks, a grid with tm > 1.
TEST(CpuThreadsTest, OddThreadCountsSplitOddShapesCorrectly) {
  const int before = cpu_threads();
  uint32_t seed = 91;
  for (int threads : {3, 5, 8}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    set_cpu_threads(threads);
    check_linear({77, 129, 133, true, Activation::kQuickGelu, false, 3, 5}, seed++);
    check_linear({203, 257, 37, true, Activation::kNone, /*accumulate=*/true, 0, 1}, seed++);
  }
  set_cpu_threads(before);
}

}  // namespace
}  // namespace mmserve::kernels
