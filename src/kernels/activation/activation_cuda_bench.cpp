// Micro-benchmark of activation_cuda() in place on the MLP hidden activations of CLIP at batch 256 (bf16).
// Memory bound: `bytes` is the array read once and written once; each buffer (~80 MB) is larger than the
// H200's L2, so repeated calls on it time HBM. gelu (erf) is there to show what the special function costs
// over quick_gelu's exp. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, const std::string& label, Activation act, DType dtype, int64_t rows, int64_t cols) {
  const int64_t count = rows * cols;
  void* x = device_random(dtype, count, 1);
  const std::string shape = std::string(dtype_name(dtype)) + " " + activation_name(act) + " " + std::to_string(rows) +
                            "x" + std::to_string(cols) + " " + label;
  // Repeated in place, small values about halve on each call; over the ~60 calls they stay normal, non-zero.
  const Status first = x ? activation_cuda(act, x, dtype, count, bench.stream()) : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = 2.0 * count * dtype_size(dtype);
    bench.run("activation", shape, 0, bytes, [&] { (void)activation_cuda(act, x, dtype, count, bench.stream()); });
  } else {
    std::fprintf(stderr, "activation %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(x);
}

}  // namespace

void bench_activation_cuda(CudaBench& bench) {
  bench_case(bench, "(ViT-B/32 b256 mlp)", Activation::kQuickGelu, DType::kBF16, 12800, 3072);
  bench_case(bench, "(ViT-B/32 b256 mlp)", Activation::kGelu, DType::kBF16, 12800, 3072);
  bench_case(bench, "(text b256 mlp)", Activation::kQuickGelu, DType::kBF16, 19712, 2048);
  bench_case(bench, "(ViT-B/32 b256 mlp, f32)", Activation::kQuickGelu, DType::kF32, 12800, 3072);
}

}  // namespace mmserve::kernels
