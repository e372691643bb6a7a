// Micro-benchmark of rms_norm_cuda() at Llama-3-8B shapes: the f32 residual stream (hidden 4096) normalised into
// the bf16 GEMM input, at 1, 32 and 2048 tokens, and Qwen3's per-head q norm (32 heads of 128 inside a fused bf16
// QKV row, in place). Memory bound: `bytes` is x read once plus y written once (the weight is L2-resident,
// counted once); GB/s is the number to hold against HBM (~4.2 TB/s achievable on the H200). Rotates over kCopies
// buffers so large shapes time HBM rather than L2. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/dtype.h"
#include "kernels/rms_norm/rms_norm_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

constexpr int64_t kCopies = 4;

void bench_case(CudaBench& bench, const std::string& label, int64_t rows, int64_t cols, int64_t segments, int64_t ld,
                DType x_dtype, DType y_dtype, bool in_place) {
  auto* x = static_cast<uint8_t*>(device_random(x_dtype, kCopies * rows * ld, 1));
  auto* w = device_random(y_dtype, cols, 2);
  auto* y = in_place ? x : static_cast<uint8_t*>(device_random(y_dtype, kCopies * rows * ld, 3));
  RmsNormArgs a;
  a.x = x;
  a.x_dtype = x_dtype;
  a.x_ld = ld;
  a.weight = w;
  a.y = y;
  a.y_dtype = y_dtype;
  a.y_ld = ld;
  a.rows = rows;
  a.cols = cols;
  a.segments = segments;
  a.eps = 1e-5f;
  const std::string shape = std::string(dtype_name(x_dtype)) + "->" + dtype_name(y_dtype) +
                            " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                            (segments > 1 ? " segments=" + std::to_string(segments) : "") + " " + label;
  const Status first = x && w && y ? rms_norm_cuda(a, bench.stream()) : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = static_cast<double>(rows) * segments * cols * (dtype_size(x_dtype) + dtype_size(y_dtype)) +
                         static_cast<double>(cols) * dtype_size(y_dtype);
    int64_t call = 0;
    bench.run("rms_norm", shape, 0, bytes, [&] {
      const int64_t copy = call++ % kCopies;
      RmsNormArgs c = a;
      c.x = x + copy * rows * ld * dtype_size(x_dtype);
      c.y = static_cast<uint8_t*>(y) + copy * rows * ld * dtype_size(y_dtype);
      (void)rms_norm_cuda(c, bench.stream());
    });
  } else {
    std::fprintf(stderr, "rms_norm %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(x);
  cudaFree(w);
  if (!in_place) cudaFree(y);
}

}  // namespace

void bench_rms_norm_cuda(CudaBench& bench) {
  for (int64_t rows : {1, 32, 2048}) {
    bench_case(bench, "(Llama-3-8B hidden)", rows, 4096, 1, 4096, DType::kF32, DType::kBF16, false);
  }
  for (int64_t rows : {1, 32, 2048}) {
    bench_case(bench, "(Qwen3 q norm, fused QKV row, in place)", rows, 128, 32, 48 * 128, DType::kBF16,
               DType::kBF16, true);
  }
}

}  // namespace mmserve::kernels
