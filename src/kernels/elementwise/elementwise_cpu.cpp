// Element-wise glue on CPU: add (residuals outside a GEMM), add_row (position embeddings) and gather_rows
// (pooling the class or EOS token). Memory-bound loops, split over OpenMP threads when large enough.
//
// Tests: elementwise_test.cpp (vs plain loops, aliasing, strided rows, bad index aborts); bench:
// elementwise_bench.cpp.
#include <algorithm>
#include <string>

#include "kernels/common/parallel.h"
#include "kernels/elementwise/elementwise.h"

namespace mmserve::kernels {
namespace {

void check_rows_view(const Tensor& t, const char* what) {
  MMSERVE_CHECK(t.dtype() == DType::kF32, std::string(what) + ": f32 only");
  MMSERVE_CHECK(t.dims() == 2 && t.stride(1) == 1, std::string(what) + ": [rows, cols] with contiguous rows");
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  MMSERVE_CHECK(a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && y.dtype() == DType::kF32, "add: f32 only");
  MMSERVE_CHECK(a.shape() == b.shape() && a.shape() == y.shape(), "add: shapes differ");
  MMSERVE_CHECK(a.is_contiguous() && b.is_contiguous() && y.is_contiguous(), "add: contiguous tensors only");
  const int64_t n = a.numel();
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  float* py = y.data_as<float>();
#pragma omp parallel for simd schedule(static) num_threads(parallel_threads(n))
  for (int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
}

void add_row(const Tensor& x, const Tensor& row, Tensor& y) {
  check_rows_view(x, "add_row");
  check_rows_view(y, "add_row");
  const int64_t rows = x.size(0), cols = x.size(1);
  MMSERVE_CHECK(y.size(0) == rows && y.size(1) == cols, "add_row: y is " + y.shape_string());
  MMSERVE_CHECK(row.dtype() == DType::kF32 && row.numel() == cols && row.is_contiguous(),
                "add_row: row must be [cols] f32");
  const float* px = x.data_as<float>();
  const float* pr = row.data_as<float>();
  float* py = y.data_as<float>();
  const int64_t ldx = x.stride(0), ldy = y.stride(0);
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows* cols))
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = px + i * ldx;
    float* dst = py + i * ldy;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) dst[j] = src[j] + pr[j];
  }
}

void gather_rows(const Tensor& x, const int64_t* indices, int64_t n, Tensor& y) {
  check_rows_view(x, "gather_rows");
  check_rows_view(y, "gather_rows");
  const int64_t rows = x.size(0), cols = x.size(1);
  MMSERVE_CHECK(y.size(0) == n && y.size(1) == cols, "gather_rows: y is " + y.shape_string());
  for (int64_t i = 0; i < n; ++i) {
    MMSERVE_CHECK(indices[i] >= 0 && indices[i] < rows,
                  "gather_rows: index " + std::to_string(indices[i]) + " outside [0, " + std::to_string(rows) + ")");
  }
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* src = px + indices[i] * x.stride(0);
    std::copy(src, src + cols, py + i * y.stride(0));
  }
}

}  // namespace mmserve::kernels
