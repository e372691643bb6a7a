// RMS norm on the GPU (rms_norm_cuda.h). A "unit" is one segment of one row (rows * segments units).
//
// Vectorised path (cols % 4 == 0, strides and pointers aligned to 4 elements): units of up to 1024 columns get a
// warp each (4 units to a 128-thread block), wider ones up to 16384 columns a 512-thread block. The unit is
// loaded once into registers (thread t holds packs of 4 consecutive values at (c * threads + t) * 4, so a warp's
// loads are contiguous: 16-byte loads of f32, 8-byte loads of 16-bit x), the sum of squares is reduced by
// shuffles (and shared memory across warps), and y is written from the registers. Otherwise (odd widths,
// misaligned pointers, or wider rows) a block per unit reads x twice (the second read hits L1/L2).
// Launches only: no allocation, no sync, no host reads of device data.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
#include "kernels/rms_norm/rms_norm_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kVec = 4;
constexpr int kWarpUnitsPerBlock = 4;
constexpr int kBlockThreads = 512;
constexpr int kWarpColsMax = kWarp * kVec * 8;            // 1024
constexpr int kBlockColsMax = kBlockThreads * kVec * 8;   // 16384
constexpr int kFallbackThreads = 256;

struct Params {
  const void* x;
  int64_t x_ld;
  const void* weight;
  void* y;
  int64_t y_ld;
  int64_t units, segments, cols;
  float eps;
};

// Sum over the kThreads threads of a unit, returned to all of them.
template <int kThreads>
__device__ __forceinline__ float unit_sum(float v, float* partials) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if constexpr (kThreads > kWarp) {
    if (threadIdx.x % kWarp == 0) partials[threadIdx.x / kWarp] = v;
    __syncthreads();
    v = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / kWarp; ++w) v += partials[w];
  }
  return v;
}

__device__ __forceinline__ void unit_offsets(const Params& p, int64_t unit, int64_t* x_at, int64_t* y_at) {
  const int64_t row = unit / p.segments, segment = unit % p.segments;
  *x_at = row * p.x_ld + segment * p.cols;
  *y_at = row * p.y_ld + segment * p.cols;
}

template <typename Tx, typename Ty, int kChunks, int kThreads>
__global__ void __launch_bounds__(kThreads == kWarp ? kWarp * kWarpUnitsPerBlock : kThreads)
    rms_norm_registers_kernel(Params p) {
  __shared__ float partials[kThreads / kWarp];
  pdl_trigger();  // cuda_pdl.cuh: everything below reads earlier kernels' output
  pdl_wait();
  const int64_t unit = kThreads == kWarp ? static_cast<int64_t>(blockIdx.x) * kWarpUnitsPerBlock + threadIdx.x / kWarp
                                         : static_cast<int64_t>(blockIdx.x);
  if (unit >= p.units) return;  // uniform over the unit's threads
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const int cols = static_cast<int>(p.cols);
  int64_t x_at, y_at;
  unit_offsets(p, unit, &x_at, &y_at);
  const Tx* x = static_cast<const Tx*>(p.x) + x_at;

  float v[kChunks][kVec];
  float squares = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * kThreads + t) * kVec;
    if (col < cols) {
      const Pack<Tx, kVec> pack = *reinterpret_cast<const Pack<Tx, kVec>*>(x + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[c][k] = to_f32(pack.v[k]);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[c][k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) squares += v[c][k] * v[c][k];
  }
  const float inv = rsqrtf(unit_sum<kThreads>(squares, partials) / static_cast<float>(cols) + p.eps);

  const Ty* weight = static_cast<const Ty*>(p.weight);
  Ty* y = static_cast<Ty*>(p.y) + y_at;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * kThreads + t) * kVec;
    if (col < cols) {
      const Pack<Ty, kVec> w = *reinterpret_cast<const Pack<Ty, kVec>*>(weight + col);
      Pack<Ty, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = from_f32<Ty>(to_f32(w.v[k]) * (v[c][k] * inv));
      *reinterpret_cast<Pack<Ty, kVec>*>(y + col) = out;
    }
  }
}

