// f32 GEMM for few rows (see gemm_small_m_cuda.h).
#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_small_m_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kWarps = 8;       // output columns per CTA (one per warp)
constexpr int kRowsPerPass = 16;  // rows whose partial sums a lane keeps in registers

struct Params {
  const float* a;
  const float* w;
  float* d;
  const float* bias;
  int64_t lda, ldw, ldd;
  int m, n, k;
  float alpha, beta;
};

// grid = ceil(n / kWarps), block = 32 * kWarps. Warp `warp` of CTA x computes column n = x * kWarps + warp.
// kVec: 4 (float4 loads; K, lda, ldw multiples of 4 and both pointers 16-byte aligned) or 1.
template <int kVec>
__global__ void __launch_bounds__(32 * kWarps) gemm_small_m_kernel(Params p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * kWarps + warp;
  if (col >= p.n) return;
  const float* wrow = p.w + static_cast<int64_t>(col) * p.ldw;
  const float bias = p.bias != nullptr ? p.bias[col] : 0.0f;
  for (int m0 = 0; m0 < p.m; m0 += kRowsPerPass) {
    const int rows = min(kRowsPerPass, p.m - m0);
    float acc[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
    for (int k = lane * kVec; k < p.k; k += 32 * kVec) {
      if constexpr (kVec == 4) {
        const float4 w4 = *reinterpret_cast<const float4*>(wrow + k);
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) {
          if (r < rows) {
            const float4 a4 = *reinterpret_cast<const float4*>(p.a + static_cast<int64_t>(m0 + r) * p.lda + k);
            acc[r] = fmaf(a4.x, w4.x, fmaf(a4.y, w4.y, fmaf(a4.z, w4.z, fmaf(a4.w, w4.w, acc[r]))));
          }
        }
      } else {
        const float wv = wrow[k];
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) {
          if (r < rows) acc[r] = fmaf(p.a[static_cast<int64_t>(m0 + r) * p.lda + k], wv, acc[r]);
        }
      }
    }
    // Every lane ends with every row's sum; lane r writes row m0 + r.
    float mine = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      float v = acc[r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == r) mine = v;
    }
    if (lane < rows) {
      float* out = p.d + static_cast<int64_t>(m0 + lane) * p.ldd + col;
      float y = p.alpha * mine + bias;
      if (p.beta != 0.0f) y = fmaf(p.beta, *out, y);  // beta == 0 never reads D (it may hold NaN)
      *out = y;
    }
  }
}

}  // namespace

Status gemm_small_m_cuda(const GemmCudaArgs& args, cudaStream_t stream) {
  if (args.m > kGemmSmallMMaxRows || args.n > (int64_t{1} << 30) || args.k > (int64_t{1} << 30)) {
    return internal_error("gemm_small_m_cuda: shape outside the small-M path");
  }
  Params p{};
  p.a = static_cast<const float*>(args.a);
  p.w = static_cast<const float*>(args.w);
  p.d = static_cast<float*>(args.d);
  p.bias = static_cast<const float*>(args.bias);
  p.lda = args.lda, p.ldw = args.ldw, p.ldd = args.ldd;
  p.m = static_cast<int>(args.m), p.n = static_cast<int>(args.n), p.k = static_cast<int>(args.k);
  p.alpha = args.alpha, p.beta = args.beta;
  const bool vec = args.k % 4 == 0 && args.lda % 4 == 0 && args.ldw % 4 == 0 && aligned16(args.a) && aligned16(args.w);
  const dim3 grid(static_cast<unsigned>((args.n + kWarps - 1) / kWarps));
  if (vec) {
    gemm_small_m_kernel<4><<<grid, 32 * kWarps, 0, stream>>>(p);
  } else {
    gemm_small_m_kernel<1><<<grid, 32 * kWarps, 0, stream>>>(p);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace mmserve::kernels
