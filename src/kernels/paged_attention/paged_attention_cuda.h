// Paged attention and the paged KV write on the GPU: the CUDA twins of paged_attention.h (contract there).
//
// Every call is CUDA-graph capturable: no allocation, no host synchronisation, no host read of device data.
// Grids are sized from the host-side bounds (num_seqs, num_tokens, max_seq_len, max_query_len); lengths,
// query offsets and block tables are read on the device, and blocks with no work exit at once. Paths:
//  - one-token queries (q_len_b == 1), head_dim 64 or 128, heads / kv_heads in {1, 2, 4, 8}, 16-byte
//    aligned caches: split-K flash-decoding. One CTA per (sequence, kv head, partition of up to 512 keys)
//    holds the group's query heads in registers and reads each K and V row of its keys once for all of
//    them (16-byte loads); partials (max, sum, unnormalised output) go to the workspace and the partition that
//    finishes last combines them (one launch). A sequence whose visible keys fit one partition is written directly.
//  - longer queries (q_len_b > 1), f16/bf16, head_dim 64 or 128: causal FlashAttention-2 over pages on tensor
//    cores (mma.sync m16n8k16; paged_attention_mma.cu). One CTA per (64-query tile, sequence, head); key tiles
//    of 64 gathered through the block table by cp.async; tiles hidden by causality or the window are skipped.
//  - anything else (f32 prefill, other head_dims up to 256, other group sizes): a plain kernel, one warp per
//    (query row, head), online softmax over the visible keys.
// FP8 pools (kv_storage kFp8E4M3 / kFp8E5M2, f16/bf16 activations) take the same paths: codes are converted
// exactly to f32 (decode, plain) or to the activation type on their way into shared memory (the tensor-core
// prefill), and the scales, read on the device, multiply the scores and the output (graph-safe: a replay reads
// the scale buffers as they are then).
// Tests: paged_attention_cuda_test.cpp; bench: paged_attention_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/status.h"
#include "kernels/paged_attention/paged_attention.h"

namespace mmserve::kernels {

// Bytes of workspace paged_attention_cuda() needs. Depends on host-side fields only (num_seqs, heads, kv_heads,
// head_dim, max_seq_len): call it once with the upper bounds of a CUDA-graph bucket and keep the buffer for every
// replay of that bucket. Zero the buffer once before its first use (cudaMemset): it ends with completion counters
// that every call leaves at zero again.
size_t paged_attention_cuda_workspace_bytes(const PagedAttentionArgs& args);

// Device pointers (q, caches, out, the int32 arrays, workspace). Enqueues on `stream`. kInvalidArgument for bad
// arguments (paged_attention_validate, a workspace smaller than paged_attention_cuda_workspace_bytes or not
// 16-byte aligned), kUnimplemented for head_dim > 256. The data are not checked (the scheduler's tables are
// trusted; paged_attention_cpu checks them).
Status paged_attention_cuda(const PagedAttentionArgs& args, cudaStream_t stream);

// Device pointers (k_scale / v_scale too). Slots < 0 are skipped; so are slots >= num_slots (the device cannot
// report them: the twin refuses them with kInvalidArgument). Copies bits for a kSame pool and quantises as
// fp8_quantize for an FP8 one, so it equals paged_kv_write_cpu bit for bit either way.
Status paged_kv_write_cuda(const PagedKvWriteArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
