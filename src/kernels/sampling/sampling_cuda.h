// Next-token selection on the GPU: the CUDA twin of sample_tokens (sampling.h), the same contract and the same
// tokens for the same logits, parameters and (seed, step) (up to float ties: see sampling.h for how exactness is
// kept). All pointers are device pointers, every per-row input (params, seen ids, their offsets) is read on the
// device, and the call only launches one kernel (a 1024-thread block per row; no allocation, no sync), so it
// can be captured into a CUDA graph and replayed with new parameters in device memory. With seen_offsets, the
// caller owns `scratch` ([rows, vocab] uint64, zeroed once; the kernel leaves it zeroed).
// Method (no sort): top-k and top-p cuts are found by a 4-digit radix select (8 bits a pass, 256-bin block
// histograms of counts or of the integer masses) over the order keys, then the cut among tokens tied at the
// threshold key is placed by token id with a block scan, exactly as the twin's sorted order places it; all sums
// are integer, so they are order-independent and identical to the twin's. The draw is a block scan in id order.
// Tests: sampling_cuda_test.cpp; bench: sampling_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/sampling/sampling.h"

namespace mmserve::kernels {

Status sample_tokens_cuda(const SamplingArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
