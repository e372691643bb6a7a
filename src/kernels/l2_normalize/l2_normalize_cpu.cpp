// Row-wise L2 normalisation on CPU. The sum of squares is accumulated in double, so rows of tiny or huge
// values (whose squares under- or overflow in f32) still normalise correctly; a zero row stays zero.
//
// Used once per request on the pooled embedding ([batch, 512]), so it is simple rather than clever.
// Tests: l2_normalize_test.cpp (vs double, zero rows, 1e-30 and 1e30 rows); bench: l2_normalize_bench.cpp.
#include <cmath>

#include "kernels/common/cpu_math.h"
#include "kernels/common/parallel.h"
#include "kernels/l2_normalize/l2_normalize.h"

namespace mmserve::kernels {
namespace {

MMSERVE_CPU_CLONES
void l2_normalize_row(float* x, int64_t cols) {
  double squares = 0.0;
#pragma omp simd reduction(+ : squares)
  for (int64_t j = 0; j < cols; ++j) squares += static_cast<double>(x[j]) * static_cast<double>(x[j]);
  if (squares == 0.0) return;
  const double inv_norm = 1.0 / std::sqrt(squares);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) x[j] = static_cast<float>(x[j] * inv_norm);
}

}  // namespace

void l2_normalize_rows(Tensor& x) {
  MMSERVE_CHECK(x.dtype() == DType::kF32, "l2_normalize_rows: f32 only");
  MMSERVE_CHECK(x.dims() == 2 && x.is_contiguous(), "l2_normalize_rows: x must be [rows, cols] contiguous");
  const int64_t rows = x.size(0), cols = x.size(1);
  float* data = x.data_as<float>();
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows* cols))
  for (int64_t i = 0; i < rows; ++i) l2_normalize_row(data + i * cols, cols);
}

}  // namespace mmserve::kernels
