// KV-cache maintenance on the GPU (contracts in kv_cache.h, design notes in kv_cache_cuda.h).
// Tests: kv_cache_cuda_test.cpp; bench: kv_cache_cuda_bench.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/kv_cache/kv_cache_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kGridMax = 65535 * 16;  // blocks of a grid-stride loop: plenty to fill the GPU

unsigned grid_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kGridMax));
}

// ---- append: items are (batch row, new row, chunk of kUnit bytes) ----------------------------------------

template <typename Unit>
__global__ void append_kernel(const uint8_t* k, const uint8_t* v, int64_t src_ld_bytes, uint8_t* k_cache,
                              uint8_t* v_cache, int64_t batch, int64_t n, int64_t capacity, int64_t row_units,
                              const int32_t* positions) {
  const int64_t total = batch * n * row_units;
  const int64_t row_bytes = row_units * static_cast<int64_t>(sizeof(Unit));
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t u = idx % row_units;
    const int64_t row = idx / row_units;  // b * n + i
    const int64_t b = row / n, i = row % n;
    const int64_t pos = static_cast<int64_t>(positions[b]) + i;
    if (pos < 0 || pos >= capacity) continue;
    const int64_t src = row * src_ld_bytes + u * sizeof(Unit);
    const int64_t dst = (b * capacity + pos) * row_bytes + u * sizeof(Unit);
    *reinterpret_cast<Unit*>(k_cache + dst) = *reinterpret_cast<const Unit*>(k + src);
    if (v != nullptr) *reinterpret_cast<Unit*>(v_cache + dst) = *reinterpret_cast<const Unit*>(v + src);
  }
}

// ---- gather: items are (dst batch row, chunk of kUnit bytes of its block) ---------------------------------

template <typename Unit>
__global__ void gather_kernel(const uint8_t* src, uint8_t* dst, int64_t src_batch_bytes, int64_t dst_batch_bytes,
                              int64_t block_units, int64_t batch, int64_t batch_src, const int32_t* src_index) {
  const int64_t total = batch * block_units;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / block_units, u = idx % block_units;
    const int64_t from = src_index == nullptr ? i : src_index[i];
    if (from < 0 || from >= batch_src) continue;
    *reinterpret_cast<Unit*>(dst + i * dst_batch_bytes + u * sizeof(Unit)) =
        *reinterpret_cast<const Unit*>(src + from * src_batch_bytes + u * sizeof(Unit));
  }
}

template <typename Unit>
Status launch_gather(const uint8_t* src, uint8_t* dst, int64_t src_batch_bytes, int64_t dst_batch_bytes,
                     int64_t block_bytes, int64_t batch, int64_t batch_src, const int32_t* src_index,
                     cudaStream_t stream) {
  const int64_t block_units = block_bytes / static_cast<int64_t>(sizeof(Unit));
  gather_kernel<Unit><<<grid_for(batch * block_units), kThreads, 0, stream>>>(
      src, dst, src_batch_bytes, dst_batch_bytes, block_units, batch, batch_src, src_index);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

// The widest unit (16, 4 or 1 bytes) that every address of a gather is a multiple of.
Status gather_any(const uint8_t* src, uint8_t* dst, int64_t src_batch_bytes, int64_t dst_batch_bytes,
                  int64_t block_bytes, int64_t batch, int64_t batch_src, const int32_t* src_index,
                  cudaStream_t stream) {
  const auto all_multiple = [&](int64_t m) {
    return reinterpret_cast<uintptr_t>(src) % m == 0 && reinterpret_cast<uintptr_t>(dst) % m == 0 &&
           src_batch_bytes % m == 0 && dst_batch_bytes % m == 0 && block_bytes % m == 0;
  };
  if (all_multiple(16)) {
    return launch_gather<uint4>(src, dst, src_batch_bytes, dst_batch_bytes, block_bytes, batch, batch_src, src_index,
                                stream);
  }
  if (all_multiple(4)) {
    return launch_gather<uint32_t>(src, dst, src_batch_bytes, dst_batch_bytes, block_bytes, batch, batch_src, src_index,
                                   stream);
  }
  return launch_gather<uint8_t>(src, dst, src_batch_bytes, dst_batch_bytes, block_bytes, batch, batch_src, src_index,
                                stream);
}

// ---- quantize ---------------------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float load_f32(const T* p) {
  return to_f32(*p);
}

