// GEMM on the GPU through cuBLASLt (the CUDA twin of gemm.h's `linear`): the projections of every model.
//
//   D[M, N] = alpha * A[M, K] @ W[N, K]^T + beta * D + bias[N]
// Row-major, device pointers, leading dimensions in elements. Few-row shapes go to our kernels instead: f32
// with M <= 64 and 16-bit with M = 1 (gemm_small_m_cuda.h). A and W share a dtype (f32, f16 or bf16); D is
// that dtype or f32 (16-bit inputs with an f32 output is how the encoder keeps its residual stream in f32:
// the output projections write x += ... with beta = 1). Accumulation is always f32; f32 inputs use plain
// f32 math (no TF32), so the f32 path stays a precise reference. bias (nullable) has D's dtype, [N].
// cuBLASLt is column-major, so the call computes D^T = W A^T: D^T is [N, M] column-major with ld = ldd,
// which is row-major D. Algorithms come from cuBLASLt's heuristic, cached per shape, so a forward captured
// into a CUDA graph makes no heuristic calls and no allocations (the workspace is given at creation).
// Tests: gemm_cuda_test.cpp (vs the CPU GEMM over odd shapes, every dtype, bias, beta); bench:
// gemm_cuda_bench.cpp (the CLIP shapes, TFLOP/s against the card's bf16 ceiling).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/fp8/fp8.h"

namespace mmserve::kernels {

struct GemmCudaArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* w = nullptr;
  int64_t ldw = 0;
  DType in_dtype = DType::kBF16;  // A and W
  void* d = nullptr;
  int64_t ldd = 0;
  DType out_dtype = DType::kBF16;  // in_dtype or f32
  const void* bias = nullptr;      // [n] in out_dtype, or nullptr
  float alpha = 1.0f;
  float beta = 0.0f;  // beta != 0 reads D before writing it (the residual add)
};

// The scaled FP8 GEMM (issue 17): D[M, N] = a_scale * w_scale * A[M, K] @ W[N, K]^T (+ bias[N]), A and W FP8 codes
// (fp8.h; E4M3 both, or one of them E5M2: cuBLASLt has no E5M2 x E5M2), f32 accumulation, D in bf16, f16 or f32.
// Scales are device floats: per tensor (one each: a checkpoint's input_scale and weight_scale) or, rowwise, a_scale
// [M] per token and w_scale [N] per output channel (cuBLASLt's OUTER_VEC_32F mode: refused, kUnimplemented, by
// cuBLASLt 13.0 on the H100, 2026-12-07; an epilogue of our own is the way there). The twin of fp8.h's fp8_gemm.
// Accuracy: Hopper's FP8 tensor cores add products at reduced precision inside an MMA (about 14 bits, as DeepSeek-V3's
// report measured), so results differ from f32 sums by up to ~2^-13 of the sum of |products|.
// cuBLASLt's FP8 contract: K, lda and ldw multiples of 16 (16-byte rows), 16-byte aligned A and W.
// fast_accum: cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM (Hopper's FP8 tensor cores then accumulate at lower
// precision between promotions; off by default, as torch._scaled_mm's use_fast_accum).
enum class Fp8ScaleMode { kTensor, kRowwise };

struct Fp8GemmCudaArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  Fp8Format a_format = Fp8Format::kE4M3;
  const void* w = nullptr;
  int64_t ldw = 0;
  Fp8Format w_format = Fp8Format::kE4M3;
  Fp8ScaleMode scale_mode = Fp8ScaleMode::kTensor;
  const float* a_scale = nullptr;  // device: [1] or [m]
  const float* w_scale = nullptr;  // device: [1] or [n]
  void* d = nullptr;
  int64_t ldd = 0;
  DType out_dtype = DType::kBF16;
  const void* bias = nullptr;  // [n] in out_dtype, or nullptr
  bool fast_accum = false;
  // D += ... (cuBLASLt's beta = 1, C = D in out_dtype): the decoder's o and down projections into the f32 residual.
  bool accumulate = false;
};

class CublasLtGemm {
 public:
  // `workspace` (device, may be null when bytes is 0) is used by every call; 32 MiB lets cuBLASLt pick its
  // fastest Hopper kernels.
  static StatusOr<std::unique_ptr<CublasLtGemm>> create(void* workspace, size_t workspace_bytes);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues the GEMM on `stream`. kInvalidArgument for inconsistent arguments, kUnimplemented for a dtype
  // combination this wrapper does not take. Thread-safe (the plan cache is locked; a CUDA graph capture
  // calls this from one thread).
  Status run(const GemmCudaArgs& args, cudaStream_t stream);

  // The scaled FP8 GEMM (Fp8GemmCudaArgs above); same errors as run(), plus kUnimplemented where cuBLASLt has no
  // algorithm for the combination (it names the formats, scale mode and shape).
  Status run_fp8(const Fp8GemmCudaArgs& args, cudaStream_t stream);

  // Off: every shape goes to cuBLASLt, also those our kernels take (gemm_small_m_cuda.h);
  // for benchmarks that compare the two. On by default.
  void set_custom_kernels(bool on) { custom_kernels_ = on; }

  static constexpr size_t kDefaultWorkspaceBytes = 32u << 20;

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, bool>;
  CublasLtGemm() = default;
  StatusOr<Plan*> plan_for(const GemmCudaArgs& args);  // called with mutex_ held
  StatusOr<Plan*> fp8_plan_for(const Fp8GemmCudaArgs& args);  // called with mutex_ held
  // Picks the heuristic's first algorithm for the plan's descriptors (shared by both plan builders).
  Status choose_algo(Plan& plan, int64_t align, const std::string& what);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool custom_kernels_ = true;
  std::mutex mutex_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
  std::map<Fp8Key, std::unique_ptr<Plan>> fp8_plans_;
};

}  // namespace mmserve::kernels
