// Softmax over the last dimension on CPU: max-subtracted, with the branch-free exp so each row vectorises.
//
// Three passes per row (max; exp and sum; scale), all over data already in L1. A row whose maximum is -inf
// is fully masked and becomes zeros instead of 0/0. Rows run in parallel. attention() calls softmax_row
// on the visible part of each score row.
// Tests: softmax_test.cpp (vs double, -inf entries, fully masked rows, large logits); bench:
// softmax_bench.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"
#include "kernels/softmax/softmax.h"

namespace mmserve::kernels {

MMSERVE_CPU_CLONES
void softmax_row(float* row, int64_t cols) {
  if (cols <= 0) return;
  float max_value = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_value)
  for (int64_t j = 0; j < cols; ++j) max_value = std::max(max_value, row[j]);
  if (max_value == -std::numeric_limits<float>::infinity()) {
    std::fill(row, row + cols, 0.0f);
    return;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j) {
    const float e = cpu::exp_f32(row[j] - max_value);
    row[j] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) row[j] *= inv_sum;
}

MMSERVE_CPU_CLONES
float log_sum_exp(const float* row, int64_t cols) {
  float max_value = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_value)
  for (int64_t j = 0; j < cols; ++j) max_value = std::max(max_value, row[j]);
  // All -inf (or empty): the sum is 0 and its log -inf; +inf: inf - inf would be NaN below.
  if (std::isinf(max_value)) return max_value;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j) sum += cpu::exp_f32(row[j] - max_value);
  return std::log(sum) + max_value;
}

void softmax_rows(Tensor& x) {
  MMSERVE_CHECK(x.dtype() == DType::kF32, "softmax_rows: f32 only");
  MMSERVE_CHECK(x.dims() >= 1 && x.is_contiguous(), "softmax_rows: contiguous tensor expected");
  const int64_t cols = x.size(-1);
  if (cols == 0) return;
  const int64_t rows = x.numel() / cols;
  float* data = x.data_as<float>();
#pragma omp parallel for schedule(static) num_threads(parallel_threads(x.numel()))
  for (int64_t i = 0; i < rows; ++i) softmax_row(data + i * cols, cols);
}

}  // namespace mmserve::kernels
