// lora_apply_cuda at Llama-3-8B's groups, rank 16, bf16: q, k and v in one call (4096 -> 4096 | 1024 | 1024), o
// (4096 -> 4096), gate and up (4096 -> 14336 | 14336) and down (14336 -> 4096); a decode step of 32 rows each under
// its own adapter (32 slots), and 2048 prefill rows under one. `bytes`: the adapters' matrices read once per slot a
// step uses (the floor: a decode step reads every row's own adapter) plus x and y. Run: kernels_cuda_bench --only lora.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/lora/lora_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, const char* name, int64_t rows, int64_t slots, int64_t in,
                const std::vector<int64_t>& outs, int64_t rank) {
  const int targets = static_cast<int>(outs.size());
  int64_t width = 0;
  for (int64_t o : outs) width += o;
  std::vector<void*> owned;
  auto* x = device_random(DType::kBF16, rows * in, 1);
  auto* y = device_random(DType::kBF16, rows * width, 2);
  owned.insert(owned.end(), {x, y});
  std::vector<int32_t> row_slot(static_cast<size_t>(rows)),
      ranks(static_cast<size_t>(slots), static_cast<int32_t>(rank));
  for (int64_t r = 0; r < rows; ++r) row_slot[r] = static_cast<int32_t>(r % slots);
  std::vector<float> scales(static_cast<size_t>(slots), 2.0f);
  int32_t *d_slot = nullptr, *d_rank = nullptr;
  float *d_scale = nullptr, *ws = nullptr;
  const int64_t ws_floats = lora_cuda_workspace_floats(rows, in, rank, targets);
  cudaMalloc(reinterpret_cast<void**>(&d_slot), rows * 4), cudaMalloc(reinterpret_cast<void**>(&d_rank), slots * 4);
  cudaMalloc(reinterpret_cast<void**>(&d_scale), slots * 4), cudaMalloc(reinterpret_cast<void**>(&ws), ws_floats * 4);
  owned.insert(owned.end(), {d_slot, d_rank, d_scale, ws});
  cudaMemcpy(d_slot, row_slot.data(), rows * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_rank, ranks.data(), slots * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_scale, scales.data(), slots * 4, cudaMemcpyHostToDevice);
  LoraCudaArgs p;
  p.x = x, p.x_ld = in, p.rows = rows, p.in = in, p.dtype = DType::kBF16, p.row_slot = d_slot, p.r_max = rank;
  p.num_targets = targets, p.y_dtype = DType::kBF16, p.y_ld = width, p.workspace = ws, p.workspace_floats = ws_floats;
  int64_t column = 0;
  for (int t = 0; t < targets; ++t) {
    void* a = device_random(DType::kBF16, slots * rank * in, 3 + t);
    void* b = device_random(DType::kBF16, slots * outs[t] * rank, 13 + t);
    owned.insert(owned.end(), {a, b});
    p.target[t] = {a, rank * in, b, outs[t] * rank, d_rank, d_scale, outs[t], static_cast<uint8_t*>(y) + column * 2};
    column += outs[t];
  }
  const std::string shape = std::string(name) + " rows=" + std::to_string(rows) + " slots=" + std::to_string(slots) +
                            " in=" + std::to_string(in) + " out=" + std::to_string(width) +
                            " rank=" + std::to_string(rank);
  const Status first = lora_apply_cuda(p, bench.stream());
  if (first.ok()) {
    const double used = static_cast<double>(std::min(rows, slots));
    const double bytes = 2.0 * used * rank * (in * targets + width) + 2.0 * rows * (in + 2 * width);
    bench.run("lora", shape, 2.0 * rows * rank * (in * targets + width), bytes,
              [&] { (void)lora_apply_cuda(p, bench.stream()); });
  } else {
    std::fprintf(stderr, "lora %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  for (void* ptr : owned) cudaFree(ptr);
}

}  // namespace

void bench_lora_cuda(CudaBench& bench) {
  for (int64_t rows : {32, 2048}) {
    const int64_t slots = rows == 32 ? 32 : 1;
    bench_case(bench, "qkv", rows, slots, 4096, {4096, 1024, 1024}, 16);
    bench_case(bench, "o", rows, slots, 4096, {4096}, 16);
    bench_case(bench, "gate_up", rows, slots, 4096, {14336, 14336}, 16);
    bench_case(bench, "down", rows, slots, 14336, {4096}, 16);
  }
}

}  // namespace mmserve::kernels
