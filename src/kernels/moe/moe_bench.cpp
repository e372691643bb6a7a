// Benchmarks of the MoE routing kernels at Mixtral-8x7B's width (hidden 4096, 8 experts, top-2): routing, planning,
// permuting and combining a decode batch of 32 tokens and a 512-token prefill.
// Run: kernels_bench --benchmark_filter=bm_moe
#include <benchmark/benchmark.h>

#include "kernels/moe/moe.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_moe_route_plan_permute_combine(benchmark::State& state) {
  const int64_t tokens = state.range(0), experts = 8, k = 2, cols = 4096;
  std::vector<float> logits = bench_util::random_floats(tokens * experts), x = bench_util::random_floats(tokens * cols);
  std::vector<float> xp(static_cast<size_t>(tokens * k * cols)), out(static_cast<size_t>(tokens * cols));
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  std::vector<float> w(ids.size());
  for (auto _ : state) {
    moe_route(logits.data(), experts, tokens, experts, k, ids.data(), w.data());
    const MoePlan plan = moe_plan(ids.data(), tokens, experts, k);
    moe_permute(x.data(), cols, plan, cols, xp.data(), cols);
    moe_combine(xp.data(), cols, plan, ids.data(), w.data(), cols, out.data(), cols);
    benchmark::DoNotOptimize(out.data());
  }
  bench_util::set_gbytes(state, 4.0 * (3 * k + 1) * tokens * cols);
}
BENCHMARK(bm_moe_route_plan_permute_combine)
    ->ArgNames({"tokens"})
    ->Arg(32)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
