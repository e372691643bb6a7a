// Test-only: random logical W4A16 weights as checkpoints have them (q and zeros 0..15 with a few GPTQ-v1 zeros of
// 16, f16 scales, an optional act-order g_idx that is a random permutation of the groups' columns), and the
// dequantised weight computed straight from the logical form with w4a16.h's rounding rule, independently of the
// packed layout. Used by w4a16_test.cpp and w4a16_cuda_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/w4a16/w4a16.h"

namespace mmserve::kernels::w4a16_test {

struct LogicalWeight {
  int64_t n = 0, k = 0, group_size = 0;  // group_size as given (-1 allowed)
  std::vector<uint8_t> q, zeros;
  std::vector<float> scales;
  std::vector<int32_t> g_idx;  // empty: no act-order

  int64_t gs() const { return group_size == -1 ? k : group_size; }
  int64_t groups() const { return k / gs(); }
  int64_t group_of(int64_t c) const { return g_idx.empty() ? c / gs() : g_idx[static_cast<size_t>(c)]; }
  Int4WeightView view() const {
    return {n, k, group_size, q.data(), scales.data(), zeros.data(), g_idx.empty() ? nullptr : g_idx.data()};
  }
};

// Needs k % gs() == 0 (the caller picks valid shapes, or tests the refusal with w4a16_check before using this).
inline LogicalWeight random_weight(int64_t n, int64_t k, int64_t group_size, bool act_order, uint32_t seed) {
  LogicalWeight w;
  w.n = n, w.k = k, w.group_size = group_size;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> nibble(0, 15), percent(0, 99);
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  const int64_t gs = group_size == -1 ? k : group_size, groups = gs > 0 && k % gs == 0 ? k / gs : 1;
  w.q.resize(static_cast<size_t>(n * k));
  for (uint8_t& v : w.q) v = static_cast<uint8_t>(nibble(rng));
  w.zeros.resize(static_cast<size_t>(n * groups));
  for (uint8_t& v : w.zeros) v = static_cast<uint8_t>(percent(rng) < 3 ? 16 : nibble(rng));
  w.scales.resize(static_cast<size_t>(n * groups));
  for (float& v : w.scales) v = f16_to_f32(f32_to_f16(scale(rng)));  // checkpoints hold f16 scales
  if (act_order) {
    std::vector<int32_t> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    w.g_idx.resize(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c)
      w.g_idx[static_cast<size_t>(order[static_cast<size_t>(c)])] = static_cast<int32_t>(c / gs);
  }
  return w;
}

inline float round_to(float v, DType dtype) {
  return dtype == DType::kF16 ? f16_to_f32(f32_to_f16(v)) : bf16_to_f32(f32_to_bf16(v));
}

// W[r][c] = round_dtype((q - zero) * round_dtype(scale)), [n][k] in logical column order.
inline std::vector<float> reference_weight(const LogicalWeight& w, DType dtype) {
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t c = 0; c < w.k; ++c) {
      const size_t gi = static_cast<size_t>(r * w.groups() + w.group_of(c));
      const double exact = (static_cast<double>(w.q[static_cast<size_t>(r * w.k + c)]) - w.zeros[gi]) *
                           static_cast<double>(round_to(w.scales[gi], dtype));
      out[static_cast<size_t>(r * w.k + c)] = round_to(static_cast<float>(exact), dtype);  // exact in f32 first
    }
  }
  return out;
}

}  // namespace mmserve::kernels::w4a16_test
