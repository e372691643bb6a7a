// Layer norm on the GPU (layer_norm_cuda.h): f32 residual rows in, f32/f16/bf16 normalised rows out.
//
// Rows of up to 1024 columns (every CLIP width) get one warp each, 4 rows to a 128-thread block; wider rows
// up to 8192 columns get a 256-thread block each. In both, the row is loaded once into registers (each
// thread holds kChunks packs of kVec consecutive floats, packs strided by the threads of the row so a warp's
// loads are contiguous), then reduced twice from registers (sum -> mean, centred squares -> variance, as
// torch does), then written. kVec = 4 (16-byte float4 loads, 16- or 8-byte stores) when cols, both row
// strides and all four pointers allow it, checked at run time; otherwise kVec = 1. Rows wider than 8192
// columns fall back to a block per row that reads x three times (L1/L2 serve the re-reads).
// Launches only: no allocation, no sync, no host reads of device data, so it can be captured in a graph.
// Tests: layer_norm_cuda_test.cpp; bench: layer_norm_cuda_bench.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_status.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpRowsPerBlock = 4;  // warp path: 128-thread blocks
constexpr int kBlockThreads = 256;    // block path and fallback: one row per block
constexpr int kWarpColsMax = 1024;    // widest row the warp path takes (32 lanes x 32 floats)
constexpr int kBlockColsMax = 8192;   // widest row the block path takes (256 threads x 32 floats)

struct Params {
  const float* x;
  int64_t x_ld;
  const int32_t* row_index;
  const float* weight;
  const float* bias;
  float eps;
  int64_t rows, cols;
  void* y;
  int64_t y_ld;
};

// Sum of v over the kThreads threads of a row (a warp, or the whole block), returned to every one of them
// (the xor butterfly leaves the same bits in every lane). Block version: `partials` is shared memory of
// kThreads / 32 floats used by this call alone, so consecutive calls need no barrier between them.
template <int kThreads>
__device__ __forceinline__ float row_sum(float v, float* partials) {
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

// One row per kThreads threads, the row held in registers: thread t owns columns (c * kThreads + t) * kVec
// + [0, kVec) for c < kChunks. Requires cols <= kThreads * kChunks * kVec and, for kVec > 1, cols % kVec
// == 0 with every row start kVec-aligned (checked on the host).
template <typename T, int kVec, int kChunks, int kThreads>
__global__ void __launch_bounds__(kThreads == kWarp ? kWarp * kWarpRowsPerBlock : kThreads)
    layer_norm_registers_kernel(Params p) {
  __shared__ float sum_partials[kThreads / kWarp];
  __shared__ float square_partials[kThreads / kWarp];
  const int64_t row = kThreads == kWarp ? static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarp
                                        : static_cast<int64_t>(blockIdx.x);
  if (row >= p.rows) return;  // uniform over the row's threads: the whole warp (or block) leaves
  const int t = static_cast<int>(threadIdx.x % kThreads);
  const int cols = static_cast<int>(p.cols);  // <= 8192 on this path
  const int64_t source_row = p.row_index != nullptr ? static_cast<int64_t>(p.row_index[row]) : row;
  const float* x = p.x + source_row * p.x_ld;

  float v[kChunks][kVec];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * kThreads + t) * kVec;
    if (col < cols) {
      const Pack<float, kVec> pack = *reinterpret_cast<const Pack<float, kVec>*>(x + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[c][k] = pack.v[k];
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[c][k] = 0.0f;
    }
  }

  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum += v[c][k];
  }
  const float mean = row_sum<kThreads>(sum, sum_partials) / static_cast<float>(cols);

  float squares = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if ((c * kThreads + t) * kVec < cols) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float d = v[c][k] - mean;
        squares += d * d;
      }
    }
  }
  const float variance = row_sum<kThreads>(squares, square_partials) / static_cast<float>(cols);
  const float rstd = rsqrtf(variance + p.eps);

  T* y = static_cast<T*>(p.y) + row * p.y_ld;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * kThreads + t) * kVec;
    if (col < cols) {
      const Pack<float, kVec> w = *reinterpret_cast<const Pack<float, kVec>*>(p.weight + col);
      const Pack<float, kVec> b = *reinterpret_cast<const Pack<float, kVec>*>(p.bias + col);
      Pack<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = from_f32<T>((v[c][k] - mean) * rstd * w.v[k] + b.v[k]);
      *reinterpret_cast<Pack<T, kVec>*>(y + col) = out;
    }
  }
}

// Any width: a block per row, x read three times (sum, centred squares, write), scalar accesses.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads) layer_norm_wide_kernel(Params p) {
  __shared__ float sum_partials[kBlockThreads / kWarp];
  __shared__ float square_partials[kBlockThreads / kWarp];
  const int64_t row = blockIdx.x;
  const int64_t source_row = p.row_index != nullptr ? static_cast<int64_t>(p.row_index[row]) : row;
  const float* x = p.x + source_row * p.x_ld;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < p.cols; j += kBlockThreads) sum += x[j];
  const float mean = row_sum<kBlockThreads>(sum, sum_partials) / static_cast<float>(p.cols);
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < p.cols; j += kBlockThreads) {
    const float d = x[j] - mean;
    squares += d * d;
  }
  const float variance = row_sum<kBlockThreads>(squares, square_partials) / static_cast<float>(p.cols);
  const float rstd = rsqrtf(variance + p.eps);
  T* y = static_cast<T*>(p.y) + row * p.y_ld;
  // In place, x[j] is read by the same thread just before y[j] (the same address) is written.
  for (int64_t j = threadIdx.x; j < p.cols; j += kBlockThreads) {
    y[j] = from_f32<T>((x[j] - mean) * rstd * p.weight[j] + p.bias[j]);
  }
}

