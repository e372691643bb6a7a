// w4a16_gemm_cuda at Llama-3-8B's linears (N x K: qkv 6144 x 4096, o 4096 x 4096, gate_up 28672 x 4096, down
// 4096 x 14336), group size 128, bf16, M = 1..128, against cuBLASLt bf16 on the same shapes in the same run (our
// custom GEMV off: cuBLASLt alone, as the target reads). Rows: "w4a16 ours ..." with bytes = the packed
// weight and its scales / zeros (what the kernel must stream), "w4a16 cublaslt ..." with bytes = the bf16 weight.
// Each launch takes the next of several copies of the weights (together > 128 MB), so neither side is timed out of
// the 50 MB L2. After each pair a line gives the speedup and our bandwidth as a share of the device's HBM peak
// (memory clock x bus width x 2, from the device attributes). Run: kernels_cuda_bench --only w4a16 [--json F].
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm/gemm_cuda.h"
#include "kernels/testing/cuda_bench.h"
#include "kernels/w4a16/w4a16_cuda.h"
#include "kernels/w4a16/w4a16_layout.h"

namespace mmserve::kernels {
namespace {

constexpr size_t kRotateBytes = size_t{128} << 20;

// A packed weight of random 4-bit values, scales in [0.002, 0.03] and zeros 0..15 (no host packing: the layout's
// content does not change the kernel's time).
W4A16Packed random_packed(int64_t n, int64_t k, int64_t group_size, bool act_order, uint32_t seed) {
  std::mt19937 rng(seed);
  W4A16Packed w;
  w.n = n, w.k = k, w.group_size = group_size, w.groups = k / group_size, w.dtype = DType::kBF16;
  w.q.resize(static_cast<size_t>(n / 16 * (k / 64) * 128));
  for (uint32_t& v : w.q) v = static_cast<uint32_t>(rng());
  w.sz.resize(static_cast<size_t>(w.groups * (n / 16) * 32));
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  for (size_t i = 0; i < w.sz.size(); i += 2) {
    w.sz[i] = f32_to_bf16(scale(rng));
    w.sz[i + 1] = f32_to_bf16(w4a16_layout::kBaseBf16 + static_cast<float>(rng() % 16));
  }
  if (act_order) {
    w.perm.resize(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) w.perm[static_cast<size_t>(c)] = static_cast<int32_t>(c);
    std::shuffle(w.perm.begin(), w.perm.end(), rng);
  }
  return w;
}

double hbm_bytes_per_second() {
  int device = 0, clock_khz = 0, bus_bits = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
  return 2.0 * clock_khz * 1e3 * bus_bits / 8;  // double data rate
}

struct Linear {
  const char* name;
  int64_t n, k;
  bool act_order;
};

void bench_linear(CudaBench& bench, CublasLtGemm& gemm, const Linear& s, double hbm) {
  const int64_t group_size = 128;
  const W4A16Packed host = random_packed(s.n, s.k, group_size, s.act_order, 1);
  const double packed_bytes = static_cast<double>(host.q.size() * 4 + host.sz.size() * 2);
  const double bf16_bytes = 2.0 * s.n * s.k;
  std::vector<std::unique_ptr<W4A16Buffers>> ours;
  for (size_t i = 0; i < std::max<size_t>(1, kRotateBytes / static_cast<size_t>(packed_bytes) + 1); ++i) {
    auto up = w4a16_upload(host);
    if (!up.ok()) {
      std::fprintf(stderr, "w4a16 %s: %s\n", s.name, up.status().to_string().c_str());
      return;
    }
    ours.push_back(std::move(*up));
  }
  std::vector<void*> theirs;
  for (size_t i = 0; i < std::max<size_t>(1, kRotateBytes / static_cast<size_t>(bf16_bytes) + 1); ++i) {
    theirs.push_back(device_random(DType::kBF16, s.n * s.k, 7 + static_cast<uint32_t>(i)));
  }
  const int64_t m_max = 128;
  void* x = device_random(DType::kBF16, m_max * s.k, 2);
  void* y = nullptr;
  void* ws = nullptr;
  const size_t ws_bytes = w4a16_workspace_bytes(m_max, ours[0]->view);
  cudaMalloc(&y, static_cast<size_t>(m_max * s.n) * 2);
  cudaMalloc(&ws, ws_bytes);
  cudaMemset(ws, 0, ws_bytes);  // the split-K counters (w4a16_cuda.h)
  for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128}) {
    const std::string shape = std::string(s.name) + " bf16 M=" + std::to_string(m) + " N=" + std::to_string(s.n) +
                              " K=" + std::to_string(s.k) + " g128" + (s.act_order ? " act-order" : "");
    const double flops = 2.0 * m * s.n * s.k;
    size_t i = 0;
    Status status = ok_status();
    const size_t need = w4a16_workspace_bytes(m, ours[0]->view);
    const double us_ours = bench.run("w4a16", "ours " + shape, flops, packed_bytes, [&] {
      const Status st =
          w4a16_gemm_cuda(x, DType::kBF16, m, ours[i++ % ours.size()]->view, y, ws, need, &gemm, bench.stream());
      if (!st.ok()) status = st;
    });
    if (!status.ok()) std::fprintf(stderr, "w4a16 %s: %s\n", shape.c_str(), status.to_string().c_str());
    GemmCudaArgs args;
    args.m = m, args.n = s.n, args.k = s.k, args.a = x, args.lda = s.k, args.ldw = s.k;
    args.in_dtype = DType::kBF16, args.d = y, args.ldd = s.n, args.out_dtype = DType::kBF16;
    size_t j = 0;
    const double us_cublas = bench.run("w4a16", "cublaslt " + shape, flops, bf16_bytes, [&] {
      args.w = theirs[j++ % theirs.size()];
      const Status st = gemm.run(args, bench.stream());
      if (!st.ok()) status = st;
    });
    if (!status.ok()) std::fprintf(stderr, "w4a16 cublaslt %s: %s\n", shape.c_str(), status.to_string().c_str());
    std::printf("w4a16 %-44s ours %8.2f us  cuBLASLt %8.2f us  speedup %5.2fx  packed %7.1f GB/s = %5.1f%% of HBM\n",
                shape.c_str(), us_ours, us_cublas, us_cublas / us_ours, packed_bytes / us_ours * 1e-3,
                100.0 * packed_bytes / (us_ours * 1e-6) / hbm);
  }
  cudaFree(x), cudaFree(y), cudaFree(ws);
  for (void* p : theirs) cudaFree(p);
}

