// Micro-benchmark of apply_rope_cuda() at Llama-3-8B shapes: q and k of a fused bf16 QKV row (32 + 8 heads of 128,
// row stride 48 * 128) rotated in place in one call, at 1, 32 and 2048 tokens, positions near 8192. Memory bound:
// `bytes` is the rotated q/k columns read and written once (positions and inv_freq are negligible); GB/s against
// HBM (~4.2 TB/s on the H200). Rotates over kCopies buffers. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

constexpr int64_t kCopies = 4;

void bench_case(CudaBench& bench, int64_t rows, DType dtype) {
  const int64_t heads = 32 + 8, head_dim = 128, ld = 48 * head_dim;
  auto* x = static_cast<uint8_t*>(device_random(dtype, kCopies * rows * ld, 1));
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(8192 + r);
  const std::vector<float> inv = rope_inv_freq(head_dim, 500000.0, RopeScaling{"llama3", 8.0, 1.0, 4.0, 8192}, 131072);
  void* dp = nullptr;
  void* di = nullptr;
  if (cudaMalloc(&dp, rows * 4) == cudaSuccess) cudaMemcpy(dp, positions.data(), rows * 4, cudaMemcpyHostToDevice);
  if (cudaMalloc(&di, inv.size() * 4) == cudaSuccess) {
    cudaMemcpy(di, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice);
  }
  RopeArgs a;
  a.x = x;
  a.dtype = dtype;
  a.rows = rows;
  a.ld = ld;
  a.heads = heads;
  a.head_dim = head_dim;
  a.positions = static_cast<const int32_t*>(dp);
  a.inv_freq = static_cast<const float*>(di);
  const std::string shape = std::string(dtype_name(dtype)) + " rows=" + std::to_string(rows) +
                            " q+k heads=40x128 ld=6144 (Llama-3-8B fused QKV, in place)";
  const Status first = x && dp && di ? apply_rope_cuda(a, bench.stream()) : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = 2.0 * rows * heads * head_dim * dtype_size(dtype);
    int64_t call = 0;
    bench.run("rope", shape, 0, bytes, [&] {
      RopeArgs c = a;
      c.x = x + (call++ % kCopies) * rows * ld * dtype_size(dtype);
      (void)apply_rope_cuda(c, bench.stream());
    });
  } else {
    std::fprintf(stderr, "rope %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(x);
  cudaFree(dp);
  cudaFree(di);
}

}  // namespace

void bench_rope_cuda(CudaBench& bench) {
  for (int64_t rows : {1, 32, 2048}) bench_case(bench, rows, DType::kBF16);
  bench_case(bench, 2048, DType::kF32);
}

}  // namespace mmserve::kernels
