// LayerNorm over the last dimension on CPU, as torch.nn.LayerNorm: two passes for the statistics (mean,
// then the centred sum of squares, which stays accurate when |mean| >> std), a third to write y.
//
// Each row is read three times from L1/L2 (a 768-wide row is 3 KB); rows run in parallel. y may alias x:
// every element is read before it is written, at the same index.
// Tests: layer_norm_test.cpp (odd widths, strided rows, in place, constant rows, large offsets, vs double);
// bench: layer_norm_bench.cpp.
#include <cmath>

#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"
#include "kernels/layer_norm/layer_norm.h"

namespace mmserve::kernels {
namespace {

MMSERVE_CPU_CLONES
void layer_norm_row(const float* x, const float* gamma, const float* beta, float eps, int64_t cols, float* y) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j) sum += x[j];
  const float mean = sum / static_cast<float>(cols);
  float centred_squares = 0.0f;
#pragma omp simd reduction(+ : centred_squares)
  for (int64_t j = 0; j < cols; ++j) {
    const float d = x[j] - mean;
    centred_squares += d * d;
  }
  const float rstd = 1.0f / std::sqrt(centred_squares / static_cast<float>(cols) + eps);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y) {
  MMSERVE_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32 && gamma.dtype() == DType::kF32 &&
                    beta.dtype() == DType::kF32,
                "layer_norm: f32 only");
  MMSERVE_CHECK(x.dims() == 2 && y.dims() == 2, "layer_norm: x and y must be [rows, cols]");
  MMSERVE_CHECK(x.stride(1) == 1 && y.stride(1) == 1, "layer_norm: rows must be contiguous");
  const int64_t rows = x.size(0), cols = x.size(1);
  MMSERVE_CHECK(y.size(0) == rows && y.size(1) == cols, "layer_norm: y is " + y.shape_string());
  MMSERVE_CHECK(gamma.numel() == cols && beta.numel() == cols && gamma.is_contiguous() && beta.is_contiguous(),
                "layer_norm: gamma and beta must be [cols]");
  if (rows == 0 || cols == 0) return;
  const float* src = x.data_as<float>();
  float* dst = y.data_as<float>();
  const int64_t ldx = x.stride(0), ldy = y.stride(0);
  const float* g = gamma.data_as<float>();
  const float* b = beta.data_as<float>();
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows* cols))
  for (int64_t i = 0; i < rows; ++i) layer_norm_row(src + i * ldx, g, b, eps, cols, dst + i * ldy);
}

}  // namespace mmserve::kernels
