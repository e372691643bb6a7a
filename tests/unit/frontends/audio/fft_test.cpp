// FFT tests: every size 1..64 and a few larger ones (Whisper's 400, powers of two, primes, a large prime
// factor) against a direct O(n^2) DFT in long double.
#include "frontends/audio/fft.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>
#include <vector>

namespace mmserve::audio {
namespace {

std::vector<std::complex<long double>> direct_dft(const std::vector<std::complex<double>>& x) {
  const size_t n = x.size();
  std::vector<std::complex<long double>> roots(n);
  for (size_t r = 0; r < n; ++r) {
    const long double angle = -2.0L * std::numbers::pi_v<long double> * static_cast<long double>(r) / n;
    roots[r] = {std::cos(angle), std::sin(angle)};
  }
  std::vector<std::complex<long double>> out(n);
  for (size_t k = 0; k < n; ++k) {
    std::complex<long double> sum = 0;
    for (size_t j = 0; j < n; ++j) sum += std::complex<long double>(x[j]) * roots[(j * k) % n];
    out[k] = sum;
  }
  return out;
}

TEST(Fft, MatchesDirectDft) {
  std::vector<int> sizes;
  for (int n = 1; n <= 64; ++n) sizes.push_back(n);
  for (int n : {97, 100, 128, 160, 200, 256, 400, 512, 1000, 1021, 2 * 1021}) sizes.push_back(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int n : sizes) {
    std::vector<std::complex<double>> x(static_cast<size_t>(n));
    for (auto& v : x) v = {uniform(rng), uniform(rng)};
    std::vector<std::complex<double>> out(static_cast<size_t>(n));
    FftPlan plan(n);
    ASSERT_EQ(plan.size(), n);
    plan.forward(x.data(), out.data());
    const std::vector<std::complex<long double>> expected = direct_dft(x);
    double max_error = 0.0;
    for (size_t k = 0; k < out.size(); ++k) {
      max_error = std::max(max_error, static_cast<double>(std::abs(std::complex<long double>(out[k]) - expected[k])));
    }
    // |X_k| is ~sqrt(n) for random input; double rounding grows ~log(n) * 1e-16 relative.
    EXPECT_LT(max_error, 1e-13 * std::sqrt(static_cast<double>(n)) * 4) << "n = " << n;
  }
}

TEST(Fft, ImpulseAndConstant) {
  FftPlan plan(400);
  std::vector<std::complex<double>> x(400), out(400);
  x[0] = 1.0;
  plan.forward(x.data(), out.data());
  for (const auto& v : out) ASSERT_NEAR(std::abs(v - std::complex<double>(1.0)), 0.0, 1e-15);
  std::fill(x.begin(), x.end(), std::complex<double>(1.0));
  plan.forward(x.data(), out.data());
  EXPECT_NEAR(out[0].real(), 400.0, 1e-12);
  for (size_t k = 1; k < out.size(); ++k) ASSERT_NEAR(std::abs(out[k]), 0.0, 1e-12) << k;
}

}  // namespace
}  // namespace mmserve::audio
