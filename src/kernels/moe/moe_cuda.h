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

Status moe_combine_cuda(const float* yp, int64_t yp_ld, const int32_t* row_of, const int32_t* ids, const float* weights,
                        int64_t tokens, int64_t k, int64_t cols, float* out, int64_t out_ld, bool accumulate,
                        cudaStream_t stream);

}  // namespace mmserve::kernels
