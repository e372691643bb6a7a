// The CUDA kernel micro-benchmarks: one executable (kernels_cuda_bench) that times each kernel with CUDA
// events on realistic CLIP shapes and prints achieved TFLOP/s or GB/s next to the card's ceilings.
//
// Each op provides `void bench_<op>_cuda(CudaBench&)` in <op>/<op>_cuda_bench.cpp and registers it in
// testing/cuda_bench_main.cpp. Times are the median of `iterations` launches after warm-up, each launch
// bracketed by events on one stream (so launch overhead counts, as it does in a real forward without graphs).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

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

void bench_gemm_cuda(CudaBench& bench);
void bench_attention_cuda(CudaBench& bench);
void bench_layer_norm_cuda(CudaBench& bench);
void bench_activation_cuda(CudaBench& bench);
void bench_embedding_cuda(CudaBench& bench);
void bench_patch_embed_cuda(CudaBench& bench);
void bench_l2_normalize_cuda(CudaBench& bench);

}  // namespace mmserve::kernels
