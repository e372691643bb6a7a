// RMS norm on the GPU: the CUDA twin of rms_norm(const RmsNormArgs&) in rms_norm.h (same contract: x in f32, f16 or
// bf16 with row stride x_ld; weight [cols] and y in y_dtype; `segments` groups of `cols` per row normalised
// independently; y may alias x when dtypes and strides match; statistic in f32, y rounded once at the end).
// Pointers are device pointers; launches only (no allocation, no sync), so it can be captured into a CUDA graph.
// Tests: rms_norm_cuda_test.cpp; bench: rms_norm_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/rms_norm/rms_norm.h"

namespace mmserve::kernels {

Status rms_norm_cuda(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
