// SAM's mask post-processing on the GPU (the CUDA twin of mask_resize.h, bit-identical to it): device logits
// [k, in_h, in_w] f32 -> device bytes [k, out_h, out_w], one thread per output pixel, the taps of all four
// interpolations recomputed per thread with the CPU twin's float32 operations (no tables to upload, so any
// geometry runs without a host round trip). Tests: mask_resize_cuda_test.cpp; bench: mask_resize_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/mask_resize/mask_resize.h"

namespace mmserve::kernels {

// kInvalidArgument for an invalid shape or null pointers (nothing launched).
Status mask_resize_threshold_cuda(const float* logits, const MaskResizeShape& s, float threshold, uint8_t* out,
                                  cudaStream_t stream);

}  // namespace mmserve::kernels
