// Benchmarks of the element-wise glue at CLIP batch-16 vision shapes: add (800 x 768), add_row (position
// embeddings on 800 x 768) and gather_rows (16 class tokens). GB/s counts bytes read plus written.
// Run: kernels_bench --benchmark_filter="bm_(add|add_row|gather_rows)/"
#include <benchmark/benchmark.h>

#include "kernels/elementwise/elementwise.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

constexpr int64_t kRows = 800, kCols = 768;

void bm_add(benchmark::State& state) {
  std::vector<float> a = bench_util::random_floats(kRows * kCols, 1), b = bench_util::random_floats(kRows * kCols, 2);
  Tensor at(a.data(), DType::kF32, {kRows, kCols});
  const Tensor bt(b.data(), DType::kF32, {kRows, kCols});
  for (auto _ : state) {
    add(at, bt, at);
    benchmark::DoNotOptimize(a.data());
  }
  bench_util::set_gbytes(state, 3.0 * 4 * kRows * kCols);
}
BENCHMARK(bm_add)->UseRealTime()->Unit(benchmark::kMicrosecond);

void bm_add_row(benchmark::State& state) {
  std::vector<float> x = bench_util::random_floats(kRows * kCols, 1), row = bench_util::random_floats(kCols, 2);
  Tensor xt(x.data(), DType::kF32, {kRows, kCols});
  const Tensor rt(row.data(), DType::kF32, {kCols});
  for (auto _ : state) {
    add_row(xt, rt, xt);
    benchmark::DoNotOptimize(x.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * kRows * kCols);
}
BENCHMARK(bm_add_row)->UseRealTime()->Unit(benchmark::kMicrosecond);

void bm_gather_rows(benchmark::State& state) {
  std::vector<float> x = bench_util::random_floats(kRows * kCols), y(16 * kCols);
  std::vector<int64_t> idx(16);
  for (int64_t i = 0; i < 16; ++i) idx[i] = i * 50;  // class token of each image
  const Tensor xt(x.data(), DType::kF32, {kRows, kCols});
  Tensor yt(y.data(), DType::kF32, {16, kCols});
  for (auto _ : state) {
    gather_rows(xt, idx.data(), 16, yt);
    benchmark::DoNotOptimize(y.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * 16 * kCols);
}
BENCHMARK(bm_gather_rows)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