// Decode's M = 1 (and batch 32's M = 32) with the split count forced (split_k 1..16, capped at 256 / M; 0 = the
// planner's choice): how the time depends on the CTA count (waves, tails, the split-K fix-up), for the scheduling
// work. Run after every linear's rows, M = 1 first, so the launch order of the rows above (ncu's --launch-skip
// offsets) does not move.
void bench_split_sweep(CudaBench& bench, CublasLtGemm& gemm, const Linear& s, int64_t m, double hbm) {
  const W4A16Packed host = random_packed(s.n, s.k, 128, false, 1);
  const double packed_bytes = static_cast<double>(host.q.size() * 4 + host.sz.size() * 2);
  std::vector<std::unique_ptr<W4A16Buffers>> ours;
  for (size_t i = 0; i < std::max<size_t>(1, kRotateBytes / static_cast<size_t>(packed_bytes) + 1); ++i) {
    auto up = w4a16_upload(host);
    if (!up.ok()) return;
    ours.push_back(std::move(*up));
  }
  void* x = device_random(DType::kBF16, m * s.k, 2);
  void* y = nullptr;
  void* ws = nullptr;
  const size_t ws_bytes = w4a16_workspace_bytes(m, ours[0]->view, 16);
  cudaMalloc(&y, static_cast<size_t>(m * s.n) * 2);
  cudaMalloc(&ws, ws_bytes);
  cudaMemset(ws, 0, ws_bytes);
  for (int split : {0, 1, 2, 3, 4, 5, 6, 8, 12, 16}) {
    if (split > 0 && split > std::max<int64_t>(1, 256 / m)) continue;  // capped to the same count as a smaller one
    const std::string shape = std::string(s.name) + " bf16 M=" + std::to_string(m) + " N=" + std::to_string(s.n) +
                              " K=" + std::to_string(s.k) + " g128 split_k=" + std::to_string(split);
    size_t i = 0;
    Status status = ok_status();
    const size_t need = w4a16_workspace_bytes(m, ours[0]->view, split);
    const double us = bench.run("w4a16_split", "ours " + shape, 2.0 * m * s.n * s.k, packed_bytes, [&] {
      const Status st = w4a16_gemm_cuda(x, DType::kBF16, m, ours[i++ % ours.size()]->view, y, ws, need, &gemm,
                                        bench.stream(), {}, split);
      if (!st.ok()) status = st;
    });
    if (!status.ok()) std::fprintf(stderr, "w4a16 %s: %s\n", shape.c_str(), status.to_string().c_str());
    std::printf("w4a16_split %-52s %8.2f us  %5.1f%% of HBM\n", shape.c_str(), us,
                100.0 * packed_bytes / (us * 1e-6) / hbm);
  }
  cudaFree(x), cudaFree(y), cudaFree(ws);
}

}  // namespace

void bench_w4a16_cuda(CudaBench& bench) {
  void* workspace = nullptr;
  cudaMalloc(&workspace, CublasLtGemm::kDefaultWorkspaceBytes);
  auto created = CublasLtGemm::create(workspace, CublasLtGemm::kDefaultWorkspaceBytes);
  if (!created.ok()) {
    std::fprintf(stderr, "w4a16 bench: %s\n", created.status().to_string().c_str());
    cudaFree(workspace);
    return;
  }
  CublasLtGemm& gemm = **created;
  gemm.set_custom_kernels(false);  // the baseline is cuBLASLt itself
  const double hbm = hbm_bytes_per_second();
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("w4a16 bench on %s: HBM peak %.2f TB/s (memory clock x bus width), %d SMs\n", prop.name, hbm * 1e-12,
              prop.multiProcessorCount);
  const Linear linears[] = {{"qkv", 6144, 4096, false},
                            {"o", 4096, 4096, false},
                            {"gate_up", 28672, 4096, false},
                            {"down", 4096, 14336, false},
                            {"o", 4096, 4096, true}};
  for (const Linear& s : linears) bench_linear(bench, gemm, s, hbm);
  for (int64_t m : {1, 32}) {
    for (int i = 0; i < 4; ++i) bench_split_sweep(bench, gemm, linears[i], m, hbm);
  }
  created->reset();
  cudaFree(workspace);
}

}  // namespace mmserve::kernels
