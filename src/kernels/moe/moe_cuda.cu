// The MoE routing kernels on the GPU (see moe_cuda.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kPerLane = kMoeCudaMaxExperts / kWarp;  // router values each lane holds

// One warp per token: softmax over the experts, k rounds of a warp argmax (ties to the lower id), renormalised.
__global__ void route_kernel(const float* logits, int64_t logits_ld, int64_t tokens, int experts, int k, int32_t* ids,
                             float* weights) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (t >= tokens) return;
  const float* l = logits + t * logits_ld;
  float p[kPerLane];
  float max = -INFINITY;
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + j * kWarp;
    p[j] = e < experts ? l[e] : -INFINITY;
    max = fmaxf(max, p[j]);
  }
  for (int o = kWarp / 2; o > 0; o /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
  float sum = 0.0f;
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + j * kWarp;
    p[j] = e < experts ? expf(p[j] - max) : 0.0f;
    sum += p[j];
  }
  for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int j = 0; j < kPerLane; ++j) p[j] = lane + j * kWarp < experts ? p[j] / sum : -1.0f;
  float top_sum = 0.0f;
  for (int r = 0; r < k; ++r) {
    float best = -2.0f;
    int best_e = experts;
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + j * kWarp;
      if (p[j] > best || (p[j] == best && e < best_e)) best = p[j], best_e = e;
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
    }
    if (lane == 0) {
      ids[t * k + r] = best_e;
      weights[t * k + r] = best;  // the probability for now; renormalised below
    }
    top_sum += best;
    if (best_e % kWarp == lane) p[best_e / kWarp] = -1.0f;  // taken
  }
  __syncwarp();
  if (lane == 0) {
    for (int r = 0; r < k; ++r) weights[t * k + r] /= top_sum;
  }
}

// One block: thread e counts expert e's pairs, thread 0 sums the counts into offsets, then thread e places its
// pairs in ascending pair order (tokens ascending within the expert, as the CPU's counting sort).
__global__ void plan_kernel(const int32_t* ids, int64_t pairs, int experts, int32_t* offsets, int32_t* pair,
                            int32_t* row_of) {
  __shared__ int32_t count[kMoeCudaMaxExperts + 1];
  const int e = threadIdx.x;
  if (e < experts) {
    int32_t c = 0;
    for (int64_t i = 0; i < pairs; ++i) c += ids[i] == e;
    count[e + 1] = c;
  }
  __syncthreads();
  if (e == 0) {
    count[0] = 0;
    for (int x = 0; x < experts; ++x) count[x + 1] += count[x];
    for (int x = 0; x <= experts; ++x) offsets[x] = count[x];
  }
  __syncthreads();
  if (e < experts) {
    int32_t next = count[e];
    for (int64_t i = 0; i < pairs; ++i) {
      if (ids[i] != e) continue;
      pair[next] = static_cast<int32_t>(i);
      row_of[i] = next;
      ++next;
    }
  }
}

template <typename T>
__global__ void permute_kernel(const T* x, int64_t x_ld, const int32_t* pair, int64_t k, int64_t cols, T* xp,
                               int64_t xp_ld) {
  const int64_t r = blockIdx.x;
  const T* src = x + (pair[r] / k) * x_ld;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) xp[r * xp_ld + c] = src[c];
}

__global__ void combine_kernel(const float* yp, int64_t yp_ld, const int32_t* row_of, const int32_t* ids,
                               const float* weights, int64_t k, int64_t cols, float* out, int64_t out_ld,
                               bool accumulate) {
  __shared__ int32_t rows[kMoeMaxTopK];
  __shared__ float w[kMoeMaxTopK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {  // the token's slots by ascending expert id (insertion sort of k <= 64)
    int32_t slot[kMoeMaxTopK];
    for (int j = 0; j < k; ++j) slot[j] = j;
    for (int j = 1; j < k; ++j) {
      const int32_t s = slot[j];
      int q = j - 1;
      while (q >= 0 && ids[t * k + slot[q]] > ids[t * k + s]) slot[q + 1] = slot[q], --q;
      slot[q + 1] = s;
    }
    for (int j = 0; j < k; ++j) {
      rows[j] = row_of != nullptr ? row_of[t * k + slot[j]] : static_cast<int32_t>(t * k + slot[j]);
      w[j] = weights[t * k + slot[j]];
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += yp[rows[j] * yp_ld + c] * w[j];
    out[t * out_ld + c] = accumulate ? out[t * out_ld + c] + sum : sum;
  }
}

constexpr int kGemvWarps = 8;

// Warp w of CTA (x, p) owns output column x * kGemvWarps + w of pair p: its lanes stream the expert's weight row
// in 16-byte loads against the pair's x row, then a butterfly sum.
template <typename T, typename TOut>
__global__ void __launch_bounds__(32 * kGemvWarps)
    moe_gemv_kernel(const T* x, int64_t x_ld, int64_t x_div, const T* w, int64_t w_stride, const int32_t* ids,
                    int64_t n, int64_t k, TOut* y, int64_t y_ld) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col = blockIdx.x * int64_t{kGemvWarps} + warp, p = blockIdx.y;
  if (col >= n) return;
  const T* wrow = w + ids[p] * w_stride + col * k;
  const T* xr = x + (p / x_div) * x_ld;
  float acc = dot16_lane(xr, wrow, k, lane);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) y[p * y_ld + col] = from_f32<TOut>(acc);
}

