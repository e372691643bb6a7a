// Micro-benchmarks of the patch-embedding kernels at CLIP ViT-B/32, batch 256 (224 x 224 images, 32 x 32
// patches, hidden 768, bf16 GEMM input): im2col (154 MB of f32 pixels read, 77 MB of bf16 patches written)
// and the class-token + position assembly (f32 GEMM output read, f32 residual written, bf16 class and
// position rows counted once: they stay in L2). Memory bound: `bytes` = bytes read + written.
// Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/patch_embed/patch_embed_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_im2col(CudaBench& bench, DType dtype, int64_t batch, int64_t channels, int64_t size, int64_t patch) {
  const int64_t grid = size / patch, rows = batch * grid * grid, patch_len = channels * patch * patch;
  auto* pixels = static_cast<float*>(device_random(DType::kF32, batch * channels * size * size, 1));
  void* patches = device_random(dtype, rows * patch_len, 2);
  const std::string shape = std::string(dtype_name(dtype)) + " batch=" + std::to_string(batch) + " " +
                            std::to_string(channels) + "x" + std::to_string(size) + "x" + std::to_string(size) +
                            " patch=" + std::to_string(patch) + " im2col";
  auto launch = [&] {
    return im2col_patches_cuda(pixels, batch, channels, size, patch, patches, dtype, bench.stream());
  };
  const Status first = pixels && patches ? launch() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = static_cast<double>(rows) * patch_len * (4 + dtype_size(dtype));
    bench.run("patch_embed", shape, 0, bytes, [&] { (void)launch(); });
  } else {
    std::fprintf(stderr, "patch_embed %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(pixels);
  cudaFree(patches);
}

void bench_assemble(CudaBench& bench, DType dtype, int64_t batch, int64_t patches, int64_t hidden) {
  const int64_t rows = batch * (patches + 1);
  auto* patch_out = static_cast<float*>(device_random(DType::kF32, batch * patches * hidden, 1));
  void* class_embedding = device_random(dtype, hidden, 2);
  void* positions = device_random(dtype, (patches + 1) * hidden, 3);
  auto* x = static_cast<float*>(device_random(DType::kF32, rows * hidden, 4));
  const std::string shape = std::string(dtype_name(dtype)) + " batch=" + std::to_string(batch) +
                            " patches=" + std::to_string(patches) + " hidden=" + std::to_string(hidden) + " assemble";
  auto launch = [&] {
    return assemble_vision_embeddings_cuda(patch_out, class_embedding, positions, dtype, batch, patches, hidden, x,
                                           bench.stream());
  };
  const Status first = patch_out && class_embedding && positions && x ? launch() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = static_cast<double>(batch) * patches * hidden * 4 + static_cast<double>(rows) * hidden * 4 +
                         static_cast<double>(patches + 2) * hidden * dtype_size(dtype);
    bench.run("patch_embed", shape, 0, bytes, [&] { (void)launch(); });
  } else {
    std::fprintf(stderr, "patch_embed %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(patch_out);
  cudaFree(class_embedding);
  cudaFree(positions);
  cudaFree(x);
}

}  // namespace

void bench_patch_embed_cuda(CudaBench& bench) {
  bench_im2col(bench, DType::kBF16, /*batch=*/256, /*channels=*/3, /*size=*/224, /*patch=*/32);
  bench_im2col(bench, DType::kBF16, 256, 3, 224, 14);  // ViT-L/14 geometry: 8-byte reads
  bench_assemble(bench, DType::kBF16, /*batch=*/256, /*patches=*/49, /*hidden=*/768);
}

}  // namespace mmserve::kernels
