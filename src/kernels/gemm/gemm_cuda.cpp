// GEMM on the GPU through cuBLASLt (see gemm_cuda.h).
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_small_m_cuda.h"

#include <algorithm>
#include <string>

#include "core/cuda/cuda_status.h"

namespace mmserve::kernels {

namespace {

StatusOr<cudaDataType_t> cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return unimplemented(std::string("GEMM on the GPU takes f32, f16 or bf16, not ") + dtype_name(dtype));
  }
}

// The algorithm depends on alignment too: a pointer's alignment is part of the plan's key (256-byte aligned
// pointers from the arena are the common case; a slice may be less aligned).
int64_t alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 256;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

cudaDataType_t fp8_type(Fp8Format f) { return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

}  // namespace

// Everything cuBLASLt needs for one shape: descriptors, layouts and the chosen algorithm. Created once per
// shape (the heuristic query costs tens of microseconds), reused for every call after.
struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, a_layout = nullptr, d_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (w_layout) cublasLtMatrixLayoutDestroy(w_layout);
    if (a_layout) cublasLtMatrixLayoutDestroy(a_layout);
    if (d_layout) cublasLtMatrixLayoutDestroy(d_layout);
  }
};

// The descriptor both GEMMs share: f32 compute (f32 inputs: CUBLAS_COMPUTE_32F, true f32, the precise path; 16-bit and
// FP8 inputs accumulate in f32 too) in the column-major view D^T [n, m] = W [n, k] (stored row-major = column-major
// [k, n], so op T) times A^T [k, m] (A row-major [m, k] = column-major [k, m], op N), and the bias epilogue.
Status create_desc(cublasLtMatmulDesc_t* desc, bool bias, cudaDataType_t out_type) {
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose)));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const int32_t bias_type = out_type;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  return ok_status();
}

StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::create(void* workspace, size_t workspace_bytes) {
  auto gemm = std::unique_ptr<CublasLtGemm>(new CublasLtGemm());
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&gemm->handle_));
  gemm->workspace_ = workspace;
  gemm->workspace_bytes_ = workspace ? workspace_bytes : 0;
  return gemm;
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Status CublasLtGemm::choose_algo(Plan& plan, int64_t align, const std::string& what) {
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = workspace_bytes_;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace_bytes, sizeof(workspace_bytes));
  const uint32_t align_bytes = static_cast<uint32_t>(align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(preference, attr, &align_bytes, sizeof(align_bytes));
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.w_layout, plan.a_layout, plan.d_layout,
                                            plan.d_layout, preference, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  // An unsupported combination shows up as NOT_SUPPORTED from the heuristic or as no result.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return unimplemented("cuBLASLt has no algorithm for " + what);
  }
  CUBLAS_RETURN_IF_ERROR(status);
  plan.algo = result.algo;
  return ok_status();
}

StatusOr<CublasLtGemm::Plan*> CublasLtGemm::plan_for(const GemmCudaArgs& args) {
  const int64_t align = std::min({alignment(args.a), alignment(args.w), alignment(args.d)});
  const Key key{args.m,
                args.n,
                args.k,
                args.lda * 1000003 + args.ldw,
                args.ldd,
                align,
                static_cast<int>(args.in_dtype),
                static_cast<int>(args.out_dtype),
                args.bias != nullptr,
                args.beta != 0.0f};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  ASSIGN_OR_RETURN(cudaDataType_t in_type, cuda_type(args.in_dtype));
  ASSIGN_OR_RETURN(cudaDataType_t out_type, cuda_type(args.out_dtype));
  auto plan = std::make_unique<Plan>();
  RETURN_IF_ERROR(create_desc(&plan->desc, args.bias != nullptr, out_type));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->w_layout, in_type, args.k, args.n, args.ldw));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a_layout, in_type, args.k, args.m, args.lda));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->d_layout, out_type, args.n, args.m, args.ldd));

  RETURN_IF_ERROR(choose_algo(*plan, align,
                              "GEMM m=" + std::to_string(args.m) + " n=" + std::to_string(args.n) +
                                  " k=" + std::to_string(args.k) + " " + dtype_name(args.in_dtype) + "->" +
                                  dtype_name(args.out_dtype)));
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

Status CublasLtGemm::run(const GemmCudaArgs& args, cudaStream_t stream) {
  if (args.m < 0 || args.n <= 0 || args.k <= 0) {
    return invalid_argument("GEMM sizes must be positive (m=" + std::to_string(args.m) +
                            " n=" + std::to_string(args.n) + " k=" + std::to_string(args.k) + ")");
  }
  if (args.m == 0) return ok_status();
  if (!args.a || !args.w || !args.d) return invalid_argument("GEMM with a null matrix pointer");
  if (args.lda < args.k || args.ldw < args.k || args.ldd < args.n) {
    return invalid_argument("GEMM leading dimensions too small for its shape");
  }
  if (args.out_dtype != args.in_dtype && args.out_dtype != DType::kF32) {
    return unimplemented(std::string("GEMM output must be the input dtype or f32, not ") + dtype_name(args.out_dtype));
  }
  // f32 with few rows: our CUDA-core kernel (gemm_small_m_cuda.h says why cuBLASLt is slow there).
  if (custom_kernels_ && args.in_dtype == DType::kF32 && args.out_dtype == DType::kF32 && args.m <= kGemmSmallMMaxRows &&
      args.k >= kGemmSmallMMinK) {
    return gemm_small_m_cuda(args, stream);
  }
  // 16-bit inputs with one row (batch-1 decode): one weight stream instead of cuBLASLt's split-K pair.
  if (custom_kernels_ && gemm_small_m16_applies(args)) return gemm_small_m16_cuda(args, stream);
  // One lock over plan lookup, the bias pointer (an attribute of the shared descriptor) and the enqueue.
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Plan * plan, plan_for(args));
  if (args.bias) {
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias, sizeof(args.bias)));
  }
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, plan->desc, &args.alpha, args.w, plan->w_layout, args.a,
                                        plan->a_layout, &args.beta, args.d, plan->d_layout, args.d, plan->d_layout,
                                        &plan->algo, workspace_, workspace_bytes_, stream));
  return ok_status();
}

