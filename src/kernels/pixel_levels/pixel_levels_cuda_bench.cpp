// Micro-benchmark of expand_pixel_levels_cuda() on a server batch of 64 ViT-B images (3 x 224 x 224 levels ->
// f32) and 8 SAM images (3 x 1024 x 1024). `bytes` = levels read + floats written. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "kernels/pixel_levels/pixel_levels_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, int64_t n, int64_t side) {
  const int64_t plane = side * side, count = n * 3 * plane;
  void *levels = nullptr, *table = nullptr, *out = nullptr;
  const bool allocated = cudaMalloc(&levels, count) == cudaSuccess && cudaMalloc(&table, 3 * 256 * 4) == cudaSuccess &&
                         cudaMalloc(&out, count * 4) == cudaSuccess;
  if (allocated) {
    cudaMemset(levels, 7, count);
    cudaMemset(table, 0, 3 * 256 * 4);
  }
  const std::string shape = "n=" + std::to_string(n) + " 3x" + std::to_string(side) + "x" + std::to_string(side);
  auto launch = [&] {
    return expand_pixel_levels_cuda(static_cast<const uint8_t*>(levels), n, 3, plane, static_cast<const float*>(table),
                                    static_cast<float*>(out), bench.stream());
  };
  const Status first = allocated ? launch() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    bench.run("pixel_levels", shape, 0, static_cast<double>(count * 5), [&] { (void)launch(); });
  } else {
    std::fprintf(stderr, "pixel_levels %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(levels);
  cudaFree(table);
  cudaFree(out);
}

}  // namespace

void bench_pixel_levels_cuda(CudaBench& bench) {
  bench_case(bench, 64, 224);
  bench_case(bench, 8, 1024);
}

}  // namespace mmserve::kernels
