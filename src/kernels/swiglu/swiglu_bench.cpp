// Benchmarks of swiglu() at Llama-3.2-1B's MLP width (8192): a decode batch of 32 rows and a 512-token prefill.
// Run: kernels_bench --benchmark_filter=bm_swiglu
#include <benchmark/benchmark.h>

#include "kernels/swiglu/swiglu.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_swiglu(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  std::vector<float> in = bench_util::random_floats(rows * 2 * cols), y(rows * cols);
  for (auto _ : state) {
    swiglu(in.data(), in.data() + cols, 2 * cols, rows, cols, y.data(), cols);
    benchmark::DoNotOptimize(y.data());
  }
  bench_util::set_gbytes(state, 3.0 * 4 * rows * cols);
  bench_util::set_gflops(state, 20.0 * rows * cols);
}
BENCHMARK(bm_swiglu)->ArgNames({"rows", "cols"})->Args({32, 8192})->Args({512, 8192})->UseRealTime()->Unit(
    benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
