// FP8 (OCP 8-bit floating point) for Hopper's scaled GEMMs (issue 17): the two formats, quantisation with a scale,
// and the CPU twin of the scaled FP8 GEMM.
//
//   E4M3 ("e4m3fn", torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity, S.1111.111 is
//        NaN, so the largest finite value is 448 (0.1111.110); subnormals down to 2^-9.
//   E5M2 (torch.float8_e5m2): 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like (infinities, NaNs); largest
//        finite 57344; subnormals down to 2^-16.
//
// Encoding rounds to nearest, ties to even, and saturates: a finite value beyond the largest (and an infinity)
// becomes the largest finite value of its sign; NaN becomes 0x7F (the sign dropped, as CUDA does). This is what the GPU's
// cvt.rn.satfinite (cuda_fp8.h's __NV_SATFINITE) does, so the CUDA quantiser (fp8_cuda.h) equals fp8_quantize bit
// for bit. torch's `.to(float8_e4m3fn)` does not saturate (it gives NaN past 448), which is why every reference
// (torch's own fp8 recipes, vLLM) clamps to +-448 first: the same results for finite inputs.
//
//   fp8_quantize: q[i] = encode(x[i] / scale), the quotient in IEEE f32 (so scale = amax / 448 puts amax at 448).
//   fp8_gemm:     D[m, n] = a_scale[m or 0] * w_scale[n or 0] * sum_k decode(A[m, k]) * decode(W[n, k]) (+ bias[n]):
//                 A [M, K] and W [N, K] row-major codes, scales per tensor (one value) or per row of A (a token) and
//                 per row of W (an output channel), f32 accumulation. The twin of CublasLtGemm::run_fp8.
// Tests: fp8_test.cpp (codes of hand-worked values from the OCP spec: extremes, subnormals, ties, saturation, NaN;
// every code decoded and re-encoded; the GEMM against a double-precision loop).
#pragma once

#include <cstdint>

namespace mmserve::kernels {

enum class Fp8Format { kE4M3, kE5M2 };

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

inline constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? kFp8E4M3Max : kFp8E5M2Max; }
const char* fp8_format_name(Fp8Format f);

uint8_t fp8_encode(float x, Fp8Format format);
float fp8_decode(uint8_t code, Fp8Format format);

// q[i] = fp8_encode(x[i] / scale) for i < n. scale > 0 and finite (the caller's contract).
void fp8_quantize(const float* x, int64_t n, float scale, Fp8Format format, uint8_t* q);

// Dynamic per-token scaling: for each row r of x [rows, cols] (stride ld_x), scales[r] = fp8_scale_for_amax(max |x[r, :]|)
// and q[r, :] = fp8_encode(x[r, :] / scales[r]) (stride ld_q). The twin of fp8_quantize_rows_cuda.
void fp8_quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ld_x, Fp8Format format, uint8_t* q,
                       int64_t ld_q, float* scales);

// The scale that maps amax to the format's largest value: max(amax, 1e-12) / fp8_max (torch's recipe: an all-zero
// tensor gets a tiny positive scale, never a division by zero).
float fp8_scale_for_amax(float amax, Fp8Format format);

struct Fp8GemmCpuArgs {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // [m, lda]
  int64_t lda = 0;
  Fp8Format a_format = Fp8Format::kE4M3;
  const uint8_t* w = nullptr;  // [n, ldw]
  int64_t ldw = 0;
  Fp8Format w_format = Fp8Format::kE4M3;
  const float* a_scale = nullptr;  // [1] or [m]
  bool a_scale_per_row = false;
  const float* w_scale = nullptr;  // [1] or [n]
  bool w_scale_per_row = false;
  const float* bias = nullptr;  // [n] or null
  float* d = nullptr;           // [m, ldd] f32
  int64_t ldd = 0;
};
void fp8_gemm(const Fp8GemmCpuArgs& args);

}  // namespace mmserve::kernels
