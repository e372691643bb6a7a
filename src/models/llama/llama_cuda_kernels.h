// Small kernels of LlamaCudaModel (llama_cuda.h), model-local: row gathers (the token embeddings into the f32
// residual stream; the logit rows of a step), the column sums of the router's input embedding, and the random
// weights of the shape benchmarks.
// Tests: tests/gpu/llama_cuda_test.cpp (through the model, against the CPU model and HF's logits).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::models {

// out[r, :] (f32, [rows, cols]) = src[index[r], :] (src in `dtype`, row stride src_ld); index is device int32; an
// index outside [0, src_rows) gives a row of zeros (the host checks ids first; this is the second defence).
Status gather_rows_f32(const void* src, DType dtype, int64_t src_rows, int64_t src_ld, const int32_t* index,
                       int64_t rows, int64_t cols, float* out, cudaStream_t stream);

// out[c] = (accumulate ? out[c] : 0) + scale * sum over r of x[r, c] (x f32 [rows, cols], device), rows summed in
// order in f32 (the CPU model's mean_input_embedding does the same).
Status column_sum_f32(const float* x, int64_t rows, int64_t cols, float scale, bool accumulate, float* out,
                      cudaStream_t stream);

// p[i] = scale * (a uniform in [-sqrt 3, sqrt 3) from a hash of (seed, i)) (unit variance times scale), or, with
// scale == 0, p[i] = value; in `dtype`.
Status fill_weights(void* p, DType dtype, int64_t n, uint64_t seed, float scale, float value, cudaStream_t stream);

}  // namespace mmserve::models
