// Benchmark of attention_kv_cuda() on Whisper large-v3's shapes (20 heads x 64): the decode step (q_len 1)
// over the self-attention KV cache (kv_len 128) and over the cross-attention K/V (kv_len 1500, bf16 and
// FP8, and f16 with f16 / INT8 K/V; the self cache also at its 448 capacity, all keys visible) at batch 1 and 16,
// reported as achieved HBM GB/s (bytes = K and V read once plus q and out); and the
// encoder's self-attention (batch 1, 1500 frames) and a 448-token cross-attention prompt, reported as
// TFLOP/s (flops = 4 * batch * heads * q_len * kv_len * head_dim).
// Run: kernels_cuda_bench (all CUDA kernels, see testing/cuda_bench_main.cpp).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/attention/attention_kv_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

struct KvShape {
  const char* what;
  DType dtype;
  KvStorage storage;
  int64_t batch, q_len, kv_len;
  bool causal;
};

void bench_shape(CudaBench& bench, const KvShape& s) {
  const int64_t heads = 20, head_dim = 64, hidden = heads * head_dim;
  const size_t elem = dtype_size(s.dtype);
  const size_t kv_elem = s.storage == KvStorage::kSame ? elem : 1;
  const char* kv_name = s.storage == KvStorage::kFp8E4M3 ? " fp8-kv "
                        : s.storage == KvStorage::kInt8  ? " int8-kv "
                                                         : " ";
  const std::string shape = std::string(dtype_name(s.dtype)) + kv_name + s.what + " b=" + std::to_string(s.batch) +
                            " q=" + std::to_string(s.q_len) + " kv=" + std::to_string(s.kv_len) + " h=20 d=64";
  void* q = device_random(s.dtype, s.batch * s.q_len * hidden, 1);
  void* k = nullptr;
  void* v = nullptr;
  void* out = nullptr;
  float* scales = nullptr;
  const size_t kv_bytes = static_cast<size_t>(s.batch * s.kv_len * hidden) * kv_elem;
  if (s.storage == KvStorage::kSame) {
    k = device_random(s.dtype, s.batch * s.kv_len * hidden, 2);
    v = device_random(s.dtype, s.batch * s.kv_len * hidden, 3);
  } else if (cudaMalloc(&k, kv_bytes) == cudaSuccess && cudaMalloc(&v, kv_bytes) == cudaSuccess) {
    cudaMemset(k, 0x30, kv_bytes);  // 0.5 in E4M3
    cudaMemset(v, 0xB0, kv_bytes);  // -0.5
  }
  cudaMalloc(&out, static_cast<size_t>(s.batch * s.q_len * hidden) * elem);
  cudaMalloc(reinterpret_cast<void**>(&scales), static_cast<size_t>(s.batch * heads) * sizeof(float));
  AttentionKvArgs a;
  a.q = q;
  a.q_ld = hidden;
  a.k = k;
  a.v = v;
  a.kv_ld = hidden;
  a.kv_batch_stride = s.kv_len;
  a.out = out;
  a.out_ld = hidden;
  a.dtype = s.dtype;
  a.storage = s.storage;
  a.k_scale = scales;
  a.v_scale = scales;
  a.batch = s.batch;
  a.q_len = s.q_len;
  a.kv_len = s.kv_len;
  a.heads = heads;
  a.head_dim = head_dim;
  a.scale = 0.125f;
  a.causal = s.causal;
  const size_t ws = attention_kv_cuda_workspace_bytes(a);
  void* workspace = nullptr;
  if (ws > 0) cudaMalloc(&workspace, ws);
  a.workspace = workspace;
  a.workspace_bytes = ws;
  if (scales) cudaMemset(scales, 0, static_cast<size_t>(s.batch * heads) * sizeof(float));
  const Status status =
      q && k && v && out && scales ? attention_kv_cuda(a, bench.stream()) : resource_exhausted("cudaMalloc failed");
  if (!status.ok()) {
    std::fprintf(stderr, "attention_kv %s: %s\n", shape.c_str(), status.to_string().c_str());
  } else {
    const bool decode = s.q_len == 1;
    const double flops = decode ? 0.0 : 4.0 * s.batch * heads * s.q_len * s.kv_len * head_dim * (s.causal ? 0.5 : 1.0);
    const double bytes = 2.0 * kv_bytes + 2.0 * s.batch * s.q_len * hidden * elem;
    bench.run("attention_kv", shape, flops, bytes, [&] { (void)attention_kv_cuda(a, bench.stream()); });
  }
  cudaStreamSynchronize(bench.stream());
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(out);
  cudaFree(scales);
  cudaFree(workspace);
  cudaGetLastError();
}

}  // namespace

void bench_attention_kv_cuda(CudaBench& bench) {
  const KvShape shapes[] = {
      {"decode-self", DType::kBF16, KvStorage::kSame, 1, 1, 128, true},
      {"decode-self", DType::kBF16, KvStorage::kSame, 16, 1, 128, true},
      {"decode-cross", DType::kBF16, KvStorage::kSame, 1, 1, 1500, false},
      {"decode-cross", DType::kBF16, KvStorage::kSame, 16, 1, 1500, false},
      {"decode-cross", DType::kBF16, KvStorage::kFp8E4M3, 1, 1, 1500, false},
      {"decode-cross", DType::kBF16, KvStorage::kFp8E4M3, 16, 1, 1500, false},
      {"decode-cross", DType::kF16, KvStorage::kSame, 16, 1, 1500, false},
      {"decode-cross", DType::kF16, KvStorage::kInt8, 1, 1, 1500, false},
      {"decode-cross", DType::kF16, KvStorage::kInt8, 16, 1, 1500, false},
      {"decode-self", DType::kF16, KvStorage::kSame, 1, 1, 448, true},
      {"decode-self", DType::kF16, KvStorage::kSame, 16, 1, 448, true},
      {"encoder", DType::kBF16, KvStorage::kSame, 1, 1500, 1500, false},
      {"encoder", DType::kF16, KvStorage::kSame, 1, 1500, 1500, false},
      {"encoder", DType::kBF16, KvStorage::kSame, 16, 1500, 1500, false},
      {"prompt-cross", DType::kBF16, KvStorage::kSame, 1, 448, 1500, false},
  };
  for (const KvShape& s : shapes) bench_shape(bench, s);
}

}  // namespace mmserve::kernels
