// The W4A16 GEMM on Hopper (issue 17, item 2): y[m][n] = sum_c x[m][c] * W[n][c], x and y row-major in bf16 or f16,
// W the 4-bit weight packed by w4a16_pack (w4a16.h: layout, rounding), f32 accumulation. The CPU twin is
// w4a16_gemm_cpu.
//
//   m <= 64 (decode): one launch of a tensor-core kernel that streams the packed weight from global memory exactly
//     once (one warp a 16-row strip, chunks of 256 columns copied three ahead by cp.async into a shared-memory ring
//     while the current one is computed), turns it in registers into mma.sync.m16n8k16 A fragments
//     of q - zero (the magic-number trick, w4a16_layout.h), multiplies by x's chunks held in shared memory (the B
//     operand, ldmatrix; x gathered by perm there for act-order) into f32 sums per group, and scales each group's
//     sums once into the accumulators (w4a16.h: rounding). Split-K: the columns are cut into `splits` ranges so that small n still fills
//     every SM; each split writes f32 partials into the workspace and counts its arrival on its column block's
//     counter; the last to arrive sums the block's partials in split order, rounds to the dtype, writes y and
//     puts the counter back to zero (one launch; before 2026-12-07 a second reduce launch). One split writes y
//     directly. The launch uses programmatic dependent launch (cuda_pdl.cuh): the weight loads start before the
//     wait.
//   m > 64 (prefill): the weight is dequantised into the workspace as a [n, k] matrix of the dtype (columns in the
//     packed order), x gathered by perm into the workspace when act-order, and the product goes to cuBLASLt through
//     `gemm` (gemm_cuda.h). Its weights are the dequantised ones rounded to the dtype, so it agrees with the twin
//     to that rounding (and cuBLASLt's summation).
//
// Nothing allocates, synchronises or reads device memory on the host: a call can be captured in a CUDA graph (the
// cuBLASLt path's first call of a shape runs cuBLASLt's heuristic on the host, so warm it up before capturing).
// Contract: x is [m, k] contiguous and 16-byte aligned, y [m, n] contiguous (in the dtype, or f32: W4A16Output),
// dtype == the packing's dtype, the
// workspace 256-byte aligned with at least w4a16_workspace_bytes(m, w, split_k) bytes whose first
// kW4A16WorkspaceZeroBytes are zero before its first use (cudaMemset once where it is allocated: the split-K
// counters; every call leaves them zero, a call that failed on the device may not); m > 64 needs `gemm`.
// split_k: 0 picks the split count from the shape and the SM count; > 0 forces it (tests and the bench), capped
// by the number of 256-column chunks.
// Tests: w4a16_cuda_test.cpp (against the CPU twin over odd shapes, both dtypes, every group size, act-order,
// m = 1..64 and above, forced splits, graph capture, refusals); bench: w4a16_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cuda/device_memory.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/w4a16/w4a16.h"

namespace mmserve::kernels {

class CublasLtGemm;

// Device pointers of a packed weight (the arrays of W4A16Packed).
struct W4A16Device {
  int64_t n = 0, k = 0, group_size = 0, groups = 0;
  DType dtype = DType::kBF16;
  const uint32_t* q = nullptr;
  const uint16_t* sz = nullptr;
  const int32_t* perm = nullptr;  // null: no act-order
};

// A packed weight on the device in one allocation.
struct W4A16Buffers {
  DeviceArena arena;
  W4A16Device view;
};

inline constexpr int64_t kW4A16MmaMaxRows = 64;  // m above this takes the dequantise + cuBLASLt path
inline constexpr int kW4A16MaxSplits = 16;
// The split-K arrival counters at the workspace's start: one per 64-column block (n up to 262144 splits).
inline constexpr int64_t kW4A16Counters = 4096;
inline constexpr size_t kW4A16WorkspaceZeroBytes = kW4A16Counters * 4;

// Bytes the arrays of `w` take on the device (each 256-byte aligned), for callers that place weights in their own
// arena with w4a16_upload_into.
size_t w4a16_device_bytes(const W4A16Packed& w);
StatusOr<W4A16Device> w4a16_upload_into(const W4A16Packed& w, DeviceArena& arena);
StatusOr<std::unique_ptr<W4A16Buffers>> w4a16_upload(const W4A16Packed& w);

// Workspace for one call: the counters (kW4A16WorkspaceZeroBytes, zeroed once), then at m <= 64 the f32 partials of
// the largest split count the call may take (nothing at all when that is 1), at m > 64 the dequantised weight
// (n * k 16-bit values) and, with act-order, the gathered x (m * k).
size_t w4a16_workspace_bytes(int64_t m, const W4A16Device& w, int split_k = 0);

// How y is written, for the decoder's projections: o and down add into the f32 residual stream (f32, accumulate),
// qkv may carry a bias. y = x · W^T + bias (+ y's previous value when accumulating), rounded once to y's dtype.
struct W4A16Output {
  bool f32 = false;            // y in f32 instead of the input dtype
  bool accumulate = false;     // y += ... (cuBLASLt's beta = 1)
  const void* bias = nullptr;  // [n] in y's dtype, or null
};

Status w4a16_gemm_cuda(const void* x, DType dtype, int64_t m, const W4A16Device& w, void* y, void* workspace,
                       size_t workspace_bytes, CublasLtGemm* gemm, cudaStream_t stream, const W4A16Output& out = {},
                       int split_k = 0);

// The dequantised weight [n][k] in `w.dtype`, columns in the packed order (the prefill path's first step; bit-equal
// to w4a16_dequantize_cpu(packed, true)).
Status w4a16_dequantize_cuda(const W4A16Device& w, void* out, cudaStream_t stream);

}  // namespace mmserve::kernels
