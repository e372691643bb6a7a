// The MoE routing kernels on the CPU (see moe.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/common/parallel.h"
#include "kernels/moe/moe.h"

namespace mmserve::kernels {

void moe_route(const float* logits, int64_t logits_ld, int64_t tokens, int64_t experts, int64_t k, int32_t* ids,
               float* weights) {
  std::vector<float> probs(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits + t * logits_ld;
    // softmax in f32 (torch's: subtract the max, exp, divide by the sum)
    const float max = *std::max_element(l, l + experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < experts; ++e) sum += probs[e] = std::exp(l[e] - max);
    for (int64_t e = 0; e < experts; ++e) probs[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
    float top = 0.0f;
    for (int64_t j = 0; j < k; ++j) top += probs[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = probs[order[j]] / top;
    }
  }
}

MoePlan moe_plan(const int32_t* ids, int64_t tokens, int64_t experts, int64_t k) {
  MoePlan plan;
  plan.tokens = tokens, plan.experts = experts, plan.k = k;
  plan.offsets.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t i = 0; i < tokens * k; ++i) ++plan.offsets[ids[i] + 1];
  for (int64_t e = 0; e < experts; ++e) plan.offsets[e + 1] += plan.offsets[e];
  std::vector<int32_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  plan.pair.resize(static_cast<size_t>(tokens * k));
  plan.row_of.resize(plan.pair.size());
  for (int64_t i = 0; i < tokens * k; ++i) {  // i = token * k + slot: ascending tokens within each expert
    const int32_t row = next[ids[i]]++;
    plan.pair[row] = static_cast<int32_t>(i);
    plan.row_of[i] = row;
  }
  return plan;
}

void moe_permute(const float* x, int64_t x_ld, const MoePlan& plan, int64_t cols, float* xp, int64_t xp_ld) {
  const int64_t rows = plan.tokens * plan.k;
#pragma omp parallel for schedule(static) num_threads(parallel_threads(rows* cols))
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(xp + r * xp_ld, x + (plan.pair[r] / plan.k) * x_ld, static_cast<size_t>(cols) * sizeof(float));
  }
}

void moe_combine(const float* yp, int64_t yp_ld, const MoePlan& plan, const int32_t* ids, const float* weights,
                 int64_t cols, float* out, int64_t out_ld) {
  const int64_t k = plan.k;
#pragma omp parallel for schedule(static) num_threads(parallel_threads(plan.tokens* k* cols))
  for (int64_t t = 0; t < plan.tokens; ++t) {
    // the token's slots in ascending expert id (HF adds expert by expert)
    int32_t slots[kMoeMaxTopK];
    const int64_t n = std::min<int64_t>(k, kMoeMaxTopK);
    for (int64_t j = 0; j < n; ++j) slots[j] = static_cast<int32_t>(j);
    std::sort(slots, slots + n, [&](int32_t a, int32_t b) { return ids[t * k + a] < ids[t * k + b]; });
    float* o = out + t * out_ld;
    std::fill(o, o + cols, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float w = weights[t * k + slots[j]];
      const float* y = yp + plan.row_of[t * k + slots[j]] * yp_ld;
      for (int64_t c = 0; c < cols; ++c) o[c] += y[c] * w;
    }
  }
}

void moe_gemv(const float* x, int64_t x_ld, int64_t x_div, const float* w, int64_t w_stride, const int32_t* ids,
              int64_t pairs, int64_t n, int64_t k, float* y, int64_t y_ld) {
  for (int64_t p = 0; p < pairs; ++p) {
    const float* xr = x + (p / x_div) * x_ld;
    const float* we = w + ids[p] * w_stride;
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += double{xr[c]} * we[j * k + c];
      y[p * y_ld + j] = static_cast<float>(acc);
    }
  }
}

void moe_grouped_gemm(const float* a, int64_t lda, const int32_t* a_rows, int64_t a_div, const float* w,
                      int64_t w_stride, const int32_t* offsets, int64_t experts, int64_t n, int64_t k, bool swiglu,
                      float* y, int64_t ldy) {
  auto dot = [&](const float* x, const float* wr) {
    double acc = 0;
    for (int64_t c = 0; c < k; ++c) acc += double{x[c]} * wr[c];
    return acc;
  };
  for (int64_t e = 0; e < experts; ++e) {
    const float* we = w + e * w_stride;
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      const float* x = a + (a_rows != nullptr ? a_rows[r] / a_div : r) * lda;
      for (int64_t j = 0; j < n; ++j) {
        if (!swiglu) {
          y[r * ldy + j] = static_cast<float>(dot(x, we + j * k));
          continue;
        }
        const double g = dot(x, we + j * k), u = dot(x, we + (n + j) * k);
        y[r * ldy + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
      }
    }
  }
}

}  // namespace mmserve::kernels
