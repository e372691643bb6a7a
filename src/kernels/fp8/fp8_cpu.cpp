// FP8 encoding, quantisation and the scaled GEMM on the CPU (see fp8.h).
#include "kernels/fp8/fp8.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mmserve::kernels {

namespace {

struct Layout {
  int mantissa_bits;  // 3 (E4M3) or 2 (E5M2)
  int bias;           // 7 or 15
  int min_exponent;   // of the normal numbers: 1 - bias
  float max;
  uint8_t max_code;   // the largest finite magnitude's code
  uint8_t nan_code;
};

Layout layout(Fp8Format f) {
  if (f == Fp8Format::kE4M3) return {3, 7, -6, kFp8E4M3Max, 0x7E, 0x7F};
  return {2, 15, -14, kFp8E5M2Max, 0x7B, 0x7F};
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

uint8_t fp8_encode(float x, Fp8Format format) {
  const Layout l = layout(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return l.nan_code;  // CUDA's canonical NaN: the sign of a NaN input is dropped
  const float a = std::fabs(x);
  if (a >= l.max) return static_cast<uint8_t>(sign | l.max_code);  // saturate (infinities too)
  // a = q * 2^(e - mantissa_bits) with q rounded to an integer, ties to even: q in [2^mb, 2^(mb+1)] for normal
  // numbers; below the smallest normal the quantum stays that of min_exponent (subnormals, q < 2^mb). The scaling by
  // a power of two is exact, so nearbyint (round half to even in the default rounding mode) is the only rounding.
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1
  int exponent = std::max(e - 1, l.min_exponent);
  float q = std::nearbyint(std::ldexp(a, l.mantissa_bits - exponent));
  const float implicit = static_cast<float>(1 << l.mantissa_bits);
  if (q >= 2 * implicit) {  // rounded up into the next binade
    q = implicit;
    ++exponent;
  }
  if (q < implicit) return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));  // subnormal (or zero)
  const int field = exponent + l.bias;
  const uint8_t code = static_cast<uint8_t>((field << l.mantissa_bits) | (static_cast<int>(q) - (1 << l.mantissa_bits)));
  // a < max, so rounding can reach max_code but never past it.
  return static_cast<uint8_t>(sign | std::min(code, l.max_code));
}

float fp8_decode(uint8_t code, Fp8Format format) {
  const Layout l = layout(format);
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int magnitude = code & 0x7F;
  const int field = magnitude >> l.mantissa_bits;
  const int mantissa = magnitude & ((1 << l.mantissa_bits) - 1);
  const int top_field = (1 << (7 - l.mantissa_bits)) - 1;
  if (format == Fp8Format::kE4M3 && magnitude == 0x7F) return std::nanf("");
  if (format == Fp8Format::kE5M2 && field == top_field) {
    return mantissa == 0 ? sign * INFINITY : std::nanf("");
  }
  if (field == 0) return sign * std::ldexp(static_cast<float>(mantissa), l.min_exponent - l.mantissa_bits);
  return sign * std::ldexp(static_cast<float>(mantissa + (1 << l.mantissa_bits)), field - l.bias - l.mantissa_bits);
}

void fp8_quantize(const float* x, int64_t n, float scale, Fp8Format format, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = fp8_encode(x[i] / scale, format);
}

void fp8_quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ld_x, Fp8Format format, uint8_t* q,
                       int64_t ld_q, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * ld_x + c]));
    scales[r] = fp8_scale_for_amax(amax, format);
    fp8_quantize(x + r * ld_x, cols, scales[r], format, q + r * ld_q);
  }
}

float fp8_scale_for_amax(float amax, Fp8Format format) { return std::max(amax, 1e-12f) / fp8_max(format); }

void fp8_gemm(const Fp8GemmCpuArgs& args) {
  // Decoded once: every code's value (256 entries per format), then plain f32 dot products.
  float a_table[256], w_table[256];
  for (int c = 0; c < 256; ++c) {
    a_table[c] = fp8_decode(static_cast<uint8_t>(c), args.a_format);
    w_table[c] = fp8_decode(static_cast<uint8_t>(c), args.w_format);
  }
  std::vector<float> w_row(static_cast<size_t>(args.k));
  for (int64_t n = 0; n < args.n; ++n) {
    for (int64_t k = 0; k < args.k; ++k) w_row[static_cast<size_t>(k)] = w_table[args.w[n * args.ldw + k]];
    const float ws = args.w_scale[args.w_scale_per_row ? n : 0];
    for (int64_t m = 0; m < args.m; ++m) {
      const uint8_t* a = args.a + m * args.lda;
      float sum = 0.0f;
      for (int64_t k = 0; k < args.k; ++k) sum += a_table[a[k]] * w_row[static_cast<size_t>(k)];
      float out = sum * (args.a_scale[args.a_scale_per_row ? m : 0] * ws);
      if (args.bias) out += args.bias[n];
      args.d[m * args.ldd + n] = out;
    }
  }
}

}  // namespace mmserve::kernels
