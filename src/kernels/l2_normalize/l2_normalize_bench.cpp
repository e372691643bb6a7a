// Benchmark of l2_normalize_rows() on pooled CLIP embeddings ([16, 512] and [1024, 512]).
// Run: kernels_bench --benchmark_filter=bm_l2_normalize
#include <benchmark/benchmark.h>

#include "kernels/l2_normalize/l2_normalize.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_l2_normalize(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = 512;
  std::vector<float> x = bench_util::random_floats(rows * cols);
  Tensor t(x.data(), DType::kF32, {rows, cols});
  for (auto _ : state) {
    l2_normalize_rows(t);
    benchmark::DoNotOptimize(x.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * rows * cols);
}
BENCHMARK(bm_l2_normalize)->ArgName("rows")->Arg(16)->Arg(1024)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
