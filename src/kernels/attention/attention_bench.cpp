// Benchmarks of attention() at CLIP ViT-B/32 shapes: vision (t = 50, 12 heads) and causal text (t = 77,
// 8 heads), head_dim 64, batch 1 and 16, q/k/v read as column slices of one fused QKV buffer as the model
// does. GFLOP/s counts 4 * head_dim flops per visible (query, key) pair (QK^T and PV).
// Run: kernels_bench --benchmark_filter=bm_attention
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention/attention.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

// Args: batch, seq, heads, head_dim, causal.
void bm_attention(benchmark::State& state) {
  const int64_t batch = state.range(0), seq = state.range(1), heads = state.range(2), head_dim = state.range(3);
  const bool causal = state.range(4) != 0;
  const int64_t hidden = heads * head_dim;
  std::vector<float> qkv = bench_util::random_floats(batch * seq * 3 * hidden), out(batch * seq * hidden);
  const Tensor fused(qkv.data(), DType::kF32, {batch, seq, 3 * hidden});
  const Tensor q = fused.slice_cols(0, hidden), k = fused.slice_cols(hidden, 2 * hidden),
               v = fused.slice_cols(2 * hidden, 3 * hidden);
  Tensor o(out.data(), DType::kF32, {batch, seq, hidden});
  AttentionMask mask;
  mask.causal = causal;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (auto _ : state) {
    attention(q, k, v, o, heads, scale, mask);
    benchmark::DoNotOptimize(out.data());
  }
  const double pairs = causal ? seq * (seq + 1) / 2.0 : static_cast<double>(seq) * seq;
  bench_util::set_gflops(state, 4.0 * batch * heads * head_dim * pairs);
}
BENCHMARK(bm_attention)
    ->ArgNames({"b", "t", "h", "d", "causal"})
    ->Args({1, 50, 12, 64, 0})
    ->Args({16, 50, 12, 64, 0})
    ->Args({1, 77, 8, 64, 1})
    ->Args({16, 77, 8, 64, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
