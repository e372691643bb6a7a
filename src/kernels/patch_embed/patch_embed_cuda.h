// ViT patch embedding on the GPU, as im2col + GEMM (the CUDA twin of patch_embed.h).
//
// im2col_patches_cuda: pixels f32 [batch, channels, size, size] -> patches [batch * P, channels * p * p] in
// `dtype` (f32, f16 or bf16), P = (size / p)^2 patches in row-major order over the patch grid, the columns
// of a patch in the conv weight's order (channel, then row ky, then column kx), so that
// patches @ conv_weight.reshape(hidden, -1)^T is the stride-p convolution. size % p == 0 is required.
// assemble_vision_embeddings_cuda: x [batch * (P + 1), hidden] f32 with
//   x[b * (P+1), :] = class_embedding + positions[0, :]
//   x[b * (P+1) + 1 + i, :] = patch_out[b * P + i, :] + positions[1 + i, :]
// patch_out is f32 [batch * P, hidden] (the GEMM's output); class_embedding [hidden] and positions
// [P + 1, hidden] are in `dtype`.
// Tests: patch_embed_cuda_test.cpp; bench: patch_embed_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

Status im2col_patches_cuda(const float* pixels, int64_t batch, int64_t channels, int64_t size, int64_t patch,
                           void* patches, DType dtype, cudaStream_t stream);

Status assemble_vision_embeddings_cuda(const float* patch_out, const void* class_embedding, const void* positions,
                                       DType dtype, int64_t batch, int64_t patches, int64_t hidden, float* x,
                                       cudaStream_t stream);

}  // namespace mmserve::kernels
