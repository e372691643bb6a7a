// Benchmarks of apply_rope() on Llama-3.2-1B's query heads (32 x 64): a decode batch of 32 rows and a 512-token
// prefill. Run: kernels_bench --benchmark_filter=bm_rope
#include <benchmark/benchmark.h>

#include "kernels/rope/rope.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_rope(benchmark::State& state) {
  const int64_t rows = state.range(0), heads = 32, head_dim = 64;
  std::vector<float> x = bench_util::random_floats(rows * heads * head_dim);
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(r);
  const std::vector<float> inv = rope_inv_freq(head_dim, 500000.0, {}, 131072);
  for (auto _ : state) {
    apply_rope(x.data(), rows, heads * head_dim, heads, head_dim, positions.data(), inv.data());
    benchmark::DoNotOptimize(x.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * rows * heads * head_dim);
  bench_util::set_gflops(state, 6.0 * rows * heads * head_dim / 2);
}
BENCHMARK(bm_rope)->ArgNames({"rows"})->Arg(32)->Arg(512)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
