// KV-cache maintenance on the GPU: the CUDA versions of kv_cache.h (contracts there). Device pointers
// throughout (positions, src_index, scale included); everything is enqueued on `stream` without host
// synchronisation or allocation, so all three can be captured in a CUDA graph.
//  - kv_cache_append: one thread per 16-byte chunk (scalar when unaligned) of the n * width new elements.
//  - kv_cache_gather: a copy kernel reading the index on the device; in place via scratch (two copies).
//  - quantize_kv: a memset of scale, an absmax pass (atomicMax on the float bits, non-negative), a quantise
//    pass that derives the scale from the absmax, and a pass turning the absmax into the scale.
// Tests: kv_cache_cuda_test.cpp (bit for bit against the CPU twins); bench: kv_cache_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/kv_cache/kv_cache.h"

namespace mmserve::kernels {

Status kv_cache_append(const KvCacheAppendArgs& args, cudaStream_t stream);
Status kv_cache_gather(const KvCacheGatherArgs& args, cudaStream_t stream);
Status quantize_kv(const QuantizeKvArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
