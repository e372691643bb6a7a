// Mixed-radix FFT (see fft.h). Complex products are written out by hand: std::complex's operator* checks
// each product for NaN and falls back to __muldc3 (C99 Annex G infinities), which finite inputs never need.
// Tests: tests/unit/frontends/audio/fft_test.cpp.
#include "frontends/audio/fft.h"

#include <cmath>
#include <numbers>

#include "core/status.h"

namespace mmserve::audio {
namespace {

using Complex = std::complex<double>;

inline Complex mul(Complex a, Complex b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

}  // namespace

FftPlan::FftPlan(int n) : n_(n) {
  MMSERVE_CHECK(n >= 1, "FftPlan: size must be positive, got " + std::to_string(n));
  int rest = n;
  for (int p : {4, 2, 3, 5}) {
    while (rest % p == 0) {
      factors_.push_back(p);
      rest /= p;
    }
  }
  for (int p = 7; p * p <= rest; p += 2) {
    while (rest % p == 0) {
      factors_.push_back(p);
      rest /= p;
    }
  }
  if (rest > 1) factors_.push_back(rest);
  twiddles_.resize(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    const double angle = -2.0 * std::numbers::pi * k / n;
    twiddles_[static_cast<size_t>(k)] = Complex(std::cos(angle), std::sin(angle));
  }
  for (int p : factors_) {
    std::vector<Complex> root(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) root[static_cast<size_t>(r)] = twiddles_[static_cast<size_t>(r) * (n / p)];
    roots_.push_back(std::move(root));
  }
}

void FftPlan::forward(const Complex* in, Complex* out) const {
  if (n_ == 1) {
    out[0] = in[0];
    return;
  }
  transform(in, out, n_, 1, 0);
}

// out[0, n) = DFT_n of in[0], in[stride], ..., in[(n - 1) * stride].
void FftPlan::transform(const Complex* in, Complex* out, int n, int stride, int level) const {
  const int p = factors_[static_cast<size_t>(level)];
  const int m = n / p;
  // The p sub-sequences in[j + p * r] (r < m), transformed into out[j * m, (j + 1) * m).
  if (m == 1) {
    for (int j = 0; j < p; ++j) out[j] = in[static_cast<ptrdiff_t>(j) * stride];
  } else {
    for (int j = 0; j < p; ++j) {
      transform(in + static_cast<ptrdiff_t>(j) * stride, out + static_cast<ptrdiff_t>(j) * m, m, stride * p, level + 1);
    }
  }
  // X[k + q m] = sum_j W_n^(j k) Y_j[k] W_p^(j q); W_n^x = twiddles_[x * (n_ / n)].
  const int twiddle_step = n_ / n;
  const Complex* root = roots_[static_cast<size_t>(level)].data();
  Complex local[8];
  std::vector<Complex> heap;
  Complex* t = local;
  if (p > 8) {
    heap.resize(static_cast<size_t>(p));
    t = heap.data();
  }
  for (int k = 0; k < m; ++k) {
    t[0] = out[k];
    for (int j = 1; j < p; ++j) t[j] = mul(out[k + j * m], twiddles_[static_cast<size_t>(j) * k * twiddle_step]);
    for (int q = 0; q < p; ++q) {
      Complex sum = t[0];
      int index = 0;
      for (int j = 1; j < p; ++j) {
        index += q;
        if (index >= p) index -= p;
        sum += mul(t[j], root[index]);
      }
      out[k + q * m] = sum;
    }
  }
}

}  // namespace mmserve::audio
