// Benchmark of patch_embed() for CLIP ViT-B/32 (224x224, patch 32, dim 768) at batch 1 and 16:
// im2col plus one GEMM of [b*49, 3072] x [3072, 768]. GFLOP/s = 2 * b*49 * 3072 * 768 per call.
// Run: kernels_bench --benchmark_filter=bm_patch_embed
#include <benchmark/benchmark.h>

#include "kernels/patch_embed/patch_embed.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_patch_embed(benchmark::State& state) {
  const int64_t batch = state.range(0), size = 224, patch = 32, dim = 768;
  const int64_t np = (size / patch) * (size / patch), patch_len = 3 * patch * patch;
  std::vector<float> pixels = bench_util::random_floats(batch * 3 * size * size);
  std::vector<float> weight = bench_util::random_floats(dim * patch_len);
  std::vector<float> out(batch * np * dim), scratch(patch_embed_scratch_floats(batch, 3, size, size, patch));
  const Tensor pt(pixels.data(), DType::kF32, {batch, 3, size, size});
  const Tensor wt(weight.data(), DType::kF32, {dim, 3, patch, patch});
  Tensor ot(out.data(), DType::kF32, {batch, np, dim});
  for (auto _ : state) {
    patch_embed(pt, wt, nullptr, patch, ot, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  bench_util::set_gflops(state, 2.0 * batch * np * patch_len * dim);
}
BENCHMARK(bm_patch_embed)->ArgName("b")->Arg(1)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
