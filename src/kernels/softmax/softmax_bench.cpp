// Benchmark of softmax_rows() on attention-score shaped rows: 16*12*50 rows of 50 (vision, batch 16) and
// 16*8*77 rows of 77 (text). GB/s counts one read and one write of the scores.
// Run: kernels_bench --benchmark_filter=bm_softmax
#include <benchmark/benchmark.h>

#include "kernels/softmax/softmax.h"
#include "kernels/testing/bench_util.h"

namespace mmserve::kernels {
namespace {

void bm_softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const std::vector<float> x = bench_util::random_floats(rows * cols);
  std::vector<float> work = x;
  Tensor t(work.data(), DType::kF32, {rows, cols});
  for (auto _ : state) {
    softmax_rows(t);  // in place: values stay in [0, 1], which is as good an input as any
    benchmark::DoNotOptimize(work.data());
  }
  bench_util::set_gbytes(state, 2.0 * 4 * rows * cols);
}
BENCHMARK(bm_softmax)
    ->ArgNames({"rows", "cols"})
    ->Args({16 * int64_t{12} * 50, 50})
    ->Args({16 * int64_t{8} * 77, 77})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
