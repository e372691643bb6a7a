// Micro-benchmark of pil_resize_cuda() on the server's image batches: 64 images 224x224 -> CLIP 224 (identity +
// crop: a copy into CHW), 64 images 640x480 -> CLIP 224 (bicubic to 298x224, centre crop 224), 8 images 1500x1000
// -> SAM 1024 (bilinear to 1024x683, padded to 1024x1024). Tables from pil_like_table (PIL's tap geometry, so the
// same work as the real ones). Prints ms per batch and images/s beside the CPU twin (pil_resize_cpu, one thread)
// on the same batch; `bytes` = source read + levels written. Run: kernels_cuda_bench --only pil_resize.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/pil_resize/pil_resize.h"
#include "kernels/pil_resize/pil_resize_cuda.h"
#include "kernels/pil_resize/pil_resize_test_util.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {
namespace {

using pil_resize_test::HostBatch;

// Median wall milliseconds of `runs` calls of the CPU twin.
double cpu_ms(const HostBatch& hb, int runs) {
  std::vector<uint8_t> scratch(static_cast<size_t>(hb.scratch_bytes)), out(hb.out_bytes());
  const PilResizeBatch b = hb.batch(hb.src.data(), hb.tables.data(), scratch.data(), out.data());
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    (void)pil_resize_cpu(b);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench_case(CudaBench& bench, const std::string& shape, const HostBatch& hb) {
  void *src = nullptr, *tables = nullptr, *scratch = nullptr, *out = nullptr;
  const bool allocated =
      cudaMalloc(&src, hb.src.size()) == cudaSuccess &&
      cudaMalloc(&tables, std::max<size_t>(hb.tables.size(), 1) * 4) == cudaSuccess &&
      cudaMalloc(&scratch, static_cast<size_t>(std::max<int64_t>(hb.scratch_bytes, 1))) == cudaSuccess &&
      cudaMalloc(&out, hb.out_bytes()) == cudaSuccess;
  if (allocated) {
    cudaMemcpy(src, hb.src.data(), hb.src.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(tables, hb.tables.data(), hb.tables.size() * 4, cudaMemcpyHostToDevice);
  }
  const PilResizeBatch b = hb.batch(static_cast<const uint8_t*>(src), static_cast<const int32_t*>(tables),
                                    static_cast<uint8_t*>(scratch), static_cast<uint8_t*>(out));
  const Status first = allocated ? pil_resize_cuda(b, bench.stream()) : internal_error("cudaMalloc failed");
  if (first.ok()) {
    const double bytes = static_cast<double>(hb.src.size() + hb.out_bytes());
    const double us = bench.run("pil_resize", shape, 0, bytes, [&] { (void)pil_resize_cuda(b, bench.stream()); });
    const double cpu = cpu_ms(hb, 3);
    const double n = static_cast<double>(hb.images.size());
    std::printf("pil_resize %s: GPU %.3f ms/batch (%.0f images/s); CPU twin, 1 thread: %.2f ms/batch (%.0f images/s)\n",
                shape.c_str(), us * 1e-3, n / (us * 1e-6), cpu, n / (cpu * 1e-3));
  } else {
    std::fprintf(stderr, "pil_resize %s: %s\n", shape.c_str(), first.to_string().c_str());
  }
  cudaFree(src);
  cudaFree(tables);
  cudaFree(scratch);
  cudaFree(out);
}

pil_resize_test::TableFn table_for(double support_base) {
  return [support_base](int in, int out, int start, int count) {
    return pil_resize_test::pil_like_table(in, out, start, count, support_base, 1, 0.0);
  };
}

HostBatch clip_batch(int n, int w, int h) {
  HostBatch hb(224, 224);
  const auto [rw, rh] = pil_resize_test::shortest_edge_resized(w, h, 224);
  for (int i = 0; i < n; ++i) {
    hb.add(pil_resize_test::random_pixels(w, h, static_cast<uint32_t>(i)), w, h,
           pil_resize_test::center_crop_placement(rw, rh, 224, 224), table_for(2.0));
  }
  return hb;
}

HostBatch sam_batch(int n, int w, int h) {
  HostBatch hb(1024, 1024);
  const auto [rw, rh] = pil_resize_test::longest_edge_resized(w, h, 1024);
  for (int i = 0; i < n; ++i) {
    hb.add(pil_resize_test::random_pixels(w, h, static_cast<uint32_t>(i)), w, h, pil_resize_test::pad_placement(rw, rh),
           table_for(1.0));
  }
  return hb;
}

}  // namespace

void bench_pil_resize_cuda(CudaBench& bench) {
  bench_case(bench, "n=64 224x224 -> clip 224 (identity + crop)", clip_batch(64, 224, 224));
  bench_case(bench, "n=64 640x480 -> clip 224 (bicubic)", clip_batch(64, 640, 480));
  bench_case(bench, "n=8 1500x1000 -> sam 1024 (bilinear + pad)", sam_batch(8, 1500, 1000));
}

}  // namespace mmserve::kernels
