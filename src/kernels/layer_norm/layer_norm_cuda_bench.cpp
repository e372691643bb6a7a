// Micro-benchmark of layer_norm_cuda() at CLIP shapes: f32 residual rows in, bf16 GEMM input out. Memory
// bound, so `bytes` is x read once plus y written once (weight and bias are L2-resident, counted once) and
// the table's GB/s is the number to hold against HBM. x and y are ~60 MB, the size of the H200's L2, so
// successive calls rotate over kCopies buffers to time HBM rather than cache. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

constexpr int64_t kCopies = 4;

// One row of the table: y[rows, cols] = layer_norm(x[row_index or all rows of x_rows, cols]) in y_dtype.
void bench_case(CudaBench& bench, const std::string& label, int64_t x_rows, int64_t rows, int64_t cols, bool gather,
                DType y_dtype) {
  auto* x = static_cast<float*>(device_random(DType::kF32, kCopies * x_rows * cols, 1));
  auto* weight = static_cast<float*>(device_random(DType::kF32, cols, 2));
  auto* bias = static_cast<float*>(device_random(DType::kF32, cols, 3));
  auto* y = static_cast<uint8_t*>(device_random(y_dtype, kCopies * rows * cols, 4));
  void* row_index = nullptr;
  if (gather) {
    std::vector<int32_t> index(rows);
    for (int64_t i = 0; i < rows; ++i) index[i] = static_cast<int32_t>(i * (x_rows / rows));  // class tokens
    if (cudaMalloc(&row_index, rows * sizeof(int32_t)) == cudaSuccess) {
      cudaMemcpy(row_index, index.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice);
    }
  }
  LayerNormCudaArgs args;
  args.x = x;
  args.x_ld = cols;
  args.row_index = static_cast<const int32_t*>(row_index);
  args.weight = weight;
  args.bias = bias;
  args.rows = rows;
  args.cols = cols;
  args.y = y;
  args.y_dtype = y_dtype;
  args.y_ld = cols;
  const std::string shape = std::string(dtype_name(y_dtype)) + " rows=" + std::to_string(rows) +
                            " cols=" + std::to_string(cols) + " " + label;
  const Status first = (x && weight && bias && y && (row_index || !gather)) ? layer_norm_cuda(args, bench.stream())
                                                                            : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes =
        static_cast<double>(rows) * cols * (4 + dtype_size(y_dtype)) + 2.0 * cols * 4 + (gather ? rows * 4.0 : 0.0);
    int64_t call = 0;
    bench.run("layer_norm", shape, 0, bytes, [&] {
      const int64_t copy = call++ % kCopies;
      LayerNormCudaArgs a = args;
      a.x = x + copy * x_rows * cols;
      a.y = y + copy * rows * cols * dtype_size(y_dtype);
      (void)layer_norm_cuda(a, bench.stream());
    });
  } else {
    std::fprintf(stderr, "layer_norm %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(x);
  cudaFree(weight);
  cudaFree(bias);
  cudaFree(y);
  cudaFree(row_index);
}

}  // namespace

void bench_layer_norm_cuda(CudaBench& bench) {
  bench_case(bench, "(ViT-B/32 b256)", 12800, 12800, 768, false, DType::kBF16);
  bench_case(bench, "(text b256)", 19712, 19712, 512, false, DType::kBF16);
  bench_case(bench, "(ViT-B/32 b256, f32 out)", 12800, 12800, 768, false, DType::kF32);
  bench_case(bench, "(ViT-H width, block path)", 12800, 12800, 1280, false, DType::kBF16);
  bench_case(bench, "(ViT-B/32 b256 pooled, row_index)", 12800, 256, 768, true, DType::kBF16);
}

}  // namespace mmserve::kernels
