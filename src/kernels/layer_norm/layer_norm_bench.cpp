// Benchmarks of layer_norm() at CLIP shapes (vision 50/800 x 768, text 1232 x 512). Memory-bound, so GB/s
// (x read, y written) is the number to watch; GFLOP/s counts ~8 flops per element.
// Run: kernels_bench --benchmark_filter=bm_layer_norm
#include <benchmark/benchmark.h>

#include "kernels/layer_norm/layer_norm.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_layer_norm(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  std::vector<float> x = bench_util::random_floats(rows * cols), y(rows * cols);
  std::vector<float> gamma(cols, 1.0f), beta(cols, 0.0f);
  const Tensor xt(x.data(), DType::kF32, {rows, cols}), g(gamma.data(), DType::kF32, {cols}),
      b(beta.data(), DType::kF32, {cols});
  Tensor yt(y.data(), DType::kF32, {rows, cols});
  for (auto _ : state) {
    layer_norm(xt, g, b, 1e-5f, yt);
    benchmark::DoNotOptimize(y.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * rows * cols);
  bench_util::set_gflops(state, 8.0 * rows * cols);
}
BENCHMARK(bm_layer_norm)
    ->ArgNames({"rows", "cols"})
    ->Args({50, 768})
    ->Args({800, 768})
    ->Args({1232, 512})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
