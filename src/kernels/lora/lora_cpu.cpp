// LoRA deltas on the CPU (see lora.h).
#include <algorithm>
#include <vector>

#include "kernels/common/parallel.h"
#include "kernels/lora/lora.h"

namespace mmserve::kernels {

namespace {

// One row's delta: y += (B (A x)) * scale, the rank values in f32 between the products (PEFT's order).
void apply_row(const float* xr, const LoraSegmentWeights& ws, int64_t in, int64_t out, float* yr) {
  std::vector<float> t(static_cast<size_t>(ws.rank));
  for (int64_t j = 0; j < ws.rank; ++j) {
    const float* aj = ws.a + j * in;
    float acc = 0;
    for (int64_t c = 0; c < in; ++c) acc += aj[c] * xr[c];
    t[j] = acc;
  }
  for (int64_t o = 0; o < out; ++o) {
    const float* bo = ws.b + o * ws.rank;
    float acc = 0;
    for (int64_t j = 0; j < ws.rank; ++j) acc += bo[j] * t[j];
    yr[o] += acc * ws.scale;
  }
}

}  // namespace

void lora_bgmv(const float* x, int64_t x_ld, int64_t rows, const int32_t* row_slot, const LoraSegmentWeights* slots,
               int64_t in, int64_t out, float* y, int64_t y_ld) {
  for (int64_t r = 0; r < rows; ++r) {
    if (row_slot[r] < 0 || slots[row_slot[r]].rank <= 0) continue;
    apply_row(x + r * x_ld, slots[row_slot[r]], in, out, y + r * y_ld);
  }
}

void lora_sgmv(const float* x, int64_t x_ld, const int32_t* seg_start, int64_t segs, const LoraSegmentWeights* w,
               int64_t in, int64_t out, float* y, int64_t y_ld) {
  for (int64_t s = 0; s < segs; ++s) {
    const LoraSegmentWeights& ws = w[s];
    const int64_t first = seg_start[s], rows = seg_start[s + 1] - first;
    if (ws.rank <= 0 || rows <= 0) continue;
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows * ws.rank * (in + out)))
    for (int64_t r = first; r < first + rows; ++r) apply_row(x + r * x_ld, ws, in, out, y + r * y_ld);
  }
}

}  // namespace mmserve::kernels
