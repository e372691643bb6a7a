// The CUDA kernel micro-benchmarks: one executable (kernels_cuda_bench) that times each kernel with CUDA
// events on realistic CLIP shapes and prints achieved TFLOP/s or GB/s next to the card's ceilings.
//
// Each op provides `void bench_<op>_cuda(CudaBench&)` in <op>/<op>_cuda_bench.cpp and registers it in
// testing/cuda_bench_main.cpp. Times are the median of `iterations` launches after warm-up, each launch
// bracketed by events on one stream (so launch overhead counts, as it does in a real forward without graphs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mmserve::kernels {

struct CudaBenchRow {
  std::string op;     // "gemm", "attention", ...
  std::string shape;  // "bf16 M=12800 N=2304 K=768"
  double us = 0;      // median microseconds per call
  double flops = 0;   // floating-point operations per call (0 for memory-bound ops)
  double bytes = 0;   // bytes read + written per call (0 when not meaningful)
};

class CudaBench {
 public:
  explicit CudaBench(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream() const { return stream_; }
  // Times `launch` (which enqueues work on stream()) and records a row. Returns the median microseconds.
  double run(const std::string& op, const std::string& shape, double flops, double bytes,
             const std::function<void()>& launch, int warmup = 5, int iterations = 50);
  const std::vector<CudaBenchRow>& rows() const { return rows_; }

 private:
  cudaStream_t stream_;
  std::vector<CudaBenchRow> rows_;
};

// `count` values uniform in [-1, 1] (never time on zeros) in a new device allocation of `dtype`, or nullptr.
inline void* device_random(DType dtype, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * size);
  for (int64_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(bytes.data() + i * size, dtype == DType::kF32 ? static_cast<const void*>(&v) : &h, size);
  }
  void* device = nullptr;
  if (cudaMalloc(&device, bytes.size()) != cudaSuccess) return nullptr;
  if (cudaMemcpy(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(device);
    return nullptr;
  }
  return device;
}

void bench_gemm_cuda(CudaBench& bench);
void bench_attention_cuda(CudaBench& bench);
void bench_layer_norm_cuda(CudaBench& bench);
void bench_activation_cuda(CudaBench& bench);
void bench_embedding_cuda(CudaBench& bench);
void bench_patch_embed_cuda(CudaBench& bench);
void bench_l2_normalize_cuda(CudaBench& bench);
void bench_attention_kv_cuda(CudaBench& bench);
void bench_kv_cache_cuda(CudaBench& bench);
void bench_im2col_1d_cuda(CudaBench& bench);
void bench_mask_resize_cuda(CudaBench& bench);
void bench_pixel_levels_cuda(CudaBench& bench);
void bench_png_inflate_cuda(CudaBench& bench);
void bench_pil_resize_cuda(CudaBench& bench);
void bench_paged_attention_cuda(CudaBench& bench);  // the decoders (issue 14)
void bench_rms_norm_cuda(CudaBench& bench);
void bench_rope_cuda(CudaBench& bench);
void bench_swiglu_cuda(CudaBench& bench);
void bench_moe_cuda(CudaBench& bench);
void bench_lora_cuda(CudaBench& bench);
void bench_sampling_cuda(CudaBench& bench);
void bench_fp8_cuda(CudaBench& bench);  // issue 17
void bench_w4a16_cuda(CudaBench& bench);  // issue 17

}  // namespace mmserve::kernels
