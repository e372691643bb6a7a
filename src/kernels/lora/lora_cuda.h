// LoRA deltas on the GPU (issue 16): every row (token) of a step under its own adapter slot, for up to three linears
// that read the same input (q, k and v; gate and up) in one pair of launches:
//
//   lora_apply_cuda: for every target i < num_targets and row r with slot s = row_slot[r] >= 0 and rank
//                    k = target[i].ranks[s * param_stride] > 0: t = A_s x[r] (k values, f32: the shrink), then
//                    target[i].y[r * y_ld + o] += (B_s t)[o] * target[i].scales[s * param_stride] (the expand) for
//                    o < target[i].out (times row_weight[r] when given). A_s [r_max, in] at a + s * a_slot_stride and
//                    B_s [out, r_max] at b + s * b_slot_stride (row-major, `dtype`), only their first k rows / columns
//                    read: ranks mix without padding the work to r_max. Rows with slot -1 (and slots of rank 0) are
//                    untouched. The CPU twin is lora.h's lora_bgmv, once per target.
//
// Why one launch pair per group and split-K: at decode a linear's delta is two tiny products per row (16 x 4096 and
// 4096 x 16), so a launch per product and per linear (14 per layer) cost more in launch gaps than in bytes. The shrink
// splits `in` into 512-wide chunks (a CTA per chunk, row and 8 rank indices; partial sums into the workspace, no
// atomics, nothing to zero), the expand sums the partials of its row once into shared memory and writes every
// target's columns. Both start under programmatic dependent launch (cuda_pdl.cuh) and read their adapter weights
// (immutable) before waiting for the kernel before them.
//
// Rows of a long step (prefill: rows > 64) are taken 8 at a time (the segmented form, SGMV): each A / B value is
// read once per distinct slot among the 8 rows rather than once per row, as a sequence's tokens share its adapter.
//
// Slots, ranks and scales are device arrays read at run time, so a step captured in a CUDA graph serves any mix of
// adapters. x in `dtype` (bf16, f16 or f32), y in y_dtype (f32 or `dtype`), f32 accumulation. Contract: r_max a
// multiple of 8 up to kLoraCudaMaxRank (B's rows are read 8 values at a time); 16-bit x needs in, x_ld and the slot
// strides multiples of 8 and 16-byte aligned x, A and B; the workspace holds lora_cuda_workspace_floats(...) floats.
// Tests: lora_cuda_test.cpp (against lora_bgmv over mixed ranks, empty slots, odd widths, every dtype, three targets
// into one row, the segmented path).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

inline constexpr int64_t kLoraCudaMaxRank = 256;
inline constexpr int kLoraCudaMaxTargets = 3;

struct LoraCudaTarget {
  const void* a = nullptr;
  int64_t a_slot_stride = 0;
  const void* b = nullptr;
  int64_t b_slot_stride = 0;
  const int32_t* ranks = nullptr;  // slot s's rank at ranks[s * param_stride]
  const float* scales = nullptr;
  int64_t out = 0;
  void* y = nullptr;  // row r's outputs at y + r * y_ld (a slice of a fused row: q | k | v)
};

struct LoraCudaArgs {
  const void* x = nullptr;
  int64_t x_ld = 0, rows = 0, in = 0;
  DType dtype = DType::kBF16;         // x, A and B
  const int32_t* row_slot = nullptr;  // [rows]
  const float* row_weight = nullptr;  // [rows]: each row's delta times its weight (gate routing's mix); null: 1
  int64_t param_stride = 1, r_max = 0;
  int num_targets = 1;
  LoraCudaTarget target[kLoraCudaMaxTargets];
  DType y_dtype = DType::kF32;
  int64_t y_ld = 0;
  float* workspace = nullptr;  // lora_cuda_workspace_floats(rows, in, r_max, num_targets) floats
  int64_t workspace_floats = 0;
};

// The shrink's partial sums: one per 512-wide chunk of `in`, row and rank index of every target.
int64_t lora_cuda_workspace_floats(int64_t rows, int64_t in, int64_t r_max, int num_targets);

Status lora_apply_cuda(const LoraCudaArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