template <typename T, int kVec, int kChunks, int kThreads>
Status launch_registers(const Params& p, cudaStream_t stream) {
  if constexpr (kThreads == kWarp) {
    const int64_t blocks = (p.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    layer_norm_registers_kernel<T, kVec, kChunks, kThreads>
        <<<static_cast<unsigned>(blocks), kWarp * kWarpRowsPerBlock, 0, stream>>>(p);
  } else {
    layer_norm_registers_kernel<T, kVec, kChunks, kThreads><<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

// Launches with the first kChunks of the list whose capacity (kThreads * kChunks * kVec columns) holds the
// row; the caller checks that the last one does.
template <typename T, int kVec, int kThreads, int kChunks, int... kMoreChunks>
Status launch_first_fit(const Params& p, cudaStream_t stream) {
  if constexpr (sizeof...(kMoreChunks) > 0) {
    if (p.cols > static_cast<int64_t>(kThreads) * kChunks * kVec) {
      return launch_first_fit<T, kVec, kThreads, kMoreChunks...>(p, stream);
    }
  }
  return launch_registers<T, kVec, kChunks, kThreads>(p, stream);
}

template <typename T>
Status launch_typed(const Params& p, bool vectorised, cudaStream_t stream) {
  if (p.cols <= kWarpColsMax) {
    // Warp per row: up to 32 floats per lane (8 packs of 4, or 32 scalars), so up to 1024 columns.
    return vectorised ? launch_first_fit<T, 4, kWarp, 1, 2, 3, 4, 6, 8>(p, stream)
                      : launch_first_fit<T, 1, kWarp, 1, 2, 4, 8, 16, 32>(p, stream);
  }
  if (p.cols <= kBlockColsMax) {
    // Block per row, 256 threads: up to 32 floats per thread, so up to 8192 columns.
    return vectorised ? launch_first_fit<T, 4, kBlockThreads, 2, 4, 8>(p, stream)
                      : launch_first_fit<T, 1, kBlockThreads, 8, 16, 32>(p, stream);
  }
  layer_norm_wide_kernel<T><<<static_cast<unsigned>(p.rows), kBlockThreads, 0, stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

bool aligned_to(const void* pointer, size_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

}  // namespace

Status layer_norm_cuda(const LayerNormCudaArgs& args, cudaStream_t stream) {
  if (args.y_dtype != DType::kF32 && args.y_dtype != DType::kF16 && args.y_dtype != DType::kBF16) {
    return unimplemented("layer_norm_cuda: y_dtype must be f32, f16 or bf16");
  }
  if (args.rows < 0 || args.cols <= 0) return invalid_argument("layer_norm_cuda: need rows >= 0 and cols > 0");
  if (args.rows > std::numeric_limits<int32_t>::max()) return invalid_argument("layer_norm_cuda: too many rows");
  if (args.rows == 0) return ok_status();
  if (args.x == nullptr || args.weight == nullptr || args.bias == nullptr || args.y == nullptr) {
    return invalid_argument("layer_norm_cuda: null x, weight, bias or y");
  }
  if (args.x_ld < args.cols || args.y_ld < args.cols) return invalid_argument("layer_norm_cuda: x_ld or y_ld < cols");
  if (!(args.eps >= 0.0f) || !std::isfinite(args.eps)) return invalid_argument("layer_norm_cuda: eps must be >= 0");
  const size_t y_size = dtype_size(args.y_dtype);
  if (!aligned_to(args.x, 4) || !aligned_to(args.weight, 4) || !aligned_to(args.bias, 4) ||
      !aligned_to(args.y, y_size) || !aligned_to(args.row_index, 4)) {
    return invalid_argument("layer_norm_cuda: a pointer is not aligned to its element size");
  }
  if (args.y == static_cast<const void*>(args.x) &&
      (args.y_dtype != DType::kF32 || args.x_ld != args.y_ld || args.row_index != nullptr)) {
    return invalid_argument("layer_norm_cuda: y may alias x only in place in f32, with x_ld == y_ld, no row_index");
  }

  const Params p{args.x,   args.x_ld, args.row_index, args.weight, args.bias,
                 args.eps, args.rows, args.cols,      args.y,      args.y_ld};
  constexpr int64_t kVec = 4;
  const bool vectorised = args.cols % kVec == 0 && args.x_ld % kVec == 0 && args.y_ld % kVec == 0 &&
                          aligned_to(args.x, 16) && aligned_to(args.weight, 16) && aligned_to(args.bias, 16) &&
                          aligned_to(args.y, kVec * y_size);
  switch (args.y_dtype) {
    case DType::kF32: return launch_typed<float>(p, vectorised, stream);
    case DType::kF16: return launch_typed<__half>(p, vectorised, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(p, vectorised, stream);
    default: break;
  }
  return unimplemented("layer_norm_cuda: y_dtype must be f32, f16 or bf16");
}

}  // namespace mmserve::kernels
