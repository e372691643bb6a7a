// Bench-only helpers shared by the kernel benches: counters in the units the perf goals are stated in.
//
// Every bench uses real (wall) time: OpenBLAS and OpenMP run on several threads, and the CPU time of the
// main thread alone would overstate throughput.
#pragma once

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

namespace mmserve::kernels::bench_util {

inline std::vector<float> random_floats(size_t n, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// "GFLOP/s" from the floating-point operations one iteration performs.
inline void set_gflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// "GB/s" from the bytes one iteration reads plus writes.
inline void set_gbytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace mmserve::kernels::bench_util
