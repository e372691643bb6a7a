// Benchmark of embedding() for the CLIP text tower: 16 * 77 token ids into a [49408, 512] table, as a copy
// and accumulated (position embeddings). GB/s counts the rows read and written.
// Run: kernels_bench --benchmark_filter=bm_embedding
#include <benchmark/benchmark.h>

#include "kernels/embedding/embedding.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_embedding(benchmark::State& state) {
  const int64_t vocab = 49408, dim = 512, n = int64_t{16} * 77;
  const bool accumulate = state.range(0) != 0;
  std::vector<float> table = bench_util::random_floats(vocab * dim), out(n * dim, 0.0f);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % vocab);
  const Tensor tt(table.data(), DType::kF32, {vocab, dim});
  Tensor ot(out.data(), DType::kF32, {n, dim});
  for (auto _ : state) {
    embedding(tt, ids.data(), n, ot, accumulate);
    benchmark::DoNotOptimize(out.data());
  }
  bench_util::set_gbytes(state, (accumulate ? 3.0 : 2.0) * 4 * n * dim);
}
BENCHMARK(bm_embedding)->ArgName("accumulate")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
