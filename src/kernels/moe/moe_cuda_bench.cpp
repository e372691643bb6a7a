// Micro-benchmark of the MoE routing kernels at Mixtral-8x7B's width (hidden 4096, 8 experts, top-2) and of a
// 32-expert layer, at a decode batch of 32 tokens and a 2048-token prefill: route, plan, permute (bf16) and combine
// (f32) one after another, as a layer runs them. `bytes`: the permute's and the combine's reads and writes.
// Run: kernels_cuda_bench --only moe.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/dtype.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, int64_t tokens, int64_t experts, int64_t k, int64_t hidden) {
  const int64_t pairs = tokens * k;
  auto* logits = static_cast<float*>(device_random(DType::kF32, tokens * experts, 1));
  auto* x = device_random(DType::kBF16, tokens * hidden, 2);
  auto* xp = device_random(DType::kBF16, pairs * hidden, 3);
  auto* yp = static_cast<float*>(device_random(DType::kF32, pairs * hidden, 4));
  auto* out = static_cast<float*>(device_random(DType::kF32, tokens * hidden, 5));
  auto device = [](size_t bytes) {
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
  };
  auto* ids = static_cast<int32_t*>(device(pairs * 4));  // written by the route kernel before they are read
  auto* weights = static_cast<float*>(device(pairs * 4));
  auto* offsets = static_cast<int32_t*>(device((experts + 1) * 4));
  auto* pair = static_cast<int32_t*>(device(pairs * 4));
  auto* row_of = static_cast<int32_t*>(device(pairs * 4));
  cudaStream_t s = bench.stream();
  auto layer = [&] {
    Status st = moe_route_cuda(logits, experts, tokens, experts, k, ids, weights, s);
    if (st.ok()) st = moe_plan_cuda(ids, tokens, experts, k, offsets, pair, row_of, s);
    if (st.ok()) st = moe_permute_cuda(x, hidden, DType::kBF16, pair, pairs, k, hidden, xp, hidden, s);
    if (st.ok()) st = moe_combine_cuda(yp, hidden, row_of, ids, weights, tokens, k, hidden, out, hidden, true, s);
    return st;
  };
  const std::string shape = "tokens=" + std::to_string(tokens) + " E=" + std::to_string(experts) +
                            " k=" + std::to_string(k) + " hidden=" + std::to_string(hidden);
  const Status first = logits && x && xp && yp && out ? layer() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = 2.0 * 2 * pairs * hidden + 4.0 * pairs * hidden + 8.0 * tokens * hidden;
    bench.run("moe", shape + " route+plan+permute+combine", 0, bytes, [&] { (void)layer(); });
  } else {
    std::fprintf(stderr, "moe %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  for (void* p : {static_cast<void*>(logits), x, xp, static_cast<void*>(yp), static_cast<void*>(out),
                  static_cast<void*>(ids), static_cast<void*>(weights), static_cast<void*>(offsets),
                  static_cast<void*>(pair), static_cast<void*>(row_of)}) {
    cudaFree(p);
  }
}

}  // namespace

void bench_moe_cuda(CudaBench& bench) {
  for (int64_t tokens : {32, 2048}) {
    bench_case(bench, tokens, 8, 2, 4096);
    bench_case(bench, tokens, 32, 2, 4096);
  }
}

}  // namespace mmserve::kernels
