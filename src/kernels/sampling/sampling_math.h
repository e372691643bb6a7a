// Internal to sampling: the f32/integer steps both twins must evaluate identically (see sampling.h), written once
// for the host and the device. Each floating-point operation is spelled out (__fmul_rn etc. on the device, where
// nvcc would otherwise contract a * b + c; sampling_cpu.cpp is compiled with -ffp-contract=off), so both produce
// the same bits: the order key, the penalties, the fixed exp, the masses and thresholds, the draw.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/sampling/sampling.h"

#if defined(__CUDACC__)
#define MMSERVE_SAMPLING_HD __host__ __device__ __forceinline__
#else
#define MMSERVE_SAMPLING_HD inline
#endif

namespace mmserve::kernels::sampling_math {

constexpr uint64_t kMassOne = uint64_t{1} << 32;  // the top token's mass

MMSERVE_SAMPLING_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MMSERVE_SAMPLING_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
MMSERVE_SAMPLING_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
MMSERVE_SAMPLING_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
MMSERVE_SAMPLING_HD float rint(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return __builtin_rintf(a);
#endif
}
MMSERVE_SAMPLING_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}
MMSERVE_SAMPLING_HD float float_of(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// Unsigned key with the order of the floats (-inf < ... < -0 < +0 < ... < +inf).
MMSERVE_SAMPLING_HD uint32_t order_key(float f) {
  const uint32_t b = bits_of(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
MMSERVE_SAMPLING_HD float key_value(uint32_t k) {
  return float_of((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

MMSERVE_SAMPLING_HD bool greedy(const SamplingRowParams& p) { return !(p.temperature > 0.0f); }
MMSERVE_SAMPLING_HD bool repetition_on(const SamplingRowParams& p) {
  return p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f;
}
MMSERVE_SAMPLING_HD bool penalties_on(const SamplingRowParams& p) {
  return repetition_on(p) || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}
MMSERVE_SAMPLING_HD bool top_k_on(const SamplingRowParams& p, int64_t vocab) { return p.top_k > 0 && p.top_k < vocab; }
MMSERVE_SAMPLING_HD bool top_p_on(const SamplingRowParams& p) { return p.top_p < 1.0f; }

// Rule 1 for a seen token generated `generated` times.
MMSERVE_SAMPLING_HD float penalize(float raw, uint32_t generated, const SamplingRowParams& p) {
  float l = raw;
  if (repetition_on(p)) l = l > 0.0f ? div(l, p.repetition_penalty) : mul(l, p.repetition_penalty);
  if (generated > 0) l = sub(l, fma(p.frequency_penalty, static_cast<float>(generated), p.presence_penalty));
  return l;
}

// e^x for x <= 0 in a fixed f32 evaluation (Cody-Waite reduction, degree-7 Taylor polynomial: <= 2 ulp over
// [-30, 0]); exactly 1 at 0; 0 below -30 (where the mass would be 0 anyway) and for NaN.
MMSERVE_SAMPLING_HD float exp_nonpositive(float x) {
  if (!(x > -30.0f)) return 0.0f;
  const float n = rint(mul(x, 1.44269504f));
  float r = fma(n, -0.693145751953125f, x);
  r = fma(n, -1.428606765330187e-06f, r);
  float q = 1.98412698e-04f;  // 1/5040
  q = fma(q, r, 1.38888889e-03f);
  q = fma(q, r, 8.33333333e-03f);
  q = fma(q, r, 4.16666667e-02f);
  q = fma(q, r, 1.66666667e-01f);
  q = fma(q, r, 0.5f);
  q = fma(q, r, 1.0f);
  q = fma(q, r, 1.0f);
  const int exponent = static_cast<int>(n) + 127;  // n in [-44, 0]: a normal power of two
  return mul(q, float_of(static_cast<uint32_t>(exponent) << 23));
}

// The integer mass of a token with penalised logit l, given the row's l_max and temperature.
MMSERVE_SAMPLING_HD uint64_t mass(float l, float s_max, float temperature) {
  const float e = exp_nonpositive(sub(div(l, temperature), s_max));
  return static_cast<uint64_t>(mul(e, 4294967296.0f));  // exact scaling; truncation
}

MMSERVE_SAMPLING_HD uint64_t ceil_product(float fraction, uint64_t total) {
#if defined(__CUDA_ARCH__)
  const double t = ceil(__dmul_rn(static_cast<double>(fraction), static_cast<double>(total)));
#else
  const double t = __builtin_ceil(static_cast<double>(fraction) * static_cast<double>(total));
#endif
  return static_cast<uint64_t>(t);
}

// The top-p target: the kept prefix's mass must reach it (>= 1 so one token is always kept). total < 2^53.
MMSERVE_SAMPLING_HD uint64_t top_p_target(float top_p, uint64_t total) {
  if (!(top_p > 0.0f)) return 1;
  const uint64_t t = ceil_product(top_p, total);
  return t < 1 ? 1 : t;
}

// The min-p floor on the mass: q >= it <=> p >= min_p * p_max (0 when off).
MMSERVE_SAMPLING_HD uint64_t min_p_floor(float min_p) {
  if (!(min_p > 0.0f)) return 0;
  return ceil_product(min_p > 1.0f ? 1.0f : min_p, kMassOne);
}

// floor(r * total / 2^64): uniform in [0, total).
MMSERVE_SAMPLING_HD uint64_t draw_target(uint64_t r, uint64_t total) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(r, total);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * total) >> 64);
#endif
}

// The Philox counter and key of (seed, step), and the 64-bit draw from its first two outputs.
MMSERVE_SAMPLING_HD uint64_t draw_bits(uint32_t out_x, uint32_t out_y) {
  return (static_cast<uint64_t>(out_y) << 32) | out_x;
}

}  // namespace mmserve::kernels::sampling_math
