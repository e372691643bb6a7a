// LoRA deltas on the GPU (issue 16): every row (token) of a step under its own adapter slot, gathered (BGMV):
//
//   lora_apply_cuda: for every row r with slot s = row_slot[r] >= 0 and rank k = ranks[s * param_stride] > 0:
//                    t = A_s x[r] (k values, f32: the shrink), then y[r][o] += (B_s t)[o] * scales[s * param_stride]
//                    (the expand) for o < out. A_s [r_max, in] at a + s * a_slot_stride and B_s [out, r_max] at
//                    b + s * b_slot_stride (row-major, `dtype`), only their first k rows / columns read: ranks mix
//                    without padding the work to r_max. Rows with slot -1 (and slots of rank 0) are untouched.
//                    The CPU twin is lora.h's lora_bgmv.
//
// Slots, ranks and scales are device arrays read at run time, so a step captured in a CUDA graph serves any mix of
// adapters. x in `dtype` (bf16, f16 or f32), y in y_dtype (f32 or `dtype`), f32 accumulation; `t` a workspace of
// rows * r_max floats. Contract: in % 8 == 0 for 16-bit x (16-byte loads), r_max <= kLoraCudaMaxRank.
// Tests: lora_cuda_test.cpp (against lora_bgmv over mixed ranks, empty slots, odd widths, every dtype).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

inline constexpr int64_t kLoraCudaMaxRank = 256;

struct LoraCudaArgs {
  const void* x = nullptr;
  int64_t x_ld = 0, rows = 0, in = 0;
  DType dtype = DType::kBF16;  // x, A and B
  const int32_t* row_slot = nullptr;  // [rows]
  const void* a = nullptr;
  int64_t a_slot_stride = 0;
  const void* b = nullptr;
  int64_t b_slot_stride = 0;
  const int32_t* ranks = nullptr;  // slot s's rank at ranks[s * param_stride]
  const float* scales = nullptr;
  int64_t param_stride = 1;
  int64_t r_max = 0, out = 0;
  float* t = nullptr;  // [rows, r_max]
  void* y = nullptr;
  DType y_dtype = DType::kF32;
  int64_t y_ld = 0;
};

Status lora_apply_cuda(const LoraCudaArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
