// Element-wise activations on the GPU, in place (activation_cuda.h), computed in f32 with the formulas of
// activation_scalar() (libm-accurate expf/erff/tanhf; the build uses no fast math).
//
// A grid-stride loop over 16-byte packs (4 floats or 8 halves/bfloat16s), one pack per thread per trip,
// when x is 16-byte aligned, the last count % pack elements done by the first threads of block 0;
// otherwise the same loop one element at a time. At most kBlocksMax blocks of 256 threads (~8 waves of a
// 132-SM H200). (Two packs in flight per thread measured 8% slower on the H200 at 12800 x 3072 bf16.)
// kNone launches nothing. No allocation, sync or host reads: graph-capturable.
// Tests: activation_cuda_test.cpp; bench: activation_cuda_bench.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kBlocksMax = 8192;

// activation_scalar() (activation_cpu.cpp), written with CUDA's libm.
template <Activation kAct>
__device__ __forceinline__ float activate(float x) {
  constexpr float kSqrtHalf = 0.70710678118654752f;
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  if constexpr (kAct == Activation::kQuickGelu) {
    return x * (1.0f / (1.0f + expf(-1.702f * x)));
  } else if constexpr (kAct == Activation::kGelu) {
    return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
  } else if constexpr (kAct == Activation::kGeluTanh) {
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  } else {
    return x;
  }
}

// x is 16-byte aligned: `packs` = count / kVec whole packs, then count % kVec trailing elements.
template <typename T, Activation kAct>
__global__ void __launch_bounds__(kThreads) activation_packed_kernel(T* x, int64_t packs, int64_t count) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  Pack<T, kVec>* x_packs = reinterpret_cast<Pack<T, kVec>*>(x);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < packs; i += stride) {
    Pack<T, kVec> pack = x_packs[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k) pack.v[k] = from_f32<T>(activate<kAct>(to_f32(pack.v[k])));
    x_packs[i] = pack;
  }
  const int64_t tail = packs * kVec + threadIdx.x;  // fewer than kVec < kThreads elements
  if (blockIdx.x == 0 && tail < count) x[tail] = from_f32<T>(activate<kAct>(to_f32(x[tail])));
}

template <typename T, Activation kAct>
__global__ void __launch_bounds__(kThreads) activation_scalar_kernel(T* x, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count; i += stride) {
    x[i] = from_f32<T>(activate<kAct>(to_f32(x[i])));
  }
}

unsigned blocks_for(int64_t work_items) {
  return static_cast<unsigned>(std::clamp<int64_t>((work_items + kThreads - 1) / kThreads, 1, kBlocksMax));
}

template <typename T, Activation kAct>
Status launch(void* data, int64_t count, cudaStream_t stream) {
  constexpr int64_t kVec = 16 / sizeof(T);
  T* x = static_cast<T*>(data);
  if (reinterpret_cast<uintptr_t>(data) % 16 == 0) {
    const int64_t packs = count / kVec;
    activation_packed_kernel<T, kAct><<<blocks_for(packs), kThreads, 0, stream>>>(x, packs, count);
  } else {
    activation_scalar_kernel<T, kAct><<<blocks_for(count), kThreads, 0, stream>>>(x, count);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T>
Status launch_typed(Activation activation, void* x, int64_t count, cudaStream_t stream) {
  switch (activation) {
    case Activation::kQuickGelu: return launch<T, Activation::kQuickGelu>(x, count, stream);
    case Activation::kGelu: return launch<T, Activation::kGelu>(x, count, stream);
    case Activation::kGeluTanh: return launch<T, Activation::kGeluTanh>(x, count, stream);
    case Activation::kNone: return ok_status();
  }
  return invalid_argument("activation_cuda: unknown activation");
}

}  // namespace

Status activation_cuda(Activation activation, void* x, DType dtype, int64_t count, cudaStream_t stream) {
  if (activation != Activation::kNone && activation != Activation::kQuickGelu && activation != Activation::kGelu &&
      activation != Activation::kGeluTanh) {
    return invalid_argument("activation_cuda: unknown activation");
  }
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return unimplemented("activation_cuda: dtype must be f32, f16 or bf16");
  }
  if (count < 0) return invalid_argument("activation_cuda: count < 0");
  if (count == 0) return ok_status();
  if (x == nullptr) return invalid_argument("activation_cuda: null x");
  if (reinterpret_cast<uintptr_t>(x) % dtype_size(dtype) != 0) {
    return invalid_argument("activation_cuda: x is not aligned to its element size");
  }
  if (activation == Activation::kNone) return ok_status();
  switch (dtype) {
    case DType::kF32: return launch_typed<float>(activation, x, count, stream);
    case DType::kF16: return launch_typed<__half>(activation, x, count, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(activation, x, count, stream);
    default: break;
  }
  return unimplemented("activation_cuda: dtype must be f32, f16 or bf16");
}

}  // namespace mmserve::kernels