// grid = (chunks of rows, heads, batch): atomicMax of |x| over the (b, h) block into absmax (as the bits of
// a non-negative float, which order like the integers).
template <typename T>
__global__ void absmax_kernel(const T* src, int64_t src_ld, int64_t rows, int heads, int head_dim, int rows_per_cta,
                              unsigned* absmax_bits) {
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.x) * rows_per_cta;
  const int64_t r_end = min(r_begin + rows_per_cta, rows);
  float m = 0.0f;
  const int64_t count = (r_end - r_begin) * head_dim;
  for (int64_t idx = threadIdx.x; idx < count; idx += blockDim.x) {
    const int64_t r = r_begin + idx / head_dim;
    const int d = static_cast<int>(idx % head_dim);
    m = fmaxf(m, fabsf(load_f32(src + (b * rows + r) * src_ld + static_cast<int64_t>(h) * head_dim + d)));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0 && m > 0.0f) atomicMax(absmax_bits + b * heads + h, __float_as_uint(m));
}

template <typename T, bool kFp8>
__global__ void quantize_kernel(const T* src, int64_t src_ld, int64_t rows, int heads, int head_dim, int rows_per_cta,
                                const unsigned* absmax_bits, uint8_t* dst, int64_t dst_ld, int64_t dst_batch_stride) {
  const int h = blockIdx.y, b = blockIdx.z;
  const float range = kFp8 ? 448.0f : 127.0f;
  const float scale = __uint_as_float(absmax_bits[b * heads + h]) / range;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.x) * rows_per_cta;
  const int64_t r_end = min(r_begin + rows_per_cta, rows);
  const int64_t count = (r_end - r_begin) * head_dim;
  for (int64_t idx = threadIdx.x; idx < count; idx += blockDim.x) {
    const int64_t r = r_begin + idx / head_dim;
    const int d = static_cast<int>(idx % head_dim);
    const float x = load_f32(src + (b * rows + r) * src_ld + static_cast<int64_t>(h) * head_dim + d);
    uint8_t q = 0;
    if (scale != 0.0f) {
      const float y = x / scale;  // IEEE division (no fast-math): the CPU twin divides the same way
      if constexpr (kFp8) {
        q = static_cast<uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3));
      } else {
        q = static_cast<uint8_t>(static_cast<int8_t>(min(max(__float2int_rn(y), -127), 127)));
      }
    }
    dst[(b * dst_batch_stride + r) * dst_ld + static_cast<int64_t>(h) * head_dim + d] = q;
  }
}

__global__ void absmax_to_scale_kernel(float* scale, int64_t count, float range) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) scale[i] = scale[i] / range;  // the absmax bits are those of the float itself
}

template <typename T>
Status launch_quantize(const QuantizeKvArgs& a, cudaStream_t stream) {
  const T* src = static_cast<const T*>(a.src);
  unsigned* absmax = reinterpret_cast<unsigned*>(a.scale);
  // Rows per CTA: about 2K elements (8 per thread), so that one request's 1500 x 20 heads spread over
  // ~1000 CTAs and the loads of a thread are few (the kernels are latency-bound otherwise).
  const int rows_per_cta = static_cast<int>(std::max<int64_t>(1, 2048 / a.head_dim));
  const dim3 grid(static_cast<unsigned>((a.rows + rows_per_cta - 1) / rows_per_cta), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  const int64_t count = a.batch * a.heads;
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.scale, 0, static_cast<size_t>(count) * sizeof(float), stream));
  absmax_kernel<T><<<grid, kThreads, 0, stream>>>(src, a.src_ld, a.rows, static_cast<int>(a.heads),
                                                  static_cast<int>(a.head_dim), rows_per_cta, absmax);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  uint8_t* dst = static_cast<uint8_t*>(a.dst);
  if (a.storage == KvStorage::kFp8E4M3) {
    quantize_kernel<T, true><<<grid, kThreads, 0, stream>>>(src, a.src_ld, a.rows, static_cast<int>(a.heads),
                                                            static_cast<int>(a.head_dim), rows_per_cta, absmax, dst,
                                                            a.dst_ld, a.dst_batch_stride);
  } else {
    quantize_kernel<T, false><<<grid, kThreads, 0, stream>>>(src, a.src_ld, a.rows, static_cast<int>(a.heads),
                                                             static_cast<int>(a.head_dim), rows_per_cta, absmax, dst,
                                                             a.dst_ld, a.dst_batch_stride);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  const float range = a.storage == KvStorage::kFp8E4M3 ? 448.0f : 127.0f;
  absmax_to_scale_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      a.scale, count, range);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace

