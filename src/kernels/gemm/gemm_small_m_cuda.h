// f32 GEMMs with few rows (M <= 64) on CUDA cores, for CublasLtGemm::run (gemm_cuda.h has the contract:
// D[M, N] = alpha * A[M, K] @ W[N, K]^T + beta * D + bias[N], row-major).
//
// Why: for f32 with a handful of rows (SAM's prompt decoder: 8 tokens x 256 x 256) cuBLASLt's heuristic picks
// split-K kernels of 132-264 splits that take 32-53 us on an H200 (ncu, 2026-12-02) for what is one pass over a
// 256 KB weight. Here one warp computes one output column for every row: its lanes stream the column's weight
// row once (16-byte loads when aligned), each lane keeping a partial dot product per row in registers, then a
// butterfly reduction. Rows go in passes of 16 (the registers one lane keeps). ~2-4 us for those shapes: the
// weight is read once per pass, and A (at most 64 x K floats) stays in L1/L2.
// Accumulation is f32 like cuBLASLt's f32 path (no TF32); the summation order differs, within f32 rounding.
// Tests: gemm_cuda_test.cpp (SmallM cases, against the CPU GEMM); bench: gemm_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

struct GemmCudaArgs;

// The largest M (and smallest K) for which CublasLtGemm::run takes this path for f32 inputs and output.
constexpr int64_t kGemmSmallMMaxRows = 64;
constexpr int64_t kGemmSmallMMinK = 64;

// f32 in, f32 out; arguments already validated by CublasLtGemm::run. Enqueues one kernel on `stream`.
Status gemm_small_m_cuda(const GemmCudaArgs& args, cudaStream_t stream);

// 16-bit inputs (bf16, f16) with one row (kGemmSmallM16MaxRows), output the input dtype or f32: the decoders'
// batch-1 projections. cuBLASLt's heuristic takes split-K kernels there (two launches, 2.8-3.1 TB/s on the o and
// qkv projections of Llama-3-8B on an H200, ncu 2026-12-02); this is one launch streaming the weight once in
// 16-byte loads: Llama-3-8B batch-1 decode went from 209 to 217 tokens/s, Llama-3.2-1B from 818 to 882. The kernel
// takes up to 4 rows, but at 4 it ran at half cuBLASLt's speed (the A loads serialise behind the weight's), so only
// M = 1 is routed here until that is tuned. Needs K, lda, ldw multiples of 8 and 16-byte aligned A and W.
constexpr int64_t kGemmSmallM16MaxRows = 1;
constexpr int64_t kGemmSmallM16KernelRows = 4;
bool gemm_small_m16_applies(const GemmCudaArgs& args);
Status gemm_small_m16_cuda(const GemmCudaArgs& args, cudaStream_t stream);

// The decoders' batch-1 MLP up to the activation in one launch: y[j] = silu(g_j) * u_j for j < inter, with
// g_j = a . w[j] + bias[j] and u_j = a . w[inter + j] + bias[inter + j] (w the fused [2 * inter, k] gate/up
// weight, one row a). Equal to the bit to gemm_small_m16_cuda into a [1, 2 * inter] buffer followed by
// swiglu_cuda (the same loads and summation order; g and u rounded to the dtype as that buffer stores them), minus
// one launch and the buffer's round trip: Llama-3-8B's decode step has 32 of those pairs. bf16/f16 only; K and
// ldw multiples of 8, a and w 16-byte aligned (gemv16_swiglu_applies), bias (nullable) in the dtype.
struct GemvSwigluArgs {
  const void* a = nullptr;  // [k]
  const void* w = nullptr;  // [2 * inter, ldw]
  int64_t ldw = 0;
  const void* bias = nullptr;  // [2 * inter] or nullptr
  void* y = nullptr;           // [inter]
  int64_t inter = 0, k = 0;
  DType dtype = DType::kBF16;
};
bool gemv16_swiglu_applies(const GemvSwigluArgs& args);
Status gemv16_swiglu_cuda(const GemvSwigluArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
