// RoPE on the GPU: the CUDA twin of apply_rope(const RopeArgs&) in rope.h (rotate_half form, in place on x in f32,
// f16 or bf16; `heads` heads of head_dim from x, so q and k of a fused QKV row are one call with heads = q_heads +
// kv_heads). positions (int32 [rows]) and inv_freq (f32 [head_dim / 2]) are device arrays, read by the kernel, so
// a captured CUDA graph replays with new positions. cos/sin of positions[r] * inv_freq[i] (the f32 product, as
// the twin) by sincosf with its full-range argument reduction, never the __sinf/__cosf intrinsics: positions
// reach 131072, where the intrinsics are off by ~1e-2. Launches only (no allocation, no sync).
// Tests: rope_cuda_test.cpp; bench: rope_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/rope/rope.h"

namespace mmserve::kernels {

Status apply_rope_cuda(const RopeArgs& args, cudaStream_t stream);

// apply_rope_cuda and paged_kv_write_cuda (paged_attention_cuda.h) in one launch, the decoders' per-layer pair:
// each block rotates its row's q and k in place, then copies the row's k (rotated) and v to slot_mapping[row]
// (a slot < 0 writes nowhere). kv.k and kv.v point into the rotated rows (the fused QKV row's k and v columns);
// kv.num_tokens == args.rows, same dtype. One launch per layer fewer; the CPU twin is apply_rope_and_cache (rope.h).
Status apply_rope_and_cache_cuda(const RopeArgs& args, const PagedKvWriteArgs& kv, cudaStream_t stream);

}  // namespace mmserve::kernels
