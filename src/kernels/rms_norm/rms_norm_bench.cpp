// Benchmarks of rms_norm() at decoder shapes (Llama-3.2-1B hidden 2048: a decode batch of 32 rows, a 512-token
// prefill). Memory-bound: GB/s (x read, y written) is the number to watch.
// Run: kernels_bench --benchmark_filter=bm_rms_norm
#include <benchmark/benchmark.h>

#include "kernels/rms_norm/rms_norm.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_rms_norm(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  std::vector<float> x = bench_util::random_floats(rows * cols), y(rows * cols), w(cols, 1.0f);
  for (auto _ : state) {
    rms_norm(x.data(), cols, w.data(), rows, cols, 1e-5f, y.data(), cols);
    benchmark::DoNotOptimize(y.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * rows * cols);
  bench_util::set_gflops(state, 4.0 * rows * cols);
}
BENCHMARK(bm_rms_norm)
    ->ArgNames({"rows", "cols"})
    ->Args({32, 2048})
    ->Args({512, 2048})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
