// Benchmark of attention_cuda() on the CLIP shapes in bf16, q/k/v read from one fused QKV buffer as the
// model does: ViT-B/32 vision (seq 50, 12 heads) at batch 1 and 256, ViT-L/14 vision (seq 257, 16 heads) at
// batch 64, and the causal text tower (seq 77, 8 heads) at batch 256; head_dim 64 throughout.
// flops = 4 * batch * heads * seq^2 * head_dim (QK^T and PV), halved for causal (only the visible half of
// the pairs is computed, up to 16-key chunks); bytes = the qkv read plus the output written.
// Run: kernels_cuda_bench (all CUDA kernels, see testing/cuda_bench_main.cpp).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

struct AttentionShape {
  const char* model;
  int64_t batch, seq, heads, head_dim;
  bool causal;
};

// Pseudo-random bf16 words in [-1, 1] (a fixed LCG: the values only need to be ordinary numbers).
std::vector<uint16_t> random_bf16(size_t n) {
  std::vector<uint16_t> out(n);
  uint32_t state = 12345u;
  for (uint16_t& x : out) {
    state = state * 1664525u + 1013904223u;
    x = f32_to_bf16(static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f);
  }
  return out;
}

void bench_shape(CudaBench& bench, const AttentionShape& s) {
  const int64_t hidden = s.heads * s.head_dim;
  const int64_t rows = s.batch * s.seq;
  const std::string shape = std::string("bf16 ") + s.model + " b=" + std::to_string(s.batch) +
                            " t=" + std::to_string(s.seq) + " h=" + std::to_string(s.heads) +
                            " d=" + std::to_string(s.head_dim) + (s.causal ? " causal" : "");
  void* qkv = nullptr;
  void* out = nullptr;
  const size_t qkv_bytes = static_cast<size_t>(rows * 3 * hidden) * 2,
               out_bytes = static_cast<size_t>(rows * hidden) * 2;
  if (cudaMalloc(&qkv, qkv_bytes) != cudaSuccess || cudaMalloc(&out, out_bytes) != cudaSuccess) {
    std::fprintf(stderr, "attention %s: cudaMalloc failed\n", shape.c_str());
    cudaFree(qkv);
    cudaGetLastError();
    return;
  }
  const std::vector<uint16_t> host = random_bf16(qkv_bytes / 2);
  cudaMemcpy(qkv, host.data(), qkv_bytes, cudaMemcpyHostToDevice);

  AttentionCudaArgs args;
  args.qkv = qkv;
  args.qkv_ld = 3 * hidden;
  args.out = out;
  args.out_ld = hidden;
  args.dtype = DType::kBF16;
  args.batch = s.batch;
  args.seq = s.seq;
  args.heads = s.heads;
  args.head_dim = s.head_dim;
  args.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  args.causal = s.causal;
  const Status status = attention_cuda(args, bench.stream());
  if (!status.ok()) {
    std::fprintf(stderr, "attention %s: %s\n", shape.c_str(), status.to_string().c_str());
  } else {
    const double flops = 4.0 * s.batch * s.heads * s.seq * s.seq * s.head_dim * (s.causal ? 0.5 : 1.0);
    bench.run("attention", shape, flops, static_cast<double>(qkv_bytes + out_bytes),
              [&] { (void)attention_cuda(args, bench.stream()); });
  }
  cudaStreamSynchronize(bench.stream());
  cudaFree(qkv);
  cudaFree(out);
}

}  // namespace

void bench_attention_cuda(CudaBench& bench) {
  const AttentionShape shapes[] = {
      {"ViT-B/32", 1, 50, 12, 64, false},
      {"ViT-B/32", 256, 50, 12, 64, false},
      {"ViT-L/14", 64, 257, 16, 64, false},
      {"text", 256, 77, 8, 64, true},
  };
  for (const AttentionShape& s : shapes) bench_shape(bench, s);
}

}  // namespace mmserve::kernels
