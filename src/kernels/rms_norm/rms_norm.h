// RMS normalisation over the last dimension, as HF's LlamaRMSNorm (Llama, Mistral, Qwen2/3; Qwen3's per-head q/k
// norm is the same op over rows of head_dim): y = weight * (x / sqrt(mean(x^2) + eps)), the statistic in f32.
//
// Contract: x [rows, cols] with row stride x_ld, y [rows, cols] with row stride y_ld (y may alias x when the strides
// are equal), weight [cols]; f32. Tests: rms_norm_test.cpp (against a double loop); bench: rms_norm_bench.cpp.
#pragma once

#include <cstdint>

namespace mmserve::kernels {

void rms_norm(const float* x, int64_t x_ld, const float* weight, int64_t rows, int64_t cols, float eps, float* y,
              int64_t y_ld);

}  // namespace mmserve::kernels
