// RMS normalisation over the last dimension, as HF's LlamaRMSNorm (Llama, Mistral, Qwen2/3; Qwen3's per-head q/k
// norm is the same op over rows of head_dim): y = weight * (x / sqrt(mean(x^2) + eps)), the statistic in f32.
//
// rms_norm (f32): x [rows, cols] with row stride x_ld, y [rows, cols] with row stride y_ld (y may alias x when the
// strides are equal), weight [cols]; f32. The CPU model calls it.
//
// rms_norm(const RmsNormArgs&): the dtype-generic contract the CUDA twin (rms_norm_cuda.h) shares. x in f32, f16
// or bf16; weight [cols] and y in y_dtype (the model's 16-bit weight dtype, or f32). Each row holds `segments`
// consecutive groups of `cols` values, each normalised independently with the same weight: row r, segment s is
// x + r * x_ld + s * cols -> y + r * y_ld + s * cols (Qwen3's q/k norm: rows = tokens, segments = heads,
// cols = head_dim, x_ld = the fused QKV row's stride, x = the q or k columns' start). y may alias x only when the
// dtypes and the strides match. Rounding: the sum of squares and the scaling are f32 and y is rounded to y_dtype
// once, at the end: weight_f32 * (x_f32 * rsqrt(mean + eps)). HF instead rounds the normalised value to the
// input dtype before multiplying by the weight (`weight * hidden.to(input_dtype)`); with a 16-bit x that is
// one extra rounding (<= half an ulp of the 16-bit type) which we skip; with the f32 residual stream it is the
// same computation.
// Tests: rms_norm_test.cpp (against a double loop); bench: rms_norm_bench.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

void rms_norm(const float* x, int64_t x_ld, const float* weight, int64_t rows, int64_t cols, float eps, float* y,
              int64_t y_ld);

struct RmsNormArgs {
  const void* x = nullptr;
  DType x_dtype = DType::kF32;
  int64_t x_ld = 0;
  const void* weight = nullptr;  // [cols], y_dtype
  void* y = nullptr;
  DType y_dtype = DType::kBF16;
  int64_t y_ld = 0;
  int64_t rows = 0, cols = 0;
  int64_t segments = 1;  // groups of `cols` per row, normalised independently
  float eps = 1e-6f;
};

// kInvalidArgument / kUnimplemented for a broken shape, dtype, null pointer or alias (shared by both twins).
Status validate_rms_norm(const RmsNormArgs& args);

// The CPU twin of rms_norm_cuda.
Status rms_norm(const RmsNormArgs& args);

}  // namespace mmserve::kernels
