// Token + position embeddings on the GPU (the CUDA twin of embedding.h for CLIP's text tower).
//
// x[b * seq + s, :] = table[ids[b * seq + s], :] + positions[s, :], written as f32 (the residual stream).
// ids: device int32 [batch * seq]; table [vocab, hidden] and positions [>= seq, hidden] in `dtype` (f32,
// f16 or bf16). An id outside [0, vocab) reads row 0 instead of memory it does not own (the host validates
// ids before launching; this is the second line of defence).
// Tests: embedding_cuda_test.cpp; bench: embedding_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

Status token_position_embedding_cuda(const int32_t* ids, int64_t batch, int64_t seq, const void* table,
                                     const void* positions, DType dtype, int64_t vocab, int64_t hidden, float* x,
                                     cudaStream_t stream);

}  // namespace mmserve::kernels
