// Micro-benchmark of the MoE routing kernels at Mixtral-8x7B's width (hidden 4096, 8 experts, top-2) and of a
// 32-expert layer, at a decode batch of 32 tokens and a 2048-token prefill: route, plan, permute (bf16) and combine
// (f32) one after another, as a layer runs them. `bytes`: the permute's and the combine's reads and writes.
// Then the experts' GEMMs of one layer, the grouped kernel (one launch for [w1; w3] with SwiGLU fused, one for w2)
// against one cuBLASLt GEMM per expert with rows plus the separate SwiGLU (the path it replaces; the host already
// knows the row counts here, so the baseline pays no synchronisation): Mixtral-8x7B at decode batches of 1, 32 and 256
// tokens and 32 experts at 512 and 2048 tokens, routing uniform with a +-25% skew. `bytes`: the experts' weights
// that have rows (the floor the layer can reach).
// Run: kernels_cuda_bench --only moe.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/swiglu/swiglu_cuda.h"
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

void bench_experts(CudaBench& bench, CublasLtGemm& gemm, int64_t tokens, int64_t experts, int64_t k, int64_t hidden,
                   int64_t inter) {
  const int64_t pairs = tokens * k;
  std::vector<int32_t> offsets(static_cast<size_t>(experts + 1), 0);
  for (int64_t e = 0; e < experts; ++e) {  // uniform with a +-25% skew across the experts, summing to pairs
    const int64_t even = pairs / experts, skew = (e % 2 == 0 ? 1 : -1) * even / 4;
    offsets[e + 1] = static_cast<int32_t>(e + 1 == experts ? pairs : offsets[e] + even + skew);
  }
  auto device = [](size_t bytes) {
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
  };
  auto* x = device_random(DType::kBF16, pairs * hidden, 1);
  auto* w13 = device_random(DType::kBF16, experts * 2 * inter * hidden, 2);
  auto* w2 = device_random(DType::kBF16, experts * hidden * inter, 3);
  auto* gate_up = device(static_cast<size_t>(pairs * 2 * inter * 2));
  auto* act = device(static_cast<size_t>(pairs * inter * 2));
  auto* yp = device(static_cast<size_t>(pairs * hidden * 4));
  auto* d_offsets = static_cast<int32_t*>(device(offsets.size() * 4));
  const int64_t block_m = moe_grouped_gemm_block_m(pairs, experts);
  auto* tile_map = static_cast<int32_t*>(device(static_cast<size_t>(8 * moe_grouped_gemm_tiles(pairs, experts, block_m))));
  cudaStream_t s = bench.stream();
  if (!x || !w13 || !w2 || !gate_up || !act || !yp || !d_offsets || !tile_map) {
    std::fprintf(stderr, "moe experts: cudaMalloc failed\n");
    return;
  }
  cudaMemcpy(d_offsets, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice);
  auto bytes_at = [](void* p, int64_t elems, int64_t size) { return static_cast<uint8_t*>(p) + elems * size; };
  auto per_expert = [&] {
    Status st = ok_status();
    for (int64_t e = 0; e < experts && st.ok(); ++e) {
      const int64_t first = offsets[e], rows = offsets[e + 1] - offsets[e];
      if (rows == 0) continue;
      GemmCudaArgs g;
      g.m = rows, g.n = 2 * inter, g.k = hidden, g.a = bytes_at(x, first * hidden, 2), g.lda = hidden;
      g.w = bytes_at(w13, e * 2 * inter * hidden, 2), g.ldw = hidden, g.in_dtype = DType::kBF16;
      g.d = bytes_at(gate_up, first * 2 * inter, 2), g.ldd = 2 * inter, g.out_dtype = DType::kBF16;
      st = gemm.run(g, s);
    }
    SwigluArgs sw;
    sw.gate = gate_up, sw.up = bytes_at(gate_up, inter, 2), sw.in_dtype = DType::kBF16, sw.in_ld = 2 * inter;
    sw.rows = pairs, sw.cols = inter, sw.y = act, sw.y_dtype = DType::kBF16, sw.y_ld = inter;
    if (st.ok()) st = swiglu_cuda(sw, s);
    for (int64_t e = 0; e < experts && st.ok(); ++e) {
      const int64_t first = offsets[e], rows = offsets[e + 1] - offsets[e];
      if (rows == 0) continue;
      GemmCudaArgs g;
      g.m = rows, g.n = hidden, g.k = inter, g.a = bytes_at(act, first * inter, 2), g.lda = inter;
      g.w = bytes_at(w2, e * hidden * inter, 2), g.ldw = inter, g.in_dtype = DType::kBF16;
      g.d = bytes_at(yp, first * hidden, 4), g.ldd = hidden, g.out_dtype = DType::kF32;
      st = gemm.run(g, s);
    }
    return st;
  };
  auto grouped = [&] {
    Status st = moe_tile_map_cuda(d_offsets, pairs, experts, block_m, tile_map, s);
    MoeGroupedGemmArgs g;
    g.a = x, g.lda = hidden, g.w = w13, g.w_stride = 2 * inter * hidden, g.offsets = d_offsets;
    g.experts = experts, g.rows = pairs, g.n = inter, g.k = hidden, g.swiglu = true, g.y = act;
    g.y_dtype = DType::kBF16, g.ldy = inter, g.block_m = block_m, g.tile_map = tile_map;
    if (st.ok()) st = moe_grouped_gemm_cuda(g, s);
    g.a = act, g.lda = inter, g.w = w2, g.w_stride = hidden * inter, g.n = hidden, g.k = inter, g.swiglu = false;
    g.y = yp, g.y_dtype = DType::kF32, g.ldy = hidden;
    if (st.ok()) st = moe_grouped_gemm_cuda(g, s);
    return st;
  };
  int64_t active = 0;
  for (int64_t e = 0; e < experts; ++e) active += offsets[e + 1] > offsets[e];
  const double flops = 2.0 * pairs * 3 * inter * hidden, bytes = 2.0 * active * 3 * inter * hidden;
  const std::string shape = "tokens=" + std::to_string(tokens) + " E=" + std::to_string(experts) + " k=" +
                            std::to_string(k) + " hidden=" + std::to_string(hidden) + " inter=" +
                            std::to_string(inter) + " block_m=" + std::to_string(block_m);
  for (auto& [name, run] : {std::pair<const char*, std::function<Status()>>{"cublaslt per expert", per_expert},
                            std::pair<const char*, std::function<Status()>>{"grouped", grouped}}) {
    const Status first = run();
    if (!first.ok()) {
      std::fprintf(stderr, "moe %s %s: %s\n", name, shape.c_str(), first.to_string().c_str());
      continue;
    }
    bench.run("moe_experts", shape + " " + name, flops, bytes, [&] { (void)run(); }, 3, 20);
  }
  for (void* p : {x, w13, w2, gate_up, act, yp, static_cast<void*>(d_offsets), static_cast<void*>(tile_map)}) {
    cudaFree(p);
  }
}

}  // namespace

void bench_moe_cuda(CudaBench& bench) {
  for (int64_t tokens : {32, 2048}) {
    bench_case(bench, tokens, 8, 2, 4096);
    bench_case(bench, tokens, 32, 2, 4096);
  }
  void* workspace = nullptr;
  if (cudaMalloc(&workspace, CublasLtGemm::kDefaultWorkspaceBytes) != cudaSuccess) return;
  {
    auto gemm = CublasLtGemm::create(workspace, CublasLtGemm::kDefaultWorkspaceBytes);
    if (gemm.ok()) {
      bench_experts(bench, **gemm, 1, 8, 2, 4096, 14336);
      bench_experts(bench, **gemm, 32, 8, 2, 4096, 14336);
      bench_experts(bench, **gemm, 256, 8, 2, 4096, 14336);
      bench_experts(bench, **gemm, 512, 32, 2, 4096, 14336);
      bench_experts(bench, **gemm, 2048, 32, 2, 4096, 14336);
    }
  }  // the GEMM (and its plans) released before its workspace
  cudaFree(workspace);
}

}  // namespace mmserve::kernels
