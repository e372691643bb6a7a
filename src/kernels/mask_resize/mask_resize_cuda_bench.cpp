// Micro-benchmark of mask_resize_threshold_cuda() on a click's three masks (256 x 256 logits -> 1024 pad -> 683 x
// 1024 crop -> a 640 x 427 photo; and a 1920 x 1080 one). `bytes` = logits read once + masks written; the logits
// sit in L2, so the microseconds are the number to watch (the CPU twin takes ~1.3 ms on 16 cores).
// Run: kernels_cuda_bench.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/mask_resize/mask_resize_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

void bench_case(CudaBench& bench, const MaskResizeShape& s) {
  const size_t in = static_cast<size_t>(s.k) * s.in_h * s.in_w, out = static_cast<size_t>(s.k) * s.out_h * s.out_w;
  std::vector<float> host(in);
  for (size_t i = 0; i < in; ++i) host[i] = static_cast<float>(static_cast<int>(i % 97) - 48) / 8.0f;
  void* logits = nullptr;
  void* masks = nullptr;
  if (cudaMalloc(&logits, in * sizeof(float)) == cudaSuccess && cudaMalloc(&masks, out) == cudaSuccess) {
    cudaMemcpy(logits, host.data(), in * sizeof(float), cudaMemcpyHostToDevice);
  }
  const std::string shape = "k=" + std::to_string(s.k) + " " + std::to_string(s.in_h) + "x" + std::to_string(s.in_w) +
                            " -> " + std::to_string(s.out_h) + "x" + std::to_string(s.out_w);
  auto launch = [&] {
    return mask_resize_threshold_cuda(static_cast<const float*>(logits), s, 0.0f, static_cast<uint8_t*>(masks),
                                      bench.stream());
  };
  const Status first = logits && masks ? launch() : internal_error("cudaMalloc failed");
  if (first.ok()) {
    bench.run("mask_resize", shape, 0, static_cast<double>(in * sizeof(float) + out), [&] { (void)launch(); });
  } else {
    std::fprintf(stderr, "mask_resize %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(logits);
  cudaFree(masks);
}

}  // namespace

void bench_mask_resize_cuda(CudaBench& bench) {
  bench_case(bench, {3, 256, 256, 1024, 1024, 683, 1024, 427, 640});
  bench_case(bench, {3, 256, 256, 1024, 1024, 576, 1024, 1080, 1920});
}

}  // namespace mmserve::kernels
