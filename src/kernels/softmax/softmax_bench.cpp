// Benchmark of softmax_rows() on attention-score shaped rows: 16*12*50 rows of 50 (vision, batch 16) and
// 16*8*77 rows of 77 (text). GB/s counts one read and one write of the scores.
// Also log_sum_exp over one Whisper vocabulary row (51,866 floats), beside the scalar double-exp loop the
// decoding used before (the baseline in the same run).
// Run: kernels_bench --benchmark_filter='bm_softmax|bm_log_sum_exp'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>

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

void bm_log_sum_exp(benchmark::State& state) {
  const std::vector<float> row = bench_util::random_floats(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(log_sum_exp(row.data(), static_cast<int64_t>(row.size())));
  bench_util::set_gbytes(state, 4.0 * static_cast<double>(row.size()));
}
BENCHMARK(bm_log_sum_exp)->Arg(51866)->Unit(benchmark::kMicrosecond);

// The baseline: max, then a scalar double exp per element (whisper_decoding.cpp before log_sum_exp).
void bm_log_sum_exp_scalar_double(benchmark::State& state) {
  const std::vector<float> row = bench_util::random_floats(state.range(0));
  for (auto _ : state) {
    const float max = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - max);
    benchmark::DoNotOptimize(std::log(sum) + max);
  }
  bench_util::set_gbytes(state, 4.0 * static_cast<double>(row.size()));
}
BENCHMARK(bm_log_sum_exp_scalar_double)->Arg(51866)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mmserve::kernels
