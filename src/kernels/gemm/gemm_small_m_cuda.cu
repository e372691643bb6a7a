// f32 GEMM for few rows (see gemm_small_m_cuda.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
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

// 16-bit inputs, f32 accumulation, the decoders' batch-1..4 projections (see gemm_small_m_cuda.h). Warp `warp`
// of CTA x computes column col = x * kWarps + warp for every row: its lanes stream the column's weight row once in
// 16-byte loads (8 values), unrolled so that each lane has kUnroll loads in flight (a GEMV is a stream of the
// weight: the loads in flight are what reach the bandwidth), then a butterfly reduction per row.

// D's elements as f32 and back (kernels/common/cuda_convert.cuh).
template <typename TOut>
__device__ __forceinline__ float load_out(const TOut* p) {
  return to_f32(*p);
}
template <typename TOut>
__device__ __forceinline__ void store_out(TOut* p, float v) {
  *p = from_f32<TOut>(v);
}

struct Params16 {
  const void* a;
  const void* w;
  void* d;
  const void* bias;
  int64_t lda, ldw, ldd;
  int m, n, k;
  float alpha, beta;
};

template <typename T, typename TOut, int kRows>
__global__ void __launch_bounds__(32 * kWarps) gemv16_kernel(Params16 p) {
  constexpr int kUnroll = 4;
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * kWarps + warp;
  if (col >= p.n) return;
  const T* wrow = static_cast<const T*>(p.w) + static_cast<int64_t>(col) * p.ldw;
  const T* a = static_cast<const T*>(p.a);
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  auto fma8 = [&](const uint4& w4, int k) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < p.m) {
        const uint4 a4 = *reinterpret_cast<const uint4*>(a + static_cast<int64_t>(r) * p.lda + k);
        const uint32_t wv[4] = {w4.x, w4.y, w4.z, w4.w}, av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 wf = packed_to_float2<T>(wv[j]), af = packed_to_float2<T>(av[j]);
          acc[r] = fmaf(af.x, wf.x, fmaf(af.y, wf.y, acc[r]));
        }
      }
    }
  };
  constexpr int kStep = 32 * 8;  // elements a warp covers per load
  int k = lane * 8;
  // The first sweep's weight loads go out before pdl_wait (cuda_pdl.cuh): the weight depends on no earlier
  // kernel, so they overlap the previous kernel's tail; A and D only after it.
  uint4 first[kUnroll];
  const bool sweep = k + (kUnroll - 1) * kStep < p.k;
  if (sweep) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) first[u] = __ldg(reinterpret_cast<const uint4*>(wrow + k + u * kStep));
  }
  pdl_wait();
  if (sweep) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma8(first[u], k + u * kStep);
    k += kUnroll * kStep;
  }
  for (; k + (kUnroll - 1) * kStep < p.k; k += kUnroll * kStep) {
    uint4 w4[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w4[u] = __ldg(reinterpret_cast<const uint4*>(wrow + k + u * kStep));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma8(w4[u], k + u * kStep);
  }
  for (; k < p.k; k += kStep) fma8(__ldg(reinterpret_cast<const uint4*>(wrow + k)), k);
  float mine = 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == r) mine = v;
  }
  if (lane < p.m) {
    TOut* out = static_cast<TOut*>(p.d) + static_cast<int64_t>(lane) * p.ldd + col;
    float y = p.alpha * mine + (p.bias != nullptr ? load_out(static_cast<const TOut*>(p.bias) + col) : 0.0f);
    if (p.beta != 0.0f) y = fmaf(p.beta, load_out(out), y);  // beta == 0 never reads D
    store_out(out, y);
  }
}

template <typename T, typename TOut>
void launch_gemv16(const Params16& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n + kWarps - 1) / kWarps));
  if (p.m <= 1) {
    launch_pdl(gemv16_kernel<T, TOut, 1>, grid, dim3(32 * kWarps), 0, stream, p);
  } else {
    launch_pdl(gemv16_kernel<T, TOut, kGemmSmallM16KernelRows>, grid, dim3(32 * kWarps), 0, stream, p);
  }
}