// Any width, any alignment: a block per unit, scalar accesses, x read twice. In place, each thread reads x[j]
// just before it writes y[j] (the same address), and the sum was complete before any write.
template <typename Tx, typename Ty>
__global__ void __launch_bounds__(kFallbackThreads) rms_norm_fallback_kernel(Params p) {
  __shared__ float partials[kFallbackThreads / kWarp];
  pdl_trigger();
  pdl_wait();
  const int64_t unit = blockIdx.x;
  int64_t x_at, y_at;
  unit_offsets(p, unit, &x_at, &y_at);
  const Tx* x = static_cast<const Tx*>(p.x) + x_at;
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < p.cols; j += kFallbackThreads) {
    const float v = to_f32(x[j]);
    squares += v * v;
  }
  const float inv = rsqrtf(unit_sum<kFallbackThreads>(squares, partials) / static_cast<float>(p.cols) + p.eps);
  const Ty* weight = static_cast<const Ty*>(p.weight);
  Ty* y = static_cast<Ty*>(p.y) + y_at;
  for (int64_t j = threadIdx.x; j < p.cols; j += kFallbackThreads) {
    y[j] = from_f32<Ty>(to_f32(weight[j]) * (to_f32(x[j]) * inv));
  }
}

template <typename Tx, typename Ty, int kThreads, int kChunks, int... kMore>
void launch_first_fit(const Params& p, cudaStream_t stream) {
  if constexpr (sizeof...(kMore) > 0) {
    if (p.cols > static_cast<int64_t>(kThreads) * kChunks * kVec) {
      launch_first_fit<Tx, Ty, kThreads, kMore...>(p, stream);
      return;
    }
  }
  if constexpr (kThreads == kWarp) {
    const int64_t blocks = (p.units + kWarpUnitsPerBlock - 1) / kWarpUnitsPerBlock;
    launch_pdl(rms_norm_registers_kernel<Tx, Ty, kChunks, kWarp>, dim3(static_cast<unsigned>(blocks)),
               dim3(kWarp * kWarpUnitsPerBlock), 0, stream, p);
  } else {
    launch_pdl(rms_norm_registers_kernel<Tx, Ty, kChunks, kThreads>, dim3(static_cast<unsigned>(p.units)),
               dim3(kThreads), 0, stream, p);
  }
}

template <typename Tx, typename Ty>
Status launch_typed(const Params& p, bool vectorised, cudaStream_t stream) {
  if (vectorised && p.cols <= kWarpColsMax) {
    launch_first_fit<Tx, Ty, kWarp, 1, 2, 4, 8>(p, stream);
  } else if (vectorised && p.cols <= kBlockColsMax) {
    launch_first_fit<Tx, Ty, kBlockThreads, 1, 2, 4, 8>(p, stream);
  } else {
    launch_pdl(rms_norm_fallback_kernel<Tx, Ty>, dim3(static_cast<unsigned>(p.units)), dim3(kFallbackThreads), 0,
               stream, p);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename Tx>
Status launch_for_y(const Params& p, DType y_dtype, bool vectorised, cudaStream_t stream) {
  switch (y_dtype) {
    case DType::kF32: return launch_typed<Tx, float>(p, vectorised, stream);
    case DType::kF16: return launch_typed<Tx, __half>(p, vectorised, stream);
    default: return launch_typed<Tx, __nv_bfloat16>(p, vectorised, stream);
  }
}

bool aligned_to(const void* pointer, size_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

}  // namespace

Status rms_norm_cuda(const RmsNormArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(validate_rms_norm(a));
  if (a.rows == 0) return ok_status();
  const size_t x_size = dtype_size(a.x_dtype), y_size = dtype_size(a.y_dtype);
  if (!aligned_to(a.x, x_size) || !aligned_to(a.weight, y_size) || !aligned_to(a.y, y_size)) {
    return invalid_argument("rms_norm_cuda: a pointer is not aligned to its element size");
  }
  const int64_t units = a.rows * a.segments;
  if (units > std::numeric_limits<int32_t>::max()) return invalid_argument("rms_norm_cuda: too many rows");
  const Params p{a.x, a.x_ld, a.weight, a.y, a.y_ld, units, a.segments, a.cols, a.eps};
  const bool vectorised = a.cols % kVec == 0 && a.x_ld % kVec == 0 && a.y_ld % kVec == 0 &&
                          aligned_to(a.x, kVec * x_size) && aligned_to(a.weight, kVec * y_size) &&
                          aligned_to(a.y, kVec * y_size);
  switch (a.x_dtype) {
    case DType::kF32: return launch_for_y<float>(p, a.y_dtype, vectorised, stream);
    case DType::kF16: return launch_for_y<__half>(p, a.y_dtype, vectorised, stream);
    default: return launch_for_y<__nv_bfloat16>(p, a.y_dtype, vectorised, stream);
  }
}

}  // namespace mmserve::kernels