template <typename T>
Status launch_moe_gemv(const void* x, int64_t x_ld, int64_t x_div, const void* w, int64_t w_stride, const int32_t* ids,
                       int64_t pairs, int64_t n, int64_t k, void* y, DType y_dtype, int64_t y_ld, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + kGemvWarps - 1) / kGemvWarps), static_cast<unsigned>(pairs));
  const dim3 block(32 * kGemvWarps);
  const T* xt = static_cast<const T*>(x);
  const T* wt = static_cast<const T*>(w);
  if (y_dtype == DType::kF32) {
    moe_gemv_kernel<T, float>
        <<<grid, block, 0, stream>>>(xt, x_ld, x_div, wt, w_stride, ids, n, k, static_cast<float*>(y), y_ld);
  } else {
    moe_gemv_kernel<T, T>
        <<<grid, block, 0, stream>>>(xt, x_ld, x_div, wt, w_stride, ids, n, k, static_cast<T*>(y), y_ld);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status check_route(int64_t tokens, int64_t experts, int64_t k) {
  if (tokens < 0 || experts <= 0 || experts > kMoeCudaMaxExperts || k <= 0 || k > experts || k > kMoeMaxTopK) {
    return invalid_argument("MoE routing of " + std::to_string(tokens) + " tokens over " + std::to_string(experts) +
                            " experts, top-" + std::to_string(k) + " (1..min(experts, 64), experts <= 256)");
  }
  if (tokens * k >= (int64_t{1} << 31)) return invalid_argument("MoE routing: too many (token, expert) pairs");
  return ok_status();
}

}  // namespace

Status moe_route_cuda(const float* logits, int64_t logits_ld, int64_t tokens, int64_t experts, int64_t k, int32_t* ids,
                      float* weights, cudaStream_t stream) {
  RETURN_IF_ERROR(check_route(tokens, experts, k));
  if (tokens == 0) return ok_status();
  constexpr int kWarpsPerBlock = 4;
  const dim3 grid(static_cast<unsigned>((tokens + kWarpsPerBlock - 1) / kWarpsPerBlock)), block(kWarpsPerBlock * kWarp);
  route_kernel<<<grid, block, 0, stream>>>(logits, logits_ld, tokens, static_cast<int>(experts), static_cast<int>(k),
                                           ids, weights);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status moe_plan_cuda(const int32_t* ids, int64_t tokens, int64_t experts, int64_t k, int32_t* offsets, int32_t* pair,
                     int32_t* row_of, cudaStream_t stream) {
  RETURN_IF_ERROR(check_route(tokens, experts, k));
  plan_kernel<<<1, static_cast<unsigned>(experts), 0, stream>>>(ids, tokens * k, static_cast<int>(experts), offsets,
                                                                pair, row_of);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status moe_permute_cuda(const void* x, int64_t x_ld, DType dtype, const int32_t* pair, int64_t rows, int64_t k,
                        int64_t cols, void* xp, int64_t xp_ld, cudaStream_t stream) {
  if (rows <= 0) return ok_status();
  const dim3 grid(static_cast<unsigned>(rows)), block(256);
  if (dtype == DType::kF32) {
    permute_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(x), x_ld, pair, k, cols,
                                               static_cast<float*>(xp), xp_ld);
  } else if (dtype == DType::kBF16 || dtype == DType::kF16) {
    permute_kernel<<<grid, block, 0, stream>>>(static_cast<const uint16_t*>(x), x_ld, pair, k, cols,
                                               static_cast<uint16_t*>(xp), xp_ld);
  } else {
    return unimplemented(std::string("moe_permute_cuda in ") + dtype_name(dtype));
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status moe_gemv_cuda(const void* x, int64_t x_ld, int64_t x_div, const void* w, int64_t w_stride, DType dtype,
                     const int32_t* ids, int64_t pairs, int64_t n, int64_t k, void* y, DType y_dtype, int64_t y_ld,
                     cudaStream_t stream) {
  if (pairs < 0 || pairs > kMoeGemvMaxPairs || n <= 0 || k <= 0 || k % 8 != 0 || x_ld % 8 != 0 || x_div <= 0 ||
      (y_dtype != DType::kF32 && y_dtype != dtype) || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0 || w_stride % 8 != 0) {
    return invalid_argument(
        "moe_gemv_cuda: pairs 0..64, k and the strides multiples of 8, x and w 16-byte aligned, "
        "y in f32 or the input dtype");
  }
  if (pairs == 0) return ok_status();
  if (dtype == DType::kBF16) {
    return launch_moe_gemv<__nv_bfloat16>(x, x_ld, x_div, w, w_stride, ids, pairs, n, k, y, y_dtype, y_ld, stream);
  }
  if (dtype == DType::kF16) {
    return launch_moe_gemv<__half>(x, x_ld, x_div, w, w_stride, ids, pairs, n, k, y, y_dtype, y_ld, stream);
  }
  return unimplemented(std::string("moe_gemv_cuda in ") + dtype_name(dtype) + " (bf16 or f16)");
}

Status moe_combine_cuda(const float* yp, int64_t yp_ld, const int32_t* row_of, const int32_t* ids, const float* weights,
                        int64_t tokens, int64_t k, int64_t cols, float* out, int64_t out_ld, bool accumulate,
                        cudaStream_t stream) {
  if (k <= 0 || k > kMoeMaxTopK) return invalid_argument("moe_combine_cuda: k must be in 1..64");
  if (tokens <= 0) return ok_status();
  combine_kernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(yp, yp_ld, row_of, ids, weights, k, cols, out,
                                                                    out_ld, accumulate);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace mmserve::kernels