StatusOr<CublasLtGemm::Plan*> CublasLtGemm::fp8_plan_for(const Fp8GemmCudaArgs& args) {
  const int64_t align = std::min({alignment(args.a), alignment(args.w), alignment(args.d)});
  const int flags = (args.a_format == Fp8Format::kE5M2) | (args.w_format == Fp8Format::kE5M2) << 1 |
                    (args.scale_mode == Fp8ScaleMode::kRowwise) << 2 | (args.bias != nullptr) << 3 |
                    args.fast_accum << 4 | args.accumulate << 5;
  const Fp8Key key{args.m, args.n, args.k, args.lda, args.ldw, args.ldd, align, flags, static_cast<int>(args.out_dtype)};
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second.get();

  ASSIGN_OR_RETURN(cudaDataType_t out_type, cuda_type(args.out_dtype));
  auto plan = std::make_unique<Plan>();
  // The layout of run(): W with op T and A with op N, which is the "TN" form FP8 requires.
  RETURN_IF_ERROR(create_desc(&plan->desc, args.bias != nullptr, out_type));
  const int8_t fast = args.fast_accum ? 1 : 0;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  if (args.scale_mode == Fp8ScaleMode::kRowwise) {
    // cuBLASLt's A is our W (its M = our n: per output channel), its B our activations (its N = our m: per token).
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  }
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->w_layout, fp8_type(args.w_format), args.k, args.n, args.ldw));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a_layout, fp8_type(args.a_format), args.k, args.m, args.lda));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->d_layout, out_type, args.n, args.m, args.ldd));
  Status chosen = choose_algo(
      *plan, align,
      std::string("FP8 GEMM ") + fp8_format_name(args.a_format) + " x " + fp8_format_name(args.w_format) + "->" +
          dtype_name(args.out_dtype) + (args.scale_mode == Fp8ScaleMode::kRowwise ? " rowwise" : " per-tensor") +
          " m=" + std::to_string(args.m) + " n=" + std::to_string(args.n) + " k=" + std::to_string(args.k));
  // cuBLASLt 13.0 on an H100 answers the OUTER_VEC scale mode with CUBLAS_STATUS_INVALID_VALUE from the heuristic
  // (measured 2026-12-07): a capability this library and GPU lack, not a bad argument of the caller's.
  if (!chosen.ok() && args.scale_mode == Fp8ScaleMode::kRowwise) {
    return unimplemented("FP8 GEMM with rowwise scales (cuBLASLt's OUTER_VEC_32F) is not offered by this cuBLASLt on "
                         "this GPU (" + chosen.message() + "); use per-tensor scales");
  }
  RETURN_IF_ERROR(chosen);
  Plan* raw = plan.get();
  fp8_plans_.emplace(key, std::move(plan));
  return raw;
}

Status CublasLtGemm::run_fp8(const Fp8GemmCudaArgs& args, cudaStream_t stream) {
  if (args.m < 0 || args.n <= 0 || args.k <= 0) {
    return invalid_argument("FP8 GEMM sizes must be positive (m=" + std::to_string(args.m) +
                            " n=" + std::to_string(args.n) + " k=" + std::to_string(args.k) + ")");
  }
  if (args.m == 0) return ok_status();
  if (!args.a || !args.w || !args.d || !args.a_scale || !args.w_scale) {
    return invalid_argument("FP8 GEMM with a null matrix or scale pointer");
  }
  if (args.lda < args.k || args.ldw < args.k || args.ldd < args.n) {
    return invalid_argument("FP8 GEMM leading dimensions too small for its shape");
  }
  if (args.k % 16 != 0 || args.lda % 16 != 0 || args.ldw % 16 != 0 || alignment(args.a) < 16 || alignment(args.w) < 16) {
    return invalid_argument("FP8 GEMM needs k, lda and ldw multiples of 16 and 16-byte aligned A and W (k=" +
                            std::to_string(args.k) + " lda=" + std::to_string(args.lda) +
                            " ldw=" + std::to_string(args.ldw) + ")");
  }
  if (args.a_format == Fp8Format::kE5M2 && args.w_format == Fp8Format::kE5M2) {
    return unimplemented("FP8 GEMM: e5m2 x e5m2 is not a cuBLASLt combination (one side must be e4m3)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ASSIGN_OR_RETURN(Plan * plan, fp8_plan_for(args));
  // Scale and bias pointers are attributes of the shared descriptor: set under the lock, for this call.
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                        &args.w_scale, sizeof(args.w_scale)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                        &args.a_scale, sizeof(args.a_scale)));
  if (args.bias) {
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias, sizeof(args.bias)));
  }
  const float alpha = 1.0f, beta = args.accumulate ? 1.0f : 0.0f;  // accumulate: C = D
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, plan->desc, &alpha, args.w, plan->w_layout, args.a, plan->a_layout,
                                        &beta, args.d, plan->d_layout, args.d, plan->d_layout, &plan->algo, workspace_,
                                        workspace_bytes_, stream));
  return ok_status();
}

}  // namespace mmserve::kernels
