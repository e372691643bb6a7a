// The kernels of llama_cuda_kernels.h.
#include "models/llama/llama_cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::models {
namespace {

using kernels::from_f32;
using kernels::to_f32;

template <typename T>
__global__ void gather_kernel(const T* src, int64_t src_rows, int64_t src_ld, const int32_t* index, int64_t cols,
                              float* out) {
  const int64_t r = blockIdx.x;
  const int32_t i = index[r];
  const bool valid = i >= 0 && i < src_rows;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out[r * cols + c] = valid ? to_f32(src[i * src_ld + c]) : 0.0f;
  }
}

__device__ uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float scale, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float v = value;
    if (scale != 0.0f) {
      const float u = static_cast<float>(mix64(seed * 0x100000001b3ull + i) >> 40) * (1.0f / 16777216.0f);
      v = scale * 1.7320508f * (2.0f * u - 1.0f);
    }
    p[i] = from_f32<T>(v);
  }
}

// One thread per column: out[c] (+)= scale * sum_r x[r, c], rows in order (coalesced across the warp's columns).
__global__ void column_sum_kernel(const float* x, int64_t rows, int64_t cols, float scale, bool accumulate,
                                  float* out) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + c];
  out[c] = (accumulate ? out[c] : 0.0f) + scale * acc;
}

}  // namespace

Status column_sum_f32(const float* x, int64_t rows, int64_t cols, float scale, bool accumulate, float* out,
                      cudaStream_t stream) {
  if (cols <= 0) return ok_status();
  const int threads = 256;
  column_sum_kernel<<<static_cast<unsigned>((cols + threads - 1) / threads), threads, 0, stream>>>(
      x, rows, cols, scale, accumulate, out);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status gather_rows_f32(const void* src, DType dtype, int64_t src_rows, int64_t src_ld, const int32_t* index,
                       int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  const int threads = 256;
  switch (dtype) {
    case DType::kF32:
      gather_kernel<<<rows, threads, 0, stream>>>(static_cast<const float*>(src), src_rows, src_ld, index, cols, out);
      break;
    case DType::kBF16:
      gather_kernel<<<rows, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), src_rows, src_ld, index,
                                                  cols, out);
      break;
    case DType::kF16:
      gather_kernel<<<rows, threads, 0, stream>>>(static_cast<const __half*>(src), src_rows, src_ld, index, cols, out);
      break;
    default: return unimplemented("gather_rows_f32: f32, f16 or bf16 rows");
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status fill_weights(void* p, DType dtype, int64_t n, uint64_t seed, float scale, float value, cudaStream_t stream) {
  if (n <= 0) return ok_status();
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65536));
  switch (dtype) {
    case DType::kF32: fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(p), n, seed, scale, value); break;
    case DType::kBF16:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale, value);
      break;
    case DType::kF16: fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(p), n, seed, scale, value); break;
    default: return unimplemented("fill_weights: f32, f16 or bf16");
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace mmserve::models
