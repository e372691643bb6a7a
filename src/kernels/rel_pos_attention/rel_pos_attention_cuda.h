// The CUDA twin of rel_pos_attention.h (contract there): SAM's ViT attention with its decomposed relative position
// bias, flash-style (scores never reach global memory).
//
// Two launches: (1) the bias projections rel_h | rel_w of every (sequence, head, query) into args.bias (f32, a CUDA-
// core dot product per entry: tokens * (height + width) * head_dim per head, small next to the attention); (2) the
// attention, which stages its query rows' bias rows in shared memory and adds rel_h[ky] + rel_w[kx] to each score
// before the online softmax. f16/bf16 with head_dim <= 128 take the tensor-core kernel (mma.sync m16n8k16, K/V tiles of
// 64 keys through shared memory, as attention_kv_mma.cu); f32 (and rel_pos_attention_cuda_simt, the tests' second
// path) take a CUDA-core kernel, one query row per thread. Softmax in f32 everywhere. Capturable in a CUDA graph.
// Limits: head_dim <= 128.
// Tests: rel_pos_attention_cuda_test.cpp (both paths against the CPU twin over odd shapes).
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/rel_pos_attention/rel_pos_attention.h"

namespace mmserve::kernels {

// Device pointers. kInvalidArgument for bad arguments, kUnimplemented for head_dim > 128.
Status rel_pos_attention_cuda(const RelPosAttentionArgs& args, cudaStream_t stream);
// The CUDA-core kernel whatever the dtype (tests, benches).
Status rel_pos_attention_cuda_simt(const RelPosAttentionArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
