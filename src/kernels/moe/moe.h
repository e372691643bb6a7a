// The routing half of a sparse mixture-of-experts MLP (Mixtral, issue 15): pick each token's experts, group the
// (token, expert) pairs by expert so that every expert runs one GEMM over its rows, and add the weighted expert
// outputs back to their tokens.
//
//   moe_route:   router logits [T, E] -> softmax in f32 over all E experts -> the top k (ties to the lower expert
//                id) -> their probabilities renormalised to sum to 1 (HF's MixtralSparseMoeBlock /
//                MixtralTopKRouter). ids and weights [T, k], in descending weight.
//   moe_plan:    the pairs grouped by expert: expert e's rows of the permuted matrix are [offsets[e], offsets[e+1]);
//                permuted row r holds token `pair[r] / k`'s copy for its slot `pair[r] % k`, tokens ascending
//                within an expert (a stable counting sort).
//   moe_permute: xp[r] = x[pair[r] / k] (the gather that makes each expert's rows contiguous).
//   moe_combine: out[t] = sum over t's slots, in ascending expert id, of weight * yp[row of the slot]: the
//                order of HF's loop over experts (each index_add_ on a zeroed output), so f32 results agree to
//                rounding. out is overwritten (the residual add is the caller's).
//
// Contract: f32 host buffers; 1 <= k <= min(E, kMoeMaxTopK); rows strided by their ld. The model calls these around its
// expert GEMMs (models/llama/llama.cpp); the CUDA twins come with the GPU Mixtral. Tests: moe_test.cpp (against plain
// loops, over odd expert counts, k, ties, and empty experts).
#pragma once

#include <cstdint>
#include <vector>

namespace mmserve::kernels {

inline constexpr int64_t kMoeMaxTopK = 64;  // num_experts_per_tok above this is refused at config parse

void moe_route(const float* logits, int64_t logits_ld, int64_t tokens, int64_t experts, int64_t k, int32_t* ids,
               float* weights);

struct MoePlan {
  int64_t tokens = 0, experts = 0, k = 0;
  std::vector<int32_t> offsets;  // [E + 1]
  std::vector<int32_t> pair;     // [T * k]: token * k + slot, grouped by expert
  std::vector<int32_t> row_of;   // [T * k]: the permuted row of (token, slot) (the inverse of pair)
  int64_t rows(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};

MoePlan moe_plan(const int32_t* ids, int64_t tokens, int64_t experts, int64_t k);

void moe_permute(const float* x, int64_t x_ld, const MoePlan& plan, int64_t cols, float* xp, int64_t xp_ld);

void moe_combine(const float* yp, int64_t yp_ld, const MoePlan& plan, const int32_t* ids, const float* weights,
                 int64_t cols, float* out, int64_t out_ld);

// The decode path's expert GEMV (no grouping, no host round trip: graph-capturable on the GPU): for every pair p,
// y[p] = W[ids[p]] @ x[p / x_div] where W[e] is [n, k] at w + e * w_stride (row-major) and x rows have stride
// x_ld: the (token, expert) pairs of a few tokens each through its expert's weights. f32 here (the CUDA twin takes
// 16-bit x and W and writes f32 or the input dtype).
void moe_gemv(const float* x, int64_t x_ld, int64_t x_div, const float* w, int64_t w_stride, const int32_t* ids,
              int64_t pairs, int64_t n, int64_t k, float* y, int64_t y_ld);

// The grouped expert GEMM (the twin of moe_grouped_gemm_cuda, which fuses the permute and SwiGLU): for every expert
// e and row r in [offsets[e], offsets[e + 1]), y[r] = a[r or a_rows[r] / a_div] @ W[e]^T with W[e] [n, k] at
// w + e * w_stride; with `swiglu`, W[e] is [2n, k] and y[r][j] = silu(gate_j) * up_j. Sums in double.
void moe_grouped_gemm(const float* a, int64_t lda, const int32_t* a_rows, int64_t a_div, const float* w,
                      int64_t w_stride, const int32_t* offsets, int64_t experts, int64_t n, int64_t k, bool swiglu,
                      float* y, int64_t ldy);

}  // namespace mmserve::kernels
