// GEMM and the Linear layer, through OpenBLAS's sgemm on CPU.
//
// Contract of linear(): x [m, k] f32 row-major (rows may be strided: x.stride(0) >= k), w [n, k] f32
// contiguous (PyTorch's nn.Linear weight layout, so no transpose copy is ever made), bias [n] f32 or
// nullptr, y [m, n] f32 row-major (y.stride(0) >= n). Computes
//   y = act(x @ w^T + bias)            when accumulate == false
//   y = y + (x @ w^T + bias)           when accumulate == true (residual add; act must be kNone)
// y must not alias x or w. gemm() is the raw BLAS-style entry point with leading dimensions.
// Tests: gemm_test.cpp (odd shapes, strided rows, epilogues vs a naive loop); bench: gemm_bench.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/activation/activation.h"

namespace mmserve::kernels {

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, Activation act = Activation::kNone,
            bool accumulate = false);

// C = alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X^T when trans_x.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Sets the number of threads the CPU kernels use (0 = leave the default, OpenMP's). GEMMs are split over
// that many OpenMP threads, each calling single-threaded OpenBLAS (two thread pools fight for the cores).
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace mmserve::kernels
