// Test-only helpers shared by the kernel tests: deterministic random data, error measures, and the
// acceptance rule taken from flash-attention.
//
// The rule: a kernel passes when its max error against a double-precision reference is at most twice the
// max error of a plain f32 implementation of the same computation (written naively in the test), plus a
// small absolute floor for cases where the naive f32 version happens to be exact. The references are
// independent loops in the tests, never the kernel's own output.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation/activation.h"

namespace mmserve::kernels::test_util {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// max_i |got[i] - ref[i]|; a NaN or inf mismatch counts as infinite error.
inline double max_abs_error(const std::vector<float>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(ref[i]) || static_cast<double>(got[i]) == ref[i]) continue;
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= worst)) worst = e;  // also catches inf
  }
  return worst;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The flash-attention rule: error(ours) <= 2 * error(naive f32) + floor, both against the double reference.
inline void expect_within_naive_error(const std::vector<float>& ours, const std::vector<float>& naive,
                                      const std::vector<double>& reference, double floor,
                                      const std::string& what = "") {
  const double ours_error = max_abs_error(ours, reference);
  const double naive_error = max_abs_error(naive, reference);
  EXPECT_LE(ours_error, 2.0 * naive_error + floor)
      << what << ": kernel error " << ours_error << ", naive f32 error " << naive_error << ", floor " << floor;
}

// The activation formulas of activation.h written plainly, in double (reference) and in f32 (naive).
inline double act_double(double x, Activation act) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kQuickGelu: return x / (1.0 + std::exp(-1.702 * x));
    case Activation::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

inline float act_float(float x, Activation act) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kQuickGelu: return x / (1.0f + std::exp(-1.702f * x));
    case Activation::kGelu: return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f)));
    case Activation::kGeluTanh:
      return 0.5f * x * (1.0f + std::tanh(std::sqrt(2.0f / static_cast<float>(M_PI)) * (x + 0.044715f * x * x * x)));
  }
  return x;
}

}  // namespace mmserve::kernels::test_util
