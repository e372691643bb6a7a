// cuBLASLt GEMM micro-benchmark: the projections of the real CLIP towers at their serving batch sizes, plus
// the square shape that measures the card's bf16 ceiling. Reports TFLOP/s (see testing/cuda_bench.h).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/gemm/gemm_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace mmserve::kernels {

void bench_gemm_cuda(CudaBench& bench) {
  void* workspace = nullptr;
  cudaMalloc(&workspace, CublasLtGemm::kDefaultWorkspaceBytes);
  auto created = CublasLtGemm::create(workspace, CublasLtGemm::kDefaultWorkspaceBytes);
  if (!created.ok()) {
    std::fprintf(stderr, "gemm bench: %s\n", created.status().to_string().c_str());
    return;
  }
  CublasLtGemm& gemm = **created;
  struct Shape {
    const char* what;
    int64_t m, n, k;
    DType out;
    bool bias;
    float beta;
    DType in = DType::kBF16;
  };
  // ViT-B/32 at batch 256 (12800 token rows), ViT-L/14 at batch 64 (16448 rows), text at 256 (19712 rows),
  // ViT-B/32 at batch 1 (50 rows), and the ceiling shape.
  const Shape shapes[] = {
      {"ceiling", 8192, 8192, 8192, DType::kBF16, false, 0.0f},
      {"B/32 b256 qkv", 12800, 2304, 768, DType::kBF16, true, 0.0f},
      {"B/32 b256 out_proj", 12800, 768, 768, DType::kF32, true, 1.0f},
      {"B/32 b256 fc1", 12800, 3072, 768, DType::kBF16, true, 0.0f},
      {"B/32 b256 fc2", 12800, 768, 3072, DType::kF32, true, 1.0f},
      {"L/14 b64 qkv", 16448, 3072, 1024, DType::kBF16, true, 0.0f},
      {"L/14 b64 fc1", 16448, 4096, 1024, DType::kBF16, true, 0.0f},
      {"L/14 b64 fc2", 16448, 1024, 4096, DType::kF32, true, 1.0f},
      {"text b256 fc1", 19712, 2048, 512, DType::kBF16, true, 0.0f},
      {"B/32 b1 fc1", 50, 3072, 768, DType::kBF16, true, 0.0f},
      // SAM's prompt decoder (f32, 8 tokens): the small-M path (gemm_small_m_cuda.h), and a 4096-row projection.
      {"SAM dec self q", 8, 256, 256, DType::kF32, true, 0.0f, DType::kF32},
      {"SAM dec t2i q", 8, 128, 256, DType::kF32, true, 0.0f, DType::kF32},
      {"SAM dec out", 8, 256, 128, DType::kF32, true, 1.0f, DType::kF32},
      {"SAM dec image k", 4096, 128, 256, DType::kF32, true, 0.0f, DType::kF32},
  };
  // Llama-3-8B's decode projections at batch 1..64 (bf16 weights; o and down write the f32 residual, beta 1):
  // cuBLASLt's at every M, ours (the GEMV, gemm_small_m_cuda.h) at M = 1, in GB/s of the bytes moved. The o and
  // qkv weights (33 and 50 MB) partly stay in the 50 MB L2 across repetitions, which flatters both sides.
  std::vector<Shape> all(std::begin(shapes), std::end(shapes));
  std::vector<bool> custom(all.size(), true);
  for (int64_t m : {1, 2, 4, 8, 16, 32, 64}) {
    for (bool ours : {true, false}) {
      if (ours && m > 1) continue;
      all.push_back({ours ? "8B qkv ours" : "8B qkv cublaslt", m, 6144, 4096, DType::kBF16, false, 0.0f});
      all.push_back({ours ? "8B o ours" : "8B o cublaslt", m, 4096, 4096, DType::kF32, false, 1.0f});
      all.push_back({ours ? "8B gate_up ours" : "8B gate_up cublaslt", m, 28672, 4096, DType::kBF16, false, 0.0f});
      all.push_back({ours ? "8B down ours" : "8B down cublaslt", m, 4096, 14336, DType::kF32, false, 1.0f});
      custom.resize(all.size(), ours);
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const Shape& s = all[i];
    gemm.set_custom_kernels(custom[i]);
    void *a = nullptr, *w = nullptr, *d = nullptr, *bias = nullptr;
    const size_t out_size = dtype_size(s.out);
    const size_t in_size = dtype_size(s.in);
    cudaMalloc(&a, s.m * s.k * in_size);
    cudaMalloc(&w, s.n * s.k * in_size);
    cudaMalloc(&d, s.m * s.n * out_size);
    cudaMalloc(&bias, s.n * out_size);
    cudaMemset(a, 0x3c, s.m * s.k * in_size);  // small finite values (0x3c3c as bf16 ~ 0.0115; f32 ~ 0.0115)
    cudaMemset(w, 0x3c, s.n * s.k * in_size);
    cudaMemset(d, 0, s.m * s.n * out_size);
    cudaMemset(bias, 0, s.n * out_size);
    GemmCudaArgs args;
    args.m = s.m, args.n = s.n, args.k = s.k;
    args.a = a, args.lda = s.k, args.w = w, args.ldw = s.k, args.in_dtype = s.in;
    args.d = d, args.ldd = s.n, args.out_dtype = s.out, args.bias = s.bias ? bias : nullptr, args.beta = s.beta;
    const double flops = 2.0 * s.m * s.n * s.k;
    const double bytes = static_cast<double>(in_size) * (s.m * s.k + s.n * s.k) + out_size * s.m * s.n * (s.beta != 0 ? 2 : 1);
    char shape[160];
    std::snprintf(shape, sizeof shape, "%s %s->%s M=%ld N=%ld K=%ld", s.what, dtype_name(s.in), dtype_name(s.out), (long)s.m, (long)s.n,
                  (long)s.k);
    Status status = ok_status();
    bench.run("gemm", shape, flops, bytes, [&] {
      Status st = gemm.run(args, bench.stream());
      if (!st.ok()) status = st;
    });
    if (!status.ok()) std::fprintf(stderr, "gemm %s: %s\n", shape, status.to_string().c_str());
    cudaFree(a), cudaFree(w), cudaFree(d), cudaFree(bias);
  }
  gemm.set_custom_kernels(true);
  created->reset();
  cudaFree(workspace);
}

}  // namespace mmserve::kernels