Status kv_cache_append(const KvCacheAppendArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(kv_cache_append_validate(a));
  if (a.batch == 0 || a.n == 0 || a.width == 0) return ok_status();
  const int64_t elem = static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t row_bytes = a.width * elem, src_ld_bytes = a.src_ld * elem;
  const uint8_t* k = static_cast<const uint8_t*>(a.k);
  const uint8_t* v = static_cast<const uint8_t*>(a.v);
  uint8_t* kc = static_cast<uint8_t*>(a.k_cache);
  uint8_t* vc = static_cast<uint8_t*>(a.v_cache);
  const bool vec = aligned16(k) && aligned16(kc) && (v == nullptr || (aligned16(v) && aligned16(vc))) &&
                   row_bytes % 16 == 0 && src_ld_bytes % 16 == 0;
  if (vec) {
    const int64_t units = row_bytes / 16;
    append_kernel<uint4><<<grid_for(a.batch * a.n * units), kThreads, 0, stream>>>(k, v, src_ld_bytes, kc, vc, a.batch,
                                                                                   a.n, a.capacity, units, a.positions);
  } else {
    append_kernel<uint16_t><<<grid_for(a.batch * a.n * a.width * elem / 2), kThreads, 0, stream>>>(
        k, v, src_ld_bytes, kc, vc, a.batch, a.n, a.capacity, row_bytes / 2, a.positions);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status kv_cache_gather(const KvCacheGatherArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(kv_cache_gather_validate(a));
  if (a.batch == 0 || a.rows == 0 || a.width == 0) return ok_status();
  const int64_t eb = static_cast<int64_t>(a.element_bytes);
  const int64_t batch_bytes = a.capacity * a.width * eb;
  const int64_t block_bytes = a.rows * a.width * eb;
  const uint8_t* src = static_cast<const uint8_t*>(a.src);
  uint8_t* dst = static_cast<uint8_t*>(a.dst);
  if (a.src != a.dst) {
    return gather_any(src, dst, batch_bytes, batch_bytes, block_bytes, a.batch, a.batch_src, a.src_index, stream);
  }
  // In place: gather into the scratch (packed blocks), then copy the blocks back in order. An index out of
  // range leaves its scratch block stale, so copy the row onto itself first (keeps "untouched").
  uint8_t* scratch = static_cast<uint8_t*>(a.scratch);
  RETURN_IF_ERROR(gather_any(src, scratch, batch_bytes, block_bytes, block_bytes, a.batch, a.batch, nullptr, stream));
  RETURN_IF_ERROR(
      gather_any(src, scratch, batch_bytes, block_bytes, block_bytes, a.batch, a.batch_src, a.src_index, stream));
  return gather_any(scratch, dst, block_bytes, batch_bytes, block_bytes, a.batch, a.batch, nullptr, stream);
}

Status quantize_kv(const QuantizeKvArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(quantize_kv_validate(a));
  if (a.batch == 0 || a.heads == 0) return ok_status();
  if (a.batch > 65535 || a.heads > 65535) return unimplemented("quantize_kv: batch and heads must be <= 65535");
  if (a.rows == 0 || a.head_dim == 0) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.scale, 0, static_cast<size_t>(a.batch * a.heads) * sizeof(float), stream));
    return ok_status();
  }
  switch (a.dtype) {
    case DType::kF32: return launch_quantize<float>(a, stream);
    case DType::kF16: return launch_quantize<__half>(a, stream);
    default: return launch_quantize<__nv_bfloat16>(a, stream);
  }
}

}  // namespace mmserve::kernels
