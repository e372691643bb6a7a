// Attention of q against separate K/V buffers on the GPU: the CUDA twin of attention_kv.h (contract there).
//
// Three paths, all CUDA-graph capturable (no host synchronisation, no allocation; kv_lengths, scales and
// every length that may change between replays are read on the device):
//  - q_len == 1 (decode step, memory bound): flash-decoding. Groups of lanes stream their own keys with
//    16-byte loads straight into registers (FP8/INT8 widened there), online softmax in registers. A KV
//    range longer than 512 keys is split into chunks over several CTAs per (batch, head) so that even
//    batch 1 x 20 heads fills the GPU; each CTA writes its partial (max, sum, unnormalised output) to the
//    caller's workspace and a second kernel combines them; a shorter one is one launch. The split count
//    depends on batch, heads and kv_len only, never on kv_lengths.
//  - f16/bf16, q_len > 1, head_dim <= 128: FlashAttention-2 on tensor cores (mma.sync m16n8k16): one CTA
//    per (batch, head, tile of query rows), K/V tiles of 64 keys streamed through shared memory
//    (double-buffered; compressed K/V dequantised to f16/bf16 on the way in), online softmax in f32.
//  - otherwise (f32, or head_dim > 128): a CUDA-core tiled kernel with the same online softmax.
// Limits: head_dim <= 256; dtype f32/f16/bf16.
// Tests: attention_kv_cuda_test.cpp; bench: attention_kv_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/status.h"
#include "kernels/attention/attention_kv.h"

namespace mmserve::kernels {

// Bytes of workspace attention_kv_cuda() needs for these shapes (0 unless q_len == 1 and the KV range is
// split). Depends on batch, heads, head_dim, q_len and kv_len only: size it once for the largest shapes
// (a captured graph keeps the same pointer).
size_t attention_kv_cuda_workspace_bytes(const AttentionKvArgs& args);

// True when attention_kv_cuda() takes these shapes; the reason otherwise comes from the call's Status.
bool attention_kv_cuda_supported(const AttentionKvArgs& args);

// Device pointers (q, k, v, out, k_scale, v_scale, kv_lengths, workspace). Enqueues on `stream`.
// kInvalidArgument for bad arguments (attention_kv_validate, or a workspace smaller than
// attention_kv_cuda_workspace_bytes), kUnimplemented for shapes it does not take.
Status attention_kv_cuda(const AttentionKvArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
