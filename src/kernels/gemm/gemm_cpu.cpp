// GEMM and Linear on CPU: the output is cut into one block per OpenMP thread, each block is one
// single-threaded OpenBLAS sgemm followed, for linear(), by the bias + activation epilogue on that block.
//
// nn.Linear keeps w as [n, k], so y = x @ w^T is sgemm(NoTrans, Trans) straight from the weights with no
// transposed copy; a residual add is the same call with beta = 1. Why OpenMP blocks instead of OpenBLAS's
// own threads: one thread pool for all kernels (see common/parallel.cpp), and the epilogue runs on a block
// the same thread has just written, while it is still in its cache. The block grid (rows x cols of
// threads) minimises the operand panels each thread packs, m/tm + n/tn; column cuts fall on multiples of
// 16 floats so that two threads never write the same cache line. The argument checks are cheap and guard
// against what BLAS would otherwise report through xerbla (a printf) and carry on from.
// Tests: gemm_test.cpp (odd shapes, strided x and y, accumulate, epilogues, all four transposes, thread
// counts, vs naive double loops); bench: gemm_bench.cpp (CLIP ViT-B/32 shapes, GFLOP/s).
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kernels/activation/epilogue.h"
#include "kernels/common/parallel.h"
#include "kernels/gemm/gemm.h"

namespace mmserve::kernels {
namespace {

constexpr int64_t kColumnAlign = 16;                    // floats per 64-byte cache line
constexpr int64_t kMinMultiplyAddsPerThread = 1 << 18;  // ~20 us of sgemm: below, a thread is not worth it

struct Grid {
  int rows = 1, cols = 1;
};

// tm x tn == threads, minimising the per-thread panel sizes m/tm + n/tn.
Grid choose_grid(int64_t m, int64_t n, int threads) {
  Grid best{1, threads};
  double best_cost = -1.0;
  const int64_t column_units = (n + kColumnAlign - 1) / kColumnAlign;
  for (int tm = 1; tm <= threads; ++tm) {
    if (threads % tm != 0) continue;
    const int tn = threads / tm;
    if (tm > m || tn > column_units) continue;  // would leave threads without work
    const double cost = static_cast<double>(m) / tm + static_cast<double>(n) / tn;
    if (best_cost < 0.0 || cost < best_cost) {
      best_cost = cost;
      best = {tm, tn};
    }
  }
  if (best_cost < 0.0) best = {1, 1};  // tiny problem with an awkward thread count
  return best;
}

// [begin, end) of part `index` of `parts` near-equal parts of `units` units of `unit` elements, clipped
// to `total`.
void split(int64_t total, int64_t unit, int parts, int index, int64_t* begin, int64_t* end) {
  const int64_t units = (total + unit - 1) / unit;
  *begin = std::min(total, units * index / parts * unit);
  *end = std::min(total, units * (index + 1) / parts * unit);
}

// C = alpha * op(A) op(B) + beta * C by blocks, one per OpenMP thread; after its sgemm each thread calls
// epilogue(row_begin, row_end, col_begin, col_end) on its own block.
template <typename Epilogue>
void blocked_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                   const Epilogue& epilogue) {
  use_single_threaded_blas();
  const int64_t work = m * n * k;
  const int wanted = static_cast<int>(std::clamp<int64_t>(work / kMinMultiplyAddsPerThread, 1, cpu_threads()));
#pragma omp parallel num_threads(wanted)
  {
    const int threads = omp_get_num_threads();  // may be fewer than wanted (nested, limits)
    const Grid grid = choose_grid(m, n, threads);
    const int t = omp_get_thread_num();
    if (t < grid.rows * grid.cols) {
      int64_t row_begin, row_end, col_begin, col_end;
      split(m, 1, grid.rows, t / grid.cols, &row_begin, &row_end);
      split(n, kColumnAlign, grid.cols, t % grid.cols, &col_begin, &col_end);
      if (row_end > row_begin && col_end > col_begin) {
        const float* a_block = trans_a ? a + row_begin : a + row_begin * lda;
        const float* b_block = trans_b ? b + col_begin * ldb : b + col_begin;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(row_end - row_begin), static_cast<blasint>(col_end - col_begin),
                    static_cast<blasint>(k), alpha, a_block, static_cast<blasint>(lda), b_block,
                    static_cast<blasint>(ldb), beta, c + row_begin * ldc + col_begin, static_cast<blasint>(ldc));
        epilogue(row_begin, row_end, col_begin, col_end);
      }
    }
  }
}

// BLAS semantics when there is no product (k == 0 or alpha == 0): C = beta * C, and beta == 0 overwrites
// (C may hold garbage, even NaN).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  MMSERVE_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative size");
  if (m == 0 || n == 0) return;
  MMSERVE_CHECK(ldc >= n, "gemm: ldc < n");
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  MMSERVE_CHECK(lda >= (trans_a ? m : k), "gemm: lda too small");
  MMSERVE_CHECK(ldb >= (trans_b ? k : n), "gemm: ldb too small");
  blocked_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                [](int64_t, int64_t, int64_t, int64_t) {});
}

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, Activation act, bool accumulate) {
  MMSERVE_CHECK(x.dtype() == DType::kF32 && w.dtype() == DType::kF32 && y.dtype() == DType::kF32, "linear: f32 only");
  MMSERVE_CHECK(x.dims() == 2 && w.dims() == 2 && y.dims() == 2, "linear: x, w and y must be 2-D");
  MMSERVE_CHECK(x.stride(1) == 1 && y.stride(1) == 1, "linear: rows of x and y must be contiguous");
  MMSERVE_CHECK(w.is_contiguous(), "linear: w must be contiguous");
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  MMSERVE_CHECK(w.size(1) == k, "linear: w is " + w.shape_string() + " for x " + x.shape_string());
  MMSERVE_CHECK(y.size(0) == m && y.size(1) == n, "linear: y is " + y.shape_string());
  MMSERVE_CHECK(!accumulate || act == Activation::kNone, "linear: accumulate with an activation");
  const float* bias_data = nullptr;
  if (bias != nullptr) {
    MMSERVE_CHECK(bias->dtype() == DType::kF32 && bias->numel() == n && bias->is_contiguous(),
                  "linear: bias must be [n] f32");
    bias_data = bias->data_as<float>();
  }
  if (m == 0 || n == 0) return;
  // A single row may carry any stride; BLAS still wants lda >= k and ldc >= n.
  const int64_t lda = m == 1 ? std::max<int64_t>(x.stride(0), std::max<int64_t>(k, 1)) : x.stride(0);
  const int64_t ldy = m == 1 ? std::max<int64_t>(y.stride(0), n) : y.stride(0);
  MMSERVE_CHECK(lda >= k && ldy >= n, "linear: row strides smaller than the rows");
  float* out = y.data_as<float>();
  const float beta = accumulate ? 1.0f : 0.0f;
  if (k == 0) {
    scale_c(m, n, beta, out, ldy);
    bias_activation_rows(out, m, n, ldy, bias_data, act);
    return;
  }
  blocked_sgemm(false, true, m, n, k, 1.0f, x.data_as<float>(), lda, w.data_as<float>(), k, beta, out, ldy,
                [&](int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
                  bias_activation_rows(out + row_begin * ldy + col_begin, row_end - row_begin, col_end - col_begin, ldy,
                                       bias_data ? bias_data + col_begin : nullptr, act);
                });
}

}  // namespace mmserve::kernels
