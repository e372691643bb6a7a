// The kernel of llava_cuda_kernels.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "models/llava/llava_cuda_kernels.h"

namespace mmserve::models {
namespace {

template <typename T>
__global__ void select_kernel(const float* x, int64_t seq, int64_t skip, int64_t tokens, int64_t cols, T* out,
                              int64_t out_ld, int64_t col) {
  const int64_t row = blockIdx.x;  // b * tokens + r
  const int64_t b = row / tokens, r = row % tokens;
  const float* src = x + (b * seq + skip + r) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[row * out_ld + col + c] = kernels::from_f32<T>(src[c]);
}

}  // namespace

Status select_vision_features_cuda(const float* x, int64_t batch, int64_t seq, int64_t skip, int64_t cols, void* out,
                                   DType dtype, int64_t out_ld, int64_t col, cudaStream_t stream) {
  const int64_t tokens = seq - skip;
  if (batch <= 0 || tokens <= 0) return ok_status();
  const dim3 grid(static_cast<unsigned>(batch * tokens)), block(256);
  switch (dtype) {
    case DType::kF32:
      select_kernel<<<grid, block, 0, stream>>>(x, seq, skip, tokens, cols, static_cast<float*>(out), out_ld, col);
      break;
    case DType::kBF16:
      select_kernel<<<grid, block, 0, stream>>>(x, seq, skip, tokens, cols, static_cast<__nv_bfloat16*>(out), out_ld,
                                                col);
      break;
    case DType::kF16:
      select_kernel<<<grid, block, 0, stream>>>(x, seq, skip, tokens, cols, static_cast<__half*>(out), out_ld, col);
      break;
    default: return unimplemented(std::string("vision features in ") + dtype_name(dtype));
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace mmserve::models
