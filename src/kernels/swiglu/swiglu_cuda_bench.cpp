// Micro-benchmark of swiglu_cuda() at Llama-3-8B shapes: the fused bf16 gate_up GEMM output [rows, 2 * 14336] into
// the bf16 down-projection input [rows, 14336], at 1, 32 and 2048 tokens. Memory bound: `bytes` is gate and up
// read once plus y written once; GB/s against HBM (~4.2 TB/s on the H200). Rotates over kCopies buffers.
// Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/dtype.h"
#include "kernels/swiglu/swiglu_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

constexpr int64_t kCopies = 4;

void bench_case(CudaBench& bench, int64_t rows, int64_t cols, DType dtype) {
  const size_t size = dtype_size(dtype);
  auto* in = static_cast<uint8_t*>(device_random(dtype, kCopies * rows * 2 * cols, 1));
  auto* y = static_cast<uint8_t*>(device_random(dtype, kCopies * rows * cols, 2));
  SwigluArgs a;
  a.gate = in;
  a.up = in + cols * size;
  a.in_dtype = dtype;
  a.in_ld = 2 * cols;
  a.rows = rows;
  a.cols = cols;
  a.y = y;
  a.y_dtype = dtype;
  a.y_ld = cols;
  const std::string shape = std::string(dtype_name(dtype)) + " rows=" + std::to_string(rows) +
                            " I=" + std::to_string(cols) + " (Llama-3-8B fused gate_up)";
  const Status first = in && y ? swiglu_cuda(a, bench.stream()) : internal_error("cudaMalloc failed");
  if (first.ok()) {
    int64_t call = 0;
    bench.run("swiglu", shape, 0, 3.0 * rows * cols * size, [&] {
      const int64_t copy = call++ % kCopies;
      SwigluArgs c = a;
      c.gate = in + copy * rows * 2 * cols * size;
      c.up = static_cast<const uint8_t*>(c.gate) + cols * size;
      c.y = y + copy * rows * cols * size;
      (void)swiglu_cuda(c, bench.stream());
    });
  } else {
    std::fprintf(stderr, "swiglu %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(in);
  cudaFree(y);
}

}  // namespace

void bench_swiglu_cuda(CudaBench& bench) {
  for (int64_t rows : {1, 32, 2048}) bench_case(bench, rows, 14336, DType::kBF16);
}

}  // namespace mmserve::kernels
