// Micro-benchmark of l2_normalize_rows_cuda() on CLIP's pooled embeddings at batch 256 ([256, 512] f32, in
// place). `bytes` = the rows read and written once; at 512 KB they sit in L2 and the launch dominates, so
// the microseconds, not the GB/s, are the number to watch. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/l2_normalize/l2_normalize_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, int64_t rows, int64_t cols) {
  std::vector<float> host(rows * cols);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : host) v = dist(rng);
  void* x = nullptr;
  if (cudaMalloc(&x, host.size() * sizeof(float)) == cudaSuccess) {
    cudaMemcpy(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  const std::string shape = "f32 rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " (pooled b256)";
  auto launch = [&] { return l2_normalize_rows_cuda(static_cast<float*>(x), rows, cols, bench.stream()); };
  const Status first = x ? launch() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    bench.run("l2_normalize", shape, 0, 2.0 * rows * cols * sizeof(float), [&] { (void)launch(); });
  } else {
    std::fprintf(stderr, "l2_normalize %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(x);
}

}  // namespace

void bench_l2_normalize_cuda(CudaBench& bench) {
  bench_case(bench, 256, 512);
}

}  // namespace mmserve::kernels
