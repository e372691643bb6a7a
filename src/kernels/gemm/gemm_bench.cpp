// Benchmarks of linear() at CLIP ViT-B/32 shapes (GFLOP/s = 2*m*k*n per call): the QKV, out-projection
// and MLP GEMMs at batch 1 (m = 50 vision tokens, 77 text tokens) and batch 16 (m = 800), bare and with the
// fused bias + quick_gelu epilogue (the difference is the epilogue's cost), and a residual accumulate.
// Run: kernels_bench --benchmark_filter=bm_linear
#include <benchmark/benchmark.h>

#include "kernels/gemm/gemm.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

// Args: m, k, n, epilogue (0: none, 1: bias, 2: bias + quick_gelu, 3: bias + accumulate).
void bm_linear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2), epilogue = state.range(3);
  std::vector<float> x = bench_util::random_floats(m * k, 1), w = bench_util::random_floats(n * k, 2);
  std::vector<float> b = bench_util::random_floats(n, 3), y(m * n, 0.0f);
  const Tensor xt(x.data(), DType::kF32, {m, k}), wt(w.data(), DType::kF32, {n, k}), bt(b.data(), DType::kF32, {n});
  Tensor yt(y.data(), DType::kF32, {m, n});
  const Activation act = epilogue == 2 ? Activation::kQuickGelu : Activation::kNone;
  for (auto _ : state) {
    linear(xt, wt, epilogue >= 1 ? &bt : nullptr, yt, act, epilogue == 3);
    benchmark::DoNotOptimize(y.data());
  }
  bench_util::set_gflops(state, 2.0 * m * k * n);
}
BENCHMARK(bm_linear)
    ->ArgNames({"m", "k", "n", "epi"})
    ->Args({50, 768, 2304, 1})    // vision QKV, batch 1
    ->Args({50, 768, 768, 3})     // vision out-proj + residual, batch 1
    ->Args({50, 768, 3072, 0})    // vision fc1, batch 1, bare
    ->Args({50, 768, 3072, 2})    // vision fc1 + quick_gelu, batch 1
    ->Args({50, 3072, 768, 3})    // vision fc2 + residual, batch 1
    ->Args({77, 512, 1536, 1})    // text QKV, batch 1
    ->Args({800, 768, 2304, 1})   // vision QKV, batch 16
    ->Args({800, 768, 3072, 0})   // vision fc1, batch 16, bare
    ->Args({800, 768, 3072, 2})   // vision fc1 + quick_gelu, batch 16
    ->Args({800, 3072, 768, 3})   // vision fc2 + residual, batch 16
    ->Args({1232, 512, 2048, 2})  // text fc1 + quick_gelu, batch 16
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
