// LoRA deltas over a batch of sequences that each may use a different adapter (issue 16): the CPU twin of the
// GPU's segmented (SGMV, prefill) and gathered (BGMV, decode) kernels.
//
//   lora_sgmv: for every segment s (rows [seg_start[s], seg_start[s + 1]): one sequence's tokens of the step) whose
//              weights have rank > 0: y[r] += (B_s (A_s x[r])) * scale_s, with A_s [rank, in] and B_s [out, rank]
//              row-major. The order of PEFT's lora.Linear.forward (lora_B(lora_A(x)) * scaling, added to the base
//              layer's output), the shrink's rank values kept in f32 between the two products, as torch does.
//              Segments of rank 0 (no adapter, or the adapter leaves this linear alone) are untouched.
//   lora_bgmv: the same per row: row r under slots[row_slot[r]] (row_slot -1: none), the twin of the GPU's
//              lora_apply_cuda (lora_cuda.h), which gathers each row's adapter from device slots.
//
// Contract: f32 host buffers, rows strided by their ld; ranks mixed freely (nothing padded to the largest).
// Tests: lora_test.cpp (against the two products written out, mixed ranks, empty segments, rank 0).
#pragma once

#include <cstdint>

namespace mmserve::kernels {

struct LoraSegmentWeights {
  const float* a = nullptr;  // [rank, in]
  const float* b = nullptr;  // [out, rank]
  int64_t rank = 0;          // 0: no delta for this segment
  float scale = 0;
};

void lora_sgmv(const float* x, int64_t x_ld, const int32_t* seg_start, int64_t segs, const LoraSegmentWeights* w,
               int64_t in, int64_t out, float* y, int64_t y_ld);

void lora_bgmv(const float* x, int64_t x_ld, int64_t rows, const int32_t* row_slot, const LoraSegmentWeights* slots,
               int64_t in, int64_t out, float* y, int64_t y_ld);

}  // namespace mmserve::kernels
