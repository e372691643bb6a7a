// lora_apply_cuda at Llama-3-8B's q_proj (4096 -> 4096) and down_proj (14336 -> 4096) widths, rank 16, bf16: a
// decode step of 32 rows each under its own adapter (32 slots), and 2048 prefill rows under one. `bytes`: the
// adapters' matrices read once per row that uses them plus x and y. Run: kernels_cuda_bench --only lora.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernels/lora/lora_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, int64_t rows, int64_t slots, int64_t in, int64_t out, int64_t rank) {
  auto* x = device_random(DType::kBF16, rows * in, 1);
  auto* y = device_random(DType::kBF16, rows * out, 2);
  auto* a = device_random(DType::kBF16, slots * rank * in, 3);
  auto* b = device_random(DType::kBF16, slots * out * rank, 4);
  std::vector<int32_t> row_slot(static_cast<size_t>(rows)), ranks(static_cast<size_t>(slots), static_cast<int32_t>(rank));
  for (int64_t r = 0; r < rows; ++r) row_slot[r] = static_cast<int32_t>(r % slots);
  std::vector<float> scales(static_cast<size_t>(slots), 2.0f);
  int32_t *d_slot = nullptr, *d_rank = nullptr;
  float *d_scale = nullptr, *t = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d_slot), rows * 4), cudaMalloc(reinterpret_cast<void**>(&d_rank), slots * 4);
  cudaMalloc(reinterpret_cast<void**>(&d_scale), slots * 4), cudaMalloc(reinterpret_cast<void**>(&t), rows * rank * 4);
  cudaMemcpy(d_slot, row_slot.data(), rows * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_rank, ranks.data(), slots * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_scale, scales.data(), slots * 4, cudaMemcpyHostToDevice);
  LoraCudaArgs p;
  p.x = x, p.x_ld = in, p.rows = rows, p.in = in, p.dtype = DType::kBF16, p.row_slot = d_slot;
  p.a = a, p.a_slot_stride = rank * in, p.b = b, p.b_slot_stride = out * rank, p.ranks = d_rank, p.scales = d_scale;
  p.r_max = rank, p.out = out, p.t = t, p.y = y, p.y_dtype = DType::kBF16, p.y_ld = out;
  const std::string shape = "rows=" + std::to_string(rows) + " slots=" + std::to_string(slots) + " in=" +
                            std::to_string(in) + " out=" + std::to_string(out) + " rank=" + std::to_string(rank);
  const Status first = lora_apply_cuda(p, bench.stream());
  if (first.ok()) {
    const double bytes = 2.0 * rows * rank * (in + out) + 2.0 * rows * (in + 2 * out);
    bench.run("lora", shape, 4.0 * rows * rank * (in + out), bytes, [&] { (void)lora_apply_cuda(p, bench.stream()); });
  } else {
    std::fprintf(stderr, "lora %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  for (void* ptr : {x, y, a, b, static_cast<void*>(d_slot), static_cast<void*>(d_rank), static_cast<void*>(d_scale),
                    static_cast<void*>(t)}) {
    cudaFree(ptr);
  }
}

}  // namespace

void bench_lora_cuda(CudaBench& bench) {
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{4096, 4096}, {14336, 4096}}) {
    bench_case(bench, 32, 32, in, out, 16);
    bench_case(bench, 2048, 1, in, out, 16);
  }
}

}  // namespace mmserve::kernels