// The batch-1 MLP's first half (see gemv16_swiglu_cuda in gemm_small_m_cuda.h): warp `warp` of CTA x owns
// column col = x * kWarps + warp of the activation and streams two weight rows, gate (col) and up (inter + col),
// with gemv16_kernel's loads and summation order, so gate and up come out bit-equal to the GEMV's.
template <typename T>
__global__ void __launch_bounds__(32 * kWarps) gemv16_swiglu_kernel(GemvSwigluArgs p) {
  constexpr int kUnroll = 4;
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * kWarps + warp;
  if (col >= p.inter) return;
  const T* a = static_cast<const T*>(p.a);
  const T* rows[2] = {static_cast<const T*>(p.w) + static_cast<int64_t>(col) * p.ldw,
                      static_cast<const T*>(p.w) + (p.inter + static_cast<int64_t>(col)) * p.ldw};
  float acc[2] = {0.0f, 0.0f};
  auto fma8 = [&](const uint4& w4, int r, int k) {
    const uint4 a4 = *reinterpret_cast<const uint4*>(a + k);
    const uint32_t wv[4] = {w4.x, w4.y, w4.z, w4.w}, av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 wf = packed_to_float2<T>(wv[j]), af = packed_to_float2<T>(av[j]);
      acc[r] = fmaf(af.x, wf.x, fmaf(af.y, wf.y, acc[r]));
    }
  };
  constexpr int kStep = 32 * 8;
  int k = lane * 8;
  uint4 first[2][kUnroll];  // as gemv16_kernel: the first sweep of both rows before pdl_wait
  const bool sweep = k + (kUnroll - 1) * kStep < p.k;
  if (sweep) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) first[r][u] = __ldg(reinterpret_cast<const uint4*>(rows[r] + k + u * kStep));
    }
  }
  pdl_wait();
  if (sweep) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma8(first[r][u], r, k + u * kStep);
    }
    k += kUnroll * kStep;
  }
  for (; k + (kUnroll - 1) * kStep < p.k; k += kUnroll * kStep) {
    uint4 w4[2][kUnroll];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) w4[r][u] = __ldg(reinterpret_cast<const uint4*>(rows[r] + k + u * kStep));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma8(w4[r][u], r, k + u * kStep);
    }
  }
  for (; k < p.k; k += kStep) {
#pragma unroll
    for (int r = 0; r < 2; ++r) fma8(__ldg(reinterpret_cast<const uint4*>(rows[r] + k)), r, k);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  }
  if (lane == 0) {
    const T* bias = static_cast<const T*>(p.bias);
    // Rounded to T as the GEMV stores gate_up, then swiglu_cuda's arithmetic.
    const float gate = to_f32(from_f32<T>(acc[0] + (bias != nullptr ? to_f32(bias[col]) : 0.0f)));
    const float up = to_f32(from_f32<T>(acc[1] + (bias != nullptr ? to_f32(bias[p.inter + col]) : 0.0f)));
    static_cast<T*>(p.y)[col] = from_f32<T>(gate / (1.0f + expf(-gate)) * up);
  }
}

}  // namespace

bool gemm_small_m16_applies(const GemmCudaArgs& a) {
  const bool half = a.in_dtype == DType::kBF16 || a.in_dtype == DType::kF16;
  return half && a.m <= kGemmSmallM16MaxRows && a.k % 8 == 0 && a.lda % 8 == 0 && a.ldw % 8 == 0 &&
         aligned16(a.a) && aligned16(a.w) && a.n <= (int64_t{1} << 30) && a.k <= (int64_t{1} << 30);
}

Status gemm_small_m16_cuda(const GemmCudaArgs& args, cudaStream_t stream) {
  if (!gemm_small_m16_applies(args)) return internal_error("gemm_small_m16_cuda: shape outside its path");
  Params16 p{args.a, args.w, args.d, args.bias, args.lda, args.ldw, args.ldd, static_cast<int>(args.m),
             static_cast<int>(args.n), static_cast<int>(args.k), args.alpha, args.beta};
  const bool f32_out = args.out_dtype == DType::kF32;
  if (args.in_dtype == DType::kBF16) {
    f32_out ? launch_gemv16<__nv_bfloat16, float>(p, stream) : launch_gemv16<__nv_bfloat16, __nv_bfloat16>(p, stream);
  } else {
    f32_out ? launch_gemv16<__half, float>(p, stream) : launch_gemv16<__half, __half>(p, stream);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

bool gemv16_swiglu_applies(const GemvSwigluArgs& a) {
  const bool half = a.dtype == DType::kBF16 || a.dtype == DType::kF16;
  return half && a.k % 8 == 0 && a.ldw % 8 == 0 && aligned16(a.a) && aligned16(a.w) && a.inter > 0 &&
         a.inter <= (int64_t{1} << 30) && a.k > 0 && a.k <= (int64_t{1} << 30) && a.ldw >= a.k;
}

Status gemv16_swiglu_cuda(const GemvSwigluArgs& args, cudaStream_t stream) {
  if (!gemv16_swiglu_applies(args) || args.y == nullptr) {
    return invalid_argument("gemv16_swiglu_cuda: 16-bit, K and ldw multiples of 8, 16-byte aligned a and w");
  }
  const dim3 grid(static_cast<unsigned>((args.inter + kWarps - 1) / kWarps));
  if (args.dtype == DType::kBF16) {
    launch_pdl(gemv16_swiglu_kernel<__nv_bfloat16>, grid, dim3(32 * kWarps), 0, stream, args);
  } else {
    launch_pdl(gemv16_swiglu_kernel<__half>, grid, dim3(32 * kWarps), 0, stream, args);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

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
