// The CUDA twins of moe.h's routing kernels (Mixtral on the GPU, issue 15), device buffers on `stream`:
//
//   moe_route_cuda:   router logits f32 [T, E] (row stride logits_ld) -> ids int32 [T, k], weights f32 [T, k]: the
//                     softmax in f32, the top k (ties to the lower expert id), renormalised; one warp per token.
//   moe_plan_cuda:    ids -> offsets int32 [E + 1], pair int32 [T * k] and row_of int32 [T * k], the layout of
//                     MoePlan (tokens ascending within an expert: the same arrays as moe_plan, bit for bit).
//   moe_permute_cuda: xp[r] = x[pair[r] / k] (x and xp in `dtype`, [*, cols]).
//   moe_combine_cuda: out[t] (f32, row stride out_ld) = (accumulate ? out[t] : 0) + the sum over t's slots in ascending
//                     expert id of weight * yp[row_of[t * k + slot]] (yp f32 [T * k, cols]): moe_combine, plus the
//                     residual add when accumulating (the sum is formed first, then added, as the CPU path does).
//
//   moe_grouped_gemm_cuda: every expert's GEMM over its rows of the plan in one launch (moe_grouped_gemm_cuda.cu),
//                     the row counts read on the device: graph-capturable at any step size.
//
// Contract: 1 <= k <= min(E, kMoeMaxTopK), E <= kMoeCudaMaxExperts; T * k < 2^31. Arguments the host can check
// are kInvalidArgument before anything is launched.
// Tests: moe_cuda_test.cpp (against the CPU twins over odd expert counts, k, ties and empty experts).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

inline constexpr int64_t kMoeCudaMaxExperts = 256;

Status moe_route_cuda(const float* logits, int64_t logits_ld, int64_t tokens, int64_t experts, int64_t k, int32_t* ids,
                      float* weights, cudaStream_t stream);

Status moe_plan_cuda(const int32_t* ids, int64_t tokens, int64_t experts, int64_t k, int32_t* offsets, int32_t* pair,
                     int32_t* row_of, cudaStream_t stream);

Status moe_permute_cuda(const void* x, int64_t x_ld, DType dtype, const int32_t* pair, int64_t rows, int64_t k,
                        int64_t cols, void* xp, int64_t xp_ld, cudaStream_t stream);

// moe_gemv's twin: x and w in `dtype` (bf16 or f16), y in y_dtype (f32 or `dtype`); one warp per output column
// and pair, 16-byte loads (k % 8 == 0, x_ld % 8 == 0, x and w 16-byte aligned), f32 accumulation.
// pairs <= kMoeGemvMaxPairs.
inline constexpr int64_t kMoeGemvMaxPairs = 64;
Status moe_gemv_cuda(const void* x, int64_t x_ld, int64_t x_div, const void* w, int64_t w_stride, DType dtype,
                     const int32_t* ids, int64_t pairs, int64_t n, int64_t k, void* y, DType y_dtype, int64_t y_ld,
                     cudaStream_t stream);

// row_of may be null: the pairs are then in (token, slot) order (row t * k + slot), as moe_gemv_cuda leaves them.
Status moe_combine_cuda(const float* yp, int64_t yp_ld, const int32_t* row_of, const int32_t* ids, const float* weights,
                        int64_t tokens, int64_t k, int64_t cols, float* out, int64_t out_ld, bool accumulate,
                        cudaStream_t stream);

// The grouped expert GEMM (moe_grouped_gemm's twin): for every expert e and permuted row r in
// [offsets[e], offsets[e + 1]), y[r] = A's row (r, or a_rows[r] / a_div when a_rows is set: the permute fused into
// the load) times W[e]^T, W[e] = [n, k] row-major at w + e * w_stride. With `swiglu`, W[e] is [2n, k] (gate rows,
// then up rows) and y[r][j] = silu(g) * u of the row's gate and up outputs, each rounded to `dtype` first as an
// unfused GEMM's output would be. a, w in `dtype` (bf16 or f16), y in y_dtype (f32 or `dtype`); f32 accumulation.
// `rows` bounds offsets[experts] (the grid is sized from it, so a graph captured at `rows` serves every routing of
// that many pairs); `tile_map` is moe_tile_map_cuda's output for the same offsets, rows and block_m.
// Contract: k, lda and w_stride multiples of 8, a and w 16-byte aligned; 1..kMoeCudaMaxExperts experts;
// block_m 32, 64 or 128 (moe_grouped_gemm_block_m picks one for the rows per expert); at most 65535 tiles.
struct MoeGroupedGemmArgs {
  const void* a = nullptr;
  int64_t lda = 0;
  const int32_t* a_rows = nullptr;  // null: A is already permuted
  int64_t a_div = 1;
  const void* w = nullptr;
  int64_t w_stride = 0;
  DType dtype = DType::kBF16;
  const int32_t* offsets = nullptr;  // [experts + 1], device
  int64_t experts = 0, rows = 0, n = 0, k = 0;
  bool swiglu = false;
  void* y = nullptr;
  DType y_dtype = DType::kF32;
  int64_t ldy = 0;
  int64_t block_m = 64;
  const int32_t* tile_map = nullptr;  // [2 * moe_grouped_gemm_tiles(rows, experts, block_m)], device
};

int64_t moe_grouped_gemm_block_m(int64_t rows, int64_t experts);
int64_t moe_grouped_gemm_tiles(int64_t rows, int64_t experts, int64_t block_m);
// Writes tile_map from the plan's offsets: (expert, first row) per BM-row tile, expert -1 past the last.
Status moe_tile_map_cuda(const int32_t* offsets, int64_t rows, int64_t experts, int64_t block_m, int32_t* tile_map,
                         cudaStream_t stream);
Status moe_grouped_gemm_cuda(const MoeGroupedGemmArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
