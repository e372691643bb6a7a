// im2col for a 1-D convolution on the GPU: the CUDA version of conv1d/im2col_1d.h (contract there). One
// thread per output element, one grid row per output row with consecutive threads along it (coalesced
// writes); reads go through L1/L2 (each input element is read `kernel` times). Graph capturable.
// Tests: im2col_1d_cuda_test.cpp; bench: im2col_1d_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/conv1d/im2col_1d.h"

namespace mmserve::kernels {

Status im2col_1d_cuda(const Im2col1dArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
