// Row-wise L2 normalisation on the GPU, in place (l2_normalize_cuda.h), with the CPU twin's numerics: the
// sum of squares in double (rows of 1e-30 or 1e30 neither underflow nor overflow), x * (1 / sqrt(sum)) in
// double rounded once to f32, a zero row left as it is.
//
// One warp per row, 4 rows to a 128-thread block: each lane sums squares over a strided part of the row
// (16-byte float4 loads when x is 16-byte aligned and cols % 4 == 0, checked at run time; else scalar), a
// shuffle reduction gives every lane the row's sum, and the lanes scale the row (the re-read hits L1/L2).
// It runs once per request on [batch, 512], so launch overhead, not bandwidth, is its cost.
// No allocation, sync or host reads: graph-capturable.
// Tests: l2_normalize_cuda_test.cpp; bench: l2_normalize_cuda_bench.cpp.
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_status.h"
#include "kernels/l2_normalize/l2_normalize_cuda.h"
#include "kernels/common/cuda_convert.cuh"

namespace mmserve::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;
constexpr int kBlockThreads = kWarp * kRowsPerBlock;

template <int kVec>
__global__ void __launch_bounds__(kBlockThreads) l2_normalize_kernel(float* x, int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  float* r = x + row * cols;
  double squares = 0.0;
  for (int64_t j = static_cast<int64_t>(lane) * kVec; j < cols; j += kWarp * kVec) {
    const Pack<float, kVec> pack = *reinterpret_cast<const Pack<float, kVec>*>(r + j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) squares += static_cast<double>(pack.v[k]) * static_cast<double>(pack.v[k]);
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  if (squares == 0.0) return;  // same value in every lane
  const double inv_norm = 1.0 / sqrt(squares);
  for (int64_t j = static_cast<int64_t>(lane) * kVec; j < cols; j += kWarp * kVec) {
    Pack<float, kVec> pack = *reinterpret_cast<const Pack<float, kVec>*>(r + j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) pack.v[k] = static_cast<float>(static_cast<double>(pack.v[k]) * inv_norm);
    *reinterpret_cast<Pack<float, kVec>*>(r + j) = pack;
  }
}

}  // namespace

Status l2_normalize_rows_cuda(float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols <= 0) return invalid_argument("l2_normalize_rows_cuda: need rows >= 0 and cols > 0");
  if (rows > std::numeric_limits<int32_t>::max()) return invalid_argument("l2_normalize_rows_cuda: too many rows");
  if (rows == 0) return ok_status();
  if (x == nullptr) return invalid_argument("l2_normalize_rows_cuda: null x");
  if (reinterpret_cast<uintptr_t>(x) % sizeof(float) != 0) {
    return invalid_argument("l2_normalize_rows_cuda: x is not aligned to its element size");
  }
  const auto blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && cols % 4 == 0) {
    l2_normalize_kernel<4><<<blocks, kBlockThreads, 0, stream>>>(x, rows, cols);
  } else {
    l2_normalize_kernel<1><<<blocks, kBlockThreads, 0, stream>>>(x, rows, cols);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace mmserve::kernels
