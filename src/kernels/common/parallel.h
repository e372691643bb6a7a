// Internal to the CPU kernels: how many OpenMP threads a parallel region should use.
//
// Every region passes num_threads(parallel_threads(work)) instead of relying on omp_set_num_threads, whose
// setting is per calling thread (a server thread other than the one that called set_cpu_threads would get
// the default). Small work runs on one thread: a region costs a few microseconds to start and wakes the
// other cores, which then spin and compete with OpenBLAS's own threads during the next GEMM.
// Tests: exercised by every kernel test (shapes on both sides of the threshold).
#pragma once

#include <cstdint>

namespace mmserve::kernels {

// Elements (or multiply-adds) below which a region is not worth waking other threads for.
inline constexpr int64_t kParallelMinWork = 16384;

// cpu_threads() when work >= kParallelMinWork, else 1.
int parallel_threads(int64_t work);

// Puts OpenBLAS on one thread (once per process): the kernels parallelise GEMMs themselves with OpenMP,
// so a second thread pool would only compete for the cores (see parallel.cpp).
void use_single_threaded_blas();

}  // namespace mmserve::kernels
