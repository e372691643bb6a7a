// The CUDA twin of pixel_levels.h (bit-equal: a lookup, no arithmetic). `levels`, `table` and `out` on the device.
// Tests: pixel_levels_cuda_test.cpp; bench: pixel_levels_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace mmserve::kernels {

// kInvalidArgument for a bad shape or null pointers (nothing launched).
Status expand_pixel_levels_cuda(const uint8_t* levels, int64_t n, int64_t channels, int64_t plane, const float* table,
                                float* out, cudaStream_t stream);

}  // namespace mmserve::kernels
