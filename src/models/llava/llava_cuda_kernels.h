// LLaVA's one model-local kernel on the GPU (llava_cuda.h): the vision feature selection, HF's
// hidden_states[layer][:, 1:] (or [:, :] under "full") written side by side for the projector's input.
// Tests: tests/gpu/llava_cuda_test.cpp (through the model, against HF's image features).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::models {

// out[(b * tokens + r) * out_ld + col + c] = x[(b * seq + skip + r) * cols + c] for b < batch, r < tokens = seq -
// skip, c < cols; x f32, out in `dtype`.
Status select_vision_features_cuda(const float* x, int64_t batch, int64_t seq, int64_t skip, int64_t cols, void* out,
                                   DType dtype, int64_t out_ld, int64_t col, cudaStream_t stream);

}  // namespace mmserve::models
