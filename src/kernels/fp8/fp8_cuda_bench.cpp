// The scaled FP8 GEMM against bf16 on the same cuBLASLt handle, at Llama-3-8B's linear shapes from decode batches to
// prefill (issue 17's target: FP8 >= 1.7x bf16 at M >= 2048; cuBLASLt's ~1.6-1.75x is the anchor), per-tensor and
// rowwise scales; and the activation quantisers' bandwidth. Rows "fp8 ..." and "bf16 ..." of one shape are the pair
// whose time ratio docs/perf/fp8.md reports.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "kernels/fp8/fp8_cuda.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {

void bench_fp8_cuda(CudaBench& bench) {
  void* workspace = nullptr;
  cudaMalloc(&workspace, CublasLtGemm::kDefaultWorkspaceBytes);
  auto created = CublasLtGemm::create(workspace, CublasLtGemm::kDefaultWorkspaceBytes);
  if (!created.ok()) {
    std::fprintf(stderr, "fp8 bench: %s\n", created.status().to_string().c_str());
    return;
  }
  CublasLtGemm& gemm = **created;
  gemm.set_custom_kernels(false);  // cuBLASLt for bf16 at every M: the like-for-like pair
  struct Shape {
    const char* what;
    int64_t n, k;
  };
  const Shape shapes[] = {{"8B qkv", 6144, 4096}, {"8B o", 4096, 4096}, {"8B gate_up", 28672, 4096},
                          {"8B down", 4096, 14336}, {"ceiling", 8192, 8192}};
  const int64_t max_m = 8192;
  void *a16 = nullptr, *w16 = nullptr, *a8 = nullptr, *w8 = nullptr, *d = nullptr, *scales = nullptr;
  cudaMalloc(&a16, max_m * 14336 * 2);
  cudaMalloc(&w16, 28672 * 4096 * 2);
  cudaMalloc(&a8, max_m * 14336);
  cudaMalloc(&w8, 28672 * 4096);
  cudaMalloc(&d, max_m * 28672 * 2);
  cudaMalloc(&scales, (max_m + 28672) * sizeof(float));
  cudaMemset(a16, 0x3c, max_m * 14336 * 2);  // small finite values (0x3c3c as bf16 ~ 0.0115)
  cudaMemset(w16, 0x3c, 28672 * 4096 * 2);
  cudaMemset(a8, 0x30, max_m * 14336);  // 0x30 as e4m3 = 0.5
  cudaMemset(w8, 0x30, 28672 * 4096);
  cudaMemset(scales, 0, (max_m + 28672) * sizeof(float));  // zero scales: the bytes moved are what counts
  float* a_scale = static_cast<float*>(scales);
  float* w_scale = a_scale + max_m;
  for (const Shape& s : shapes) {
    for (int64_t m : {1, 16, 64, 256, 1024, 2048, 4096, 8192}) {
      if (s.n == 8192 && m != 8192) continue;  // the ceiling shape once
      const double flops = 2.0 * m * s.n * s.k;
      char shape[160];
      Status status = ok_status();
      GemmCudaArgs b;
      b.m = m, b.n = s.n, b.k = s.k, b.a = a16, b.lda = s.k, b.w = w16, b.ldw = s.k, b.in_dtype = DType::kBF16;
      b.d = d, b.ldd = s.n, b.out_dtype = DType::kBF16;
      std::snprintf(shape, sizeof shape, "bf16 %s M=%ld N=%ld K=%ld", s.what, (long)m, (long)s.n, (long)s.k);
      bench.run("fp8", shape, flops, 2.0 * (m * s.k + s.n * s.k + m * s.n), [&] {
        Status st = gemm.run(b, bench.stream());
        if (!st.ok()) status = st;
      });
      for (Fp8ScaleMode mode : {Fp8ScaleMode::kTensor, Fp8ScaleMode::kRowwise}) {
        Fp8GemmCudaArgs f;
        f.m = m, f.n = s.n, f.k = s.k, f.a = a8, f.lda = s.k, f.w = w8, f.ldw = s.k, f.scale_mode = mode;
        f.a_scale = a_scale, f.w_scale = w_scale, f.d = d, f.ldd = s.n, f.out_dtype = DType::kBF16;
        std::snprintf(shape, sizeof shape, "fp8 %s %s M=%ld N=%ld K=%ld", mode == Fp8ScaleMode::kTensor ? "tensor" : "rowwise",
                      s.what, (long)m, (long)s.n, (long)s.k);
        bench.run("fp8", shape, flops, 1.0 * (m * s.k + s.n * s.k) + 2.0 * m * s.n, [&] {
          Status st = gemm.run_fp8(f, bench.stream());
          if (!st.ok()) status = st;
        });
      }
      if (!status.ok()) std::fprintf(stderr, "fp8 %s: %s\n", shape, status.to_string().c_str());
    }
  }
  // The per-token quantiser ahead of each FP8 GEMM of a prefill (bf16 activations in, codes and scales out).
  for (int64_t m : {16, 2048, 8192}) {
    for (int64_t k : {4096, 14336}) {
      Fp8QuantizeCudaArgs q{a16, DType::kBF16, m, k, k, Fp8Format::kE4M3, static_cast<uint8_t*>(a8), k};
      char shape[96];
      std::snprintf(shape, sizeof shape, "quantize rows bf16 M=%ld K=%ld", (long)m, (long)k);
      Status status = ok_status();
      bench.run("fp8", shape, 0, 3.0 * m * k, [&] {
        Status st = fp8_quantize_rows_cuda(q, a_scale, bench.stream());
        if (!st.ok()) status = st;
      });
      if (!status.ok()) std::fprintf(stderr, "fp8 %s: %s\n", shape, status.to_string().c_str());
    }
  }
  created->reset();
  for (void* p : {a16, w16, a8, w8, d, scales, workspace}) cudaFree(p);
}

}  // namespace mmserve::kernels
