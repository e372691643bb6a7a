// Row-wise L2 normalisation on the GPU, in place (the CUDA twin of l2_normalize.h): x[r] /= ||x[r]||_2,
// f32 [rows, cols] contiguous; a zero row stays zero (as the CPU twin).
// Tests: l2_normalize_cuda_test.cpp; bench: l2_normalize_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace mmserve::kernels {

Status l2_normalize_rows_cuda(float* x, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace mmserve::kernels
