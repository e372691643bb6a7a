// lora_sgmv on the CPU at a small decoder's shapes (hidden 2048, rank 16): 8 sequences of 16 tokens, each its own
// adapter. Run: kernels_bench --benchmark_filter=bm_lora
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/lora/lora.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_lora_sgmv(benchmark::State& state) {
  const int64_t in = 2048, out = 2048, rank = state.range(0), segs = 8, rows_per = 16, rows = segs * rows_per;
  std::vector<float> x = bench_util::random_floats(rows * in), y(static_cast<size_t>(rows * out));
  std::vector<std::vector<float>> a, b;
  std::vector<LoraSegmentWeights> w;
  std::vector<int32_t> starts;
  for (int64_t s = 0; s < segs; ++s) {
    a.push_back(bench_util::random_floats(rank * in));
    b.push_back(bench_util::random_floats(out * rank));
    starts.push_back(static_cast<int32_t>(s * rows_per));
  }
  starts.push_back(static_cast<int32_t>(rows));
  for (int64_t s = 0; s < segs; ++s) w.push_back({a[s].data(), b[s].data(), rank, 2.0f});
  for (auto _ : state) {
    lora_sgmv(x.data(), in, starts.data(), segs, w.data(), in, out, y.data(), out);
    benchmark::DoNotOptimize(y.data());
  }
  bench_util::set_gbytes(state, 4.0 * (segs * rank * (in + out) + rows * (in + 2 * out)));
}
BENCHMARK(bm_lora_sgmv)->ArgNames({"rank"})->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
