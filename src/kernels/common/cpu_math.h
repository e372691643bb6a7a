// Internal to the CPU kernels: branch-free exp/sigmoid/tanh that vectorise, and the runtime ISA dispatch.
//
// Why: libm's expf is a scalar call, so a loop that calls it (softmax, quick_gelu, gelu_tanh) runs one
// element at a time. These inline versions are written without branches (selects only), so `#pragma omp
// simd` loops that call them become vector code. exp_f32 is the Cephes expf polynomial with Cody-Waite
// range reduction: max relative error ~2 ulp over the whole range, +inf above log(FLT_MAX), exactly 0 for
// x = -inf (masked softmax entries must contribute exactly nothing), gradual underflow in between, NaN kept.
//
// MMSERVE_CPU_CLONES compiles a function three times (x86-64-v4 = AVX-512, v3 = AVX2+FMA, baseline) and
// picks one at load time (GCC's ifunc target_clones), so the binary runs on any x86-64 yet uses the wide
// units where they exist. Put it only on non-inline functions that hold hot loops; inline helpers called
// from them are compiled for the clone's ISA.
// Tests: activation_test.cpp and softmax_test.cpp check these against double-precision formulas.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MMSERVE_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MMSERVE_CPU_CLONES
#endif

namespace mmserve::kernels::cpu {

inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // few mantissa bits, so n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kHi = 88.7228394f;     // log(FLT_MAX)
  constexpr float kLo = -103.972084f;    // below this the result rounds to 0 even as a denormal
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to nearest integer
  // NaN fails both comparisons and so becomes kLo here (no float->int conversion of NaN); restored below.
  float xc = x > kLo ? x : kLo;
  xc = xc < kHi ? xc : kHi;
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as two normal factors so that n in [-150, 128] needs no special case (denormals, FLT_MAX).
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  float y = p * s1 * s2;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  y = x < kLo ? 0.0f : y;
  y = x != x ? x : y;
  return y;
}

// 1 / (1 + e^-z): for z -> -inf e^-z overflows to inf and the quotient is 0, for z -> +inf it is 1, so no
// branch is needed and no NaN appears for any non-NaN z.
inline float sigmoid_f32(float z) {
  return 1.0f / (1.0f + exp_f32(-z));
}

// tanh(u) = 1 - 2 / (e^{2u} + 1), saturating to +-1 without NaN. Its error is absolute (~1e-7), which is
// what gelu_tanh needs (it uses 1 + tanh).
inline float tanh_f32(float u) {
  return 1.0f - 2.0f / (exp_f32(2.0f * u) + 1.0f);
}

}  // namespace mmserve::kernels::cpu
