// FP8 quantisation on the GPU (see fp8_cuda.h). Memory-bound passes, one value a thread, consecutive threads on
// consecutive columns (coalesced). Not vectorised yet: at Llama shapes a row of activations is a few KiB and the pass
// sits next to a GEMM hundreds of times longer (fp8_cuda_bench.cpp measures both).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/fp8/fp8_cuda.h"
#include "kernels/fp8/fp8_cuda_codes.cuh"

namespace mmserve::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float scale_for_amax(float amax, bool e4m3) {
  return __fdiv_rn(fmaxf(amax, 1e-12f), e4m3 ? 448.0f : 57344.0f);
}

// Block-wide max of non-negative values; every thread gets it.
__device__ float block_max(float v) {
  __shared__ float warp_max[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  v = warp_max[0];
  for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, warp_max[w]);
  __syncthreads();  // warp_max may be reused by a later call
  return v;
}

// Rows of x over gridDim.y x blocks; columns over blockIdx.x * kThreads + threadIdx.x with a grid stride.
template <typename T>
__global__ void quantize_static_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t ld_x,
                                       const float* __restrict__ scale, bool e4m3, uint8_t* __restrict__ q,
                                       int64_t ld_q) {
  const float s = *scale;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * kThreads) {
      q[r * ld_q + c] = fp8_encode_scaled(to_float(x[r * ld_x + c]), s, e4m3);
    }
  }
}

// One block per row: the row's amax, its scale, then its codes (the row is read twice; it is in L2 by then).
template <typename T>
__global__ void quantize_rows_kernel(const T* __restrict__ x, int64_t cols, int64_t ld_x, bool e4m3,
                                     uint8_t* __restrict__ q, int64_t ld_q, float* __restrict__ scales) {
  const T* row = x + blockIdx.x * ld_x;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) amax = fmaxf(amax, fabsf(to_float(row[c])));
  const float s = scale_for_amax(block_max(amax), e4m3);
  if (threadIdx.x == 0) scales[blockIdx.x] = s;
  uint8_t* out = q + blockIdx.x * ld_q;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[c] = fp8_encode_scaled(to_float(row[c]), s, e4m3);
}

// The tensor's amax into *amax as float bits (non-negative floats order as their bits do).
template <typename T>
__global__ void amax_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t ld_x, uint32_t* amax) {
  float m = 0.0f;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * kThreads) {
      m = fmaxf(m, fabsf(to_float(x[r * ld_x + c])));
    }
  }
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(amax, __float_as_uint(m));
}

__global__ void scale_from_amax_kernel(const uint32_t* amax, bool e4m3, float* scale) {
  *scale = scale_for_amax(__uint_as_float(*amax), e4m3);
}

Status check(const Fp8QuantizeCudaArgs& a, const char* what) {
  if (a.rows < 0 || a.cols < 0 || a.ld_x < a.cols || a.ld_q < a.cols) {
    return invalid_argument(std::string(what) + ": bad shape (rows " + std::to_string(a.rows) + ", cols " +
                            std::to_string(a.cols) + ", ld_x " + std::to_string(a.ld_x) + ", ld_q " +
                            std::to_string(a.ld_q) + ")");
  }
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16 && a.dtype != DType::kF32) {
    return unimplemented(std::string(what) + " takes bf16, f16 or f32, not " + dtype_name(a.dtype));
  }
  if (a.rows > 0 && a.cols > 0 && (a.x == nullptr || a.q == nullptr)) {
    return invalid_argument(std::string(what) + ": null pointer");
  }
  return ok_status();
}

Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ok_status() : internal_error(std::string(what) + ": " + cudaGetErrorString(e));
}

dim3 grid_for(int64_t rows, int64_t cols) {
  const int64_t x_blocks = std::min<int64_t>((cols + kThreads - 1) / kThreads, 64);
  return dim3(static_cast<unsigned>(std::max<int64_t>(x_blocks, 1)),
              static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 65535)));
}

template <typename F>
void dispatch(DType dtype, F&& f) {
  if (dtype == DType::kBF16) {
    f(static_cast<const __nv_bfloat16*>(nullptr));
  } else if (dtype == DType::kF16) {
    f(static_cast<const __half*>(nullptr));
  } else {
    f(static_cast<const float*>(nullptr));
  }
}

}  // namespace

Status fp8_quantize_cuda(const Fp8QuantizeCudaArgs& a, const float* scale, cudaStream_t stream) {
  RETURN_IF_ERROR(check(a, "fp8_quantize_cuda"));
  if (a.rows == 0 || a.cols == 0) return ok_status();
  if (scale == nullptr) return invalid_argument("fp8_quantize_cuda: null scale");
  const bool e4m3 = a.format == Fp8Format::kE4M3;
  dispatch(a.dtype, [&](auto type) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(type)>>;
    quantize_static_kernel<T><<<grid_for(a.rows, a.cols), kThreads, 0, stream>>>(
        static_cast<const T*>(a.x), a.rows, a.cols, a.ld_x, scale, e4m3, a.q, a.ld_q);
  });
  return launched("fp8_quantize_cuda");
}

Status fp8_quantize_rows_cuda(const Fp8QuantizeCudaArgs& a, float* scales, cudaStream_t stream) {
  RETURN_IF_ERROR(check(a, "fp8_quantize_rows_cuda"));
  if (a.rows == 0) return ok_status();
  if (scales == nullptr) return invalid_argument("fp8_quantize_rows_cuda: null scales");
  if (a.rows > 2147483647) return invalid_argument("fp8_quantize_rows_cuda: too many rows");
  const bool e4m3 = a.format == Fp8Format::kE4M3;
  dispatch(a.dtype, [&](auto type) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(type)>>;
    quantize_rows_kernel<T><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(
        static_cast<const T*>(a.x), a.cols, a.ld_x, e4m3, a.q, a.ld_q, scales);
  });
  return launched("fp8_quantize_rows_cuda");
}

Status fp8_quantize_tensor_cuda(const Fp8QuantizeCudaArgs& a, float* scale, uint32_t* amax, cudaStream_t stream) {
  RETURN_IF_ERROR(check(a, "fp8_quantize_tensor_cuda"));
  if (scale == nullptr || amax == nullptr) return invalid_argument("fp8_quantize_tensor_cuda: null scale or amax");
  const bool e4m3 = a.format == Fp8Format::kE4M3;
  if (cudaMemsetAsync(amax, 0, sizeof(uint32_t), stream) != cudaSuccess) return launched("fp8_quantize_tensor_cuda");
  if (a.rows > 0 && a.cols > 0) {
    dispatch(a.dtype, [&](auto type) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(type)>>;
      amax_kernel<T><<<grid_for(a.rows, a.cols), kThreads, 0, stream>>>(static_cast<const T*>(a.x), a.rows, a.cols,
                                                                         a.ld_x, amax);
    });
  }
  scale_from_amax_kernel<<<1, 1, 0, stream>>>(amax, e4m3, scale);
  RETURN_IF_ERROR(launched("fp8_quantize_tensor_cuda"));
  return fp8_quantize_cuda(a, scale, stream);
}

}  // namespace mmserve::kernels
