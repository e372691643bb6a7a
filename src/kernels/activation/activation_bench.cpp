// Benchmarks of activation() on the CLIP MLP hidden tensor (800 x 3072, batch 16 vision), one per
// activation: quick_gelu and gelu_tanh use the vectorised exp, gelu calls libm's erf per element.
// Run: kernels_bench --benchmark_filter=bm_activation
#include <benchmark/benchmark.h>

#include "kernels/activation/activation.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_activation(benchmark::State& state) {
  const Activation act = static_cast<Activation>(state.range(0));
  const int64_t n = int64_t{800} * 3072;
  std::vector<float> x = bench_util::random_floats(n), y(n);
  const Tensor xt(x.data(), DType::kF32, {800, 3072});
  Tensor yt(y.data(), DType::kF32, {800, 3072});
  for (auto _ : state) {
    activation(xt, yt, act);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(activation_name(act));
  state.SetItemsProcessed(state.iterations() * n);
  bench_util::set_gbytes(state, 2.0 * 4 * n);
}
BENCHMARK(bm_activation)
    ->ArgName("act")
    ->Arg(static_cast<int>(Activation::kQuickGelu))
    ->Arg(static_cast<int>(Activation::kGelu))
    ->Arg(static_cast<int>(Activation::kGeluTanh))
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
