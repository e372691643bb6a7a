// Micro-benchmark of token_position_embedding_cuda() for CLIP's text tower at batch 256 (77 tokens, hidden
// 512, vocab 49408, bf16 tables). Memory bound: `bytes` counts the ids, one table row per token, the
// position rows once (they stay in L2) and the f32 output. Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/embedding/embedding_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, DType dtype, int64_t batch, int64_t seq, int64_t vocab, int64_t hidden) {
  const int64_t tokens = batch * seq;
  std::vector<int32_t> host_ids(tokens);
  std::mt19937 rng(5);
  for (int32_t& id : host_ids) id = static_cast<int32_t>(rng() % vocab);
  void* ids = nullptr;
  if (cudaMalloc(&ids, tokens * sizeof(int32_t)) == cudaSuccess) {
    cudaMemcpy(ids, host_ids.data(), tokens * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  void* table = device_random(dtype, vocab * hidden, 1);
  void* positions = device_random(dtype, seq * hidden, 2);
  auto* x = static_cast<float*>(device_random(DType::kF32, tokens * hidden, 3));
  const std::string shape = std::string(dtype_name(dtype)) + " batch=" + std::to_string(batch) +
                            " seq=" + std::to_string(seq) + " hidden=" + std::to_string(hidden) +
                            " vocab=" + std::to_string(vocab) + " (text b256)";
  auto launch = [&] {
    return token_position_embedding_cuda(static_cast<const int32_t*>(ids), batch, seq, table, positions, dtype, vocab,
                                         hidden, x, bench.stream());
  };
  const Status first = ids && table && positions && x ? launch() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = tokens * 4.0 + static_cast<double>(tokens) * hidden * (dtype_size(dtype) + 4) +
                         static_cast<double>(seq) * hidden * dtype_size(dtype);
    bench.run("embedding", shape, 0, bytes, [&] { (void)launch(); });
  } else {
    std::fprintf(stderr, "embedding %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(ids);
  cudaFree(table);
  cudaFree(positions);
  cudaFree(x);
}

}  // namespace

void bench_embedding_cuda(CudaBench& bench) {
  bench_case(bench, DType::kBF16, /*batch=*/256, /*seq=*/77, /*vocab=*/49408, /*hidden=*/512);
}

}  // namespace mmserve::kernels
