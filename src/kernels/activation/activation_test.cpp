// Tests of the activations (and of the branch-free exp they are built on) against formulas in double.
//
// Each activation runs over a dense sweep of [-12, 12] large enough to take the parallel path, in place
// and out of place, under the flash-attention rule against a naive f32 libm version; extreme inputs must
// give the right limits and never NaN. exp_f32 is checked for relative error in ulps over its whole range
// and for its special values (-inf -> exactly 0, overflow -> inf, NaN kept).
#include "kernels/activation/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/cpu_math.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::act_double;
using test_util::act_float;
using test_util::expect_within_naive_error;

constexpr Activation kAll[] = {Activation::kNone, Activation::kQuickGelu, Activation::kGelu, Activation::kGeluTanh};

std::vector<float> sweep(int64_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  return v;
}

TEST(ActivationTest, HfNamesMapToActivations) {
  EXPECT_EQ(activation_from_hf_name("quick_gelu"), Activation::kQuickGelu);
  EXPECT_EQ(activation_from_hf_name("gelu"), Activation::kGelu);
  EXPECT_EQ(activation_from_hf_name("gelu_new"), Activation::kGeluTanh);
  EXPECT_EQ(activation_from_hf_name("gelu_pytorch_tanh"), Activation::kGeluTanh);
  EXPECT_EQ(activation_from_hf_name("relu6"), std::nullopt);
  EXPECT_STREQ(activation_name(Activation::kQuickGelu), "quick_gelu");
}

TEST(ActivationTest, EachActivationMatchesDoubleFormula) {
  const std::vector<float> x = sweep(100003, -12.0f, 12.0f);  // odd size: vector tails and chunk tails
  for (Activation act : kAll) {
    SCOPED_TRACE(activation_name(act));
    std::vector<double> reference(x.size());
    std::vector<float> naive(x.size()), ours(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      reference[i] = act_double(x[i], act);
      naive[i] = act_float(x[i], act);
    }
    std::vector<float> xin = x;
    const Tensor src(xin.data(), DType::kF32, {static_cast<int64_t>(x.size())});
    Tensor dst(ours.data(), DType::kF32, {static_cast<int64_t>(x.size())});
    activation(src, dst, act);
    EXPECT_EQ(xin, x) << "input modified";
    expect_within_naive_error(ours, naive, reference, 2e-7, activation_name(act));
  }
}

TEST(ActivationTest, InPlaceOnAMatrix) {
  const std::vector<float> x = test_util::random_floats(size_t{17} * 129, 5, -6.0f, 6.0f);
  for (Activation act : kAll) {
    SCOPED_TRACE(activation_name(act));
    std::vector<float> y = x;
    Tensor t(y.data(), DType::kF32, {17, 129});
    activation(t, t, act);
    std::vector<double> reference(x.size());
    std::vector<float> naive(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      reference[i] = act_double(x[i], act);
      naive[i] = act_float(x[i], act);
    }
    expect_within_naive_error(y, naive, reference, 2e-7, activation_name(act));
  }
}

TEST(ActivationTest, ExtremeInputsSaturateWithoutNaN) {
  std::vector<float> x = {-1e30f, -1e4f, -100.0f, -20.0f, -0.0f, 0.0f, 1e-30f, 20.0f, 100.0f, 1e4f, 1e30f};
  for (Activation act : kAll) {
    SCOPED_TRACE(activation_name(act));
    std::vector<float> y(x.size());
    const Tensor src(x.data(), DType::kF32, {static_cast<int64_t>(x.size())});
    Tensor dst(y.data(), DType::kF32, {static_cast<int64_t>(x.size())});
    activation(src, dst, act);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_FALSE(std::isnan(y[i])) << "x=" << x[i];
      if (x[i] >= 20.0f) {
        EXPECT_FLOAT_EQ(y[i], x[i]) << "x=" << x[i];  // the identity for large x
      } else if (x[i] <= -20.0f && act != Activation::kNone) {
        EXPECT_NEAR(y[i], 0.0f, 1e-9f) << "x=" << x[i];  // zero for very negative x
      } else if (std::fabs(x[i]) < 1e-20f) {
        EXPECT_NEAR(y[i], act_double(x[i], act), 1e-30) << "x=" << x[i];
      }
    }
  }
}

TEST(ActivationTest, ScalarFormulaMatchesDouble) {
  for (Activation act : kAll) {
    for (float x : sweep(2001, -8.0f, 8.0f)) {
      const double ref = act_double(x, act);
      EXPECT_NEAR(activation_scalar(x, act), ref, 4e-7 * std::max(1.0, std::fabs(ref)))
          << activation_name(act) << " x=" << x;
    }
  }
}

// ulps of `got` away from `ref`, measured in units of ref's float spacing.
double ulps(float got, double ref) {
  const float r = static_cast<float>(ref);
  const double spacing = std::nextafter(std::fabs(r), std::numeric_limits<float>::infinity()) - std::fabs(r);
  return std::fabs(static_cast<double>(got) - ref) / spacing;
}

TEST(CpuMathTest, ExpWithinThreeUlpsOverItsRange) {
  double worst = 0.0;
  for (float x : sweep(400001, -87.3f, 88.7f)) {
    worst = std::max(worst, ulps(cpu::exp_f32(x), std::exp(static_cast<double>(x))));
  }
  EXPECT_LE(worst, 3.0);
  // Denormal results: absolute error within one denormal step.
  for (float x : sweep(1001, -103.9f, -87.4f)) {
    EXPECT_NEAR(cpu::exp_f32(x), std::exp(static_cast<double>(x)), 1.5e-45) << "x=" << x;
  }
}

TEST(CpuMathTest, ExpSpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(cpu::exp_f32(-kInf), 0.0f);
  EXPECT_EQ(cpu::exp_f32(-200.0f), 0.0f);
  EXPECT_EQ(cpu::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_f32(89.0f), kInf);
  EXPECT_EQ(cpu::exp_f32(kInf), kInf);
  EXPECT_TRUE(std::isnan(cpu::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(cpu::sigmoid_f32(-kInf), 0.0f);
  EXPECT_EQ(cpu::sigmoid_f32(kInf), 1.0f);
  EXPECT_EQ(cpu::tanh_f32(-kInf), -1.0f);
  EXPECT_EQ(cpu::tanh_f32(kInf), 1.0f);
}

}  // namespace
}  // namespace mmserve::kernels
