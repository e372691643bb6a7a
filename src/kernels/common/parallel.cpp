// Thread-count policy of the CPU kernels: set_cpu_threads()/cpu_threads() (declared in gemm/gemm.h, as
// the GEMM is what the setting matters most for), parallel_threads() for the OpenMP regions, and the rule
// that OpenBLAS itself always runs on one thread.
//
// Why OpenBLAS is single-threaded: all CPU parallelism is OpenMP, and each OpenMP thread calls sgemm on
// its own block of the output (gemm_cpu.cpp). Letting OpenBLAS keep its own pthread pool next to OpenMP's
// made the two pools fight over the cores: after every OpenMP region (an epilogue, a layer norm) the
// OpenMP workers spin for a while and steal the cores the next sgemm's OpenBLAS workers need. Measured on
// the 2-core dev box (bias + quick_gelu epilogue): 50x768x2304 ran at 30 GFLOP/s with an OpenBLAS-threaded
// sgemm plus an OpenMP epilogue and at 188 with one pool (a bare OpenBLAS-threaded sgemm alone: 169);
// 800x768x3072 at 168 against 232 (bare: 241).
// Tests: gemm_test.cpp (CpuThreadsTest) and every kernel test on both sides of the thresholds.
#include "kernels/common/parallel.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <mutex>

#include "kernels/gemm/gemm.h"

namespace mmserve::kernels {
namespace {

std::atomic<int> g_threads{0};  // 0: never set, follow the OpenMP default

}  // namespace

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
  use_single_threaded_blas();
  omp_set_num_threads(threads);
  g_threads.store(threads, std::memory_order_relaxed);
}

int cpu_threads() {
  const int threads = g_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : omp_get_max_threads();
}

int parallel_threads(int64_t work) {
  return work >= kParallelMinWork ? cpu_threads() : 1;
}

}  // namespace mmserve::kernels
