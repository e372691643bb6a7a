// A mixed-radix complex FFT in double precision for the small, fixed sizes of speech frontends (Whisper's
// n_fft = 400 = 4 * 4 * 5 * 5, not a power of two).
//
// Recursive decimation in time (the KISS FFT scheme): the size is factored into 4s, 2s, 3s, 5s and then any
// remaining primes; each level does n / p butterflies of radix p as a p-point DFT with precomputed roots.
// Every twiddle is computed directly in double (cos/sin of 2 pi k / n), so the error is ~1e-15 relative to
// the largest bin, far below what the float32 features can show. 400 points cost ~7,000 complex
// multiply-adds where a direct DFT of the 201 bins Whisper keeps needs 80,000 real-by-complex ones.
// Tests: tests/unit/frontends/audio/fft_test.cpp (against a direct DFT over many sizes).
#pragma once

#include <complex>
#include <vector>

namespace mmserve::audio {

class FftPlan {
 public:
  // n >= 1 (a programmer error otherwise). Sizes with a large prime factor work, at O(n * p) for that factor.
  explicit FftPlan(int n);
  int size() const { return n_; }
  // out[k] = sum_j in[j] * exp(-2 pi i j k / n) for k < n. `in` and `out` hold n values and must not
  // overlap. Thread-safe (the plan is read-only).
  void forward(const std::complex<double>* in, std::complex<double>* out) const;

 private:
  void transform(const std::complex<double>* in, std::complex<double>* out, int n, int stride, int level) const;

  int n_;
  std::vector<int> factors_;                              // product = n_, outermost first
  std::vector<std::complex<double>> twiddles_;            // exp(-2 pi i k / n_), k < n_
  std::vector<std::vector<std::complex<double>>> roots_;  // per level: exp(-2 pi i r / p), r < p
};

}  // namespace mmserve::audio
