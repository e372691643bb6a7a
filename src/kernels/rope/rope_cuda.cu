// RoPE on the GPU (rope_cuda.h). A block per row: the first head_dim / 2 threads compute cos/sin of the row's
// angles once into shared memory (sincosf, full precision), then the block rotates every (head, pack) pair, a
// pack being kVec consecutive i of the first half with the matching kVec of the second half (16-byte accesses
// when head_dim / 2, ld and the pointer allow it, checked on the host; else kVec = 1). Launches only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
#include "kernels/fp8/fp8_cuda_codes.cuh"
#include "kernels/rope/rope_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kHeadDimMax = 1024;

struct Params {
  void* x;
  int64_t rows, ld, heads, half;
  const int32_t* positions;
  const float* inv_freq;
};

// The cache write fused after the rotation (apply_rope_and_cache_cuda): row r's k and v (k rotated in place just
// before) copied to slot_mapping[r] of the caches, in 16-byte words when `wide`; into an FP8 pool (`fp8`) each
// element is quantised as paged_kv_write_cuda does (fp8_encode_scaled with the layer's scales, read on the device),
// so the fused launch writes the same codes as the two launches it replaces.
struct CacheParams {
  const void* k;
  const void* v;
  int64_t src_ld;  // in elements of T
  void* k_cache;
  void* v_cache;
  const int32_t* slot_mapping;
  int64_t width, num_slots;
  bool wide;
  bool fp8 = false, e4m3 = false;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

template <typename W>
__device__ __forceinline__ void copy_row(const CacheParams& c, int64_t row, int64_t slot, int64_t scale) {
  const W* k = static_cast<const W*>(c.k) + row * (c.src_ld / scale);
  const W* v = static_cast<const W*>(c.v) + row * (c.src_ld / scale);
  W* kc = static_cast<W*>(c.k_cache) + slot * (c.width / scale);
  W* vc = static_cast<W*>(c.v_cache) + slot * (c.width / scale);
  for (int64_t i = threadIdx.x; i < c.width / scale; i += kThreads) kc[i] = k[i], vc[i] = v[i];
}

template <typename T>
__device__ __forceinline__ void quantise_row(const CacheParams& c, int64_t row, int64_t slot) {
  const T* k = static_cast<const T*>(c.k) + row * c.src_ld;
  const T* v = static_cast<const T*>(c.v) + row * c.src_ld;
  uint8_t* kc = static_cast<uint8_t*>(c.k_cache) + slot * c.width;
  uint8_t* vc = static_cast<uint8_t*>(c.v_cache) + slot * c.width;
  const float ks = *c.k_scale, vs = *c.v_scale;
  for (int64_t i = threadIdx.x; i < c.width; i += kThreads) {
    kc[i] = fp8_encode_scaled(to_f32(k[i]), ks, c.e4m3);
    vc[i] = fp8_encode_scaled(to_f32(v[i]), vs, c.e4m3);
  }
}

template <typename T, int kVec, bool kCache>
__global__ void __launch_bounds__(kThreads) rope_kernel(Params p, CacheParams cache) {
  __shared__ float cos_f[kHeadDimMax / 2], sin_f[kHeadDimMax / 2];
  pdl_trigger();  // cuda_pdl.cuh
  pdl_wait();
  const int64_t row = blockIdx.x;
  const float pos = static_cast<float>(p.positions[row]);
  for (int i = threadIdx.x; i < p.half; i += kThreads) sincosf(__fmul_rn(pos, p.inv_freq[i]), &sin_f[i], &cos_f[i]);
  __syncthreads();
  const int packs_per_head = static_cast<int>(p.half / kVec);
  const int work = static_cast<int>(p.heads) * packs_per_head;
  T* x = static_cast<T*>(p.x) + row * p.ld;
  for (int w = threadIdx.x; w < work; w += kThreads) {
    const int h = w / packs_per_head, i0 = (w % packs_per_head) * kVec;
    T* first = x + static_cast<int64_t>(h) * 2 * p.half + i0;
    T* second = first + p.half;
    const Pack<T, kVec> a = *reinterpret_cast<const Pack<T, kVec>*>(first);
    const Pack<T, kVec> b = *reinterpret_cast<const Pack<T, kVec>*>(second);
    Pack<T, kVec> a_out, b_out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float x1 = to_f32(a.v[k]), x2 = to_f32(b.v[k]), c = cos_f[i0 + k], s = sin_f[i0 + k];
      a_out.v[k] = from_f32<T>(x1 * c - x2 * s);
      b_out.v[k] = from_f32<T>(x2 * c + x1 * s);
    }
    *reinterpret_cast<Pack<T, kVec>*>(first) = a_out;
    *reinterpret_cast<Pack<T, kVec>*>(second) = b_out;
  }
  if constexpr (kCache) {
    const int64_t slot = cache.slot_mapping[row];
    if (slot < 0 || slot >= cache.num_slots) return;  // padding rows of a decode bucket write nowhere
    __syncthreads();  // the block's rotated k is in global memory, visible to the whole block
    if constexpr (!std::is_same_v<T, float>) {
      if (cache.fp8) {
        quantise_row<T>(cache, row, slot);
        return;
      }
    }
    if (cache.wide) {
      copy_row<uint4>(cache, row, slot, 16 / sizeof(T));
    } else {
      copy_row<T>(cache, row, slot, 1);
    }
  }
}

template <typename T, bool kCache>
Status launch_typed(const Params& p, const CacheParams& c, cudaStream_t stream) {
  constexpr int kWide = 16 / sizeof(T);
  const auto address = reinterpret_cast<uintptr_t>(p.x);
  const unsigned blocks = static_cast<unsigned>(p.rows);
  if (p.half % kWide == 0 && p.ld % kWide == 0 && address % 16 == 0) {
    launch_pdl(rope_kernel<T, kWide, kCache>, dim3(blocks), dim3(kThreads), 0, stream, p, c);
  } else if (p.half % 2 == 0 && p.ld % 2 == 0 && address % (2 * sizeof(T)) == 0) {
    launch_pdl(rope_kernel<T, 2, kCache>, dim3(blocks), dim3(kThreads), 0, stream, p, c);
  } else {
    launch_pdl(rope_kernel<T, 1, kCache>, dim3(blocks), dim3(kThreads), 0, stream, p, c);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

Status validate_cuda(const RopeArgs& a) {
  RETURN_IF_ERROR(validate_rope(a));
  if (a.head_dim > kHeadDimMax) return invalid_argument("apply_rope_cuda: head_dim must be <= 1024");
  if (a.rows > std::numeric_limits<int32_t>::max()) return invalid_argument("apply_rope_cuda: too many rows");
  if (reinterpret_cast<uintptr_t>(a.x) % dtype_size(a.dtype) != 0 ||
      reinterpret_cast<uintptr_t>(a.positions) % 4 != 0 || reinterpret_cast<uintptr_t>(a.inv_freq) % 4 != 0) {
    return invalid_argument("apply_rope_cuda: a pointer is not aligned to its element size");
  }
  return ok_status();
}

template <bool kCache>
Status launch(const RopeArgs& a, const CacheParams& c, cudaStream_t stream) {
  const Params p{a.x, a.rows, a.ld, a.heads, a.head_dim / 2, a.positions, a.inv_freq};
  switch (a.dtype) {
    case DType::kF32: return launch_typed<float, kCache>(p, c, stream);
    case DType::kF16: return launch_typed<__half, kCache>(p, c, stream);
    default: return launch_typed<__nv_bfloat16, kCache>(p, c, stream);
  }
}

}  // namespace

Status apply_rope_cuda(const RopeArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(validate_cuda(a));
  if (a.rows == 0) return ok_status();
  return launch<false>(a, CacheParams{}, stream);
}

Status apply_rope_and_cache_cuda(const RopeArgs& a, const PagedKvWriteArgs& kv, cudaStream_t stream) {
  RETURN_IF_ERROR(validate_cuda(a));
  RETURN_IF_ERROR(paged_kv_write_validate(kv));
  if (kv.num_tokens != a.rows || kv.dtype != a.dtype) {
    return invalid_argument("apply_rope_and_cache_cuda: the cache write must cover the rotated rows, in their dtype");
  }
  if (a.rows == 0) return ok_status();
  if (kv.width == 0) return launch<false>(a, CacheParams{}, stream);
  const size_t size = dtype_size(a.dtype);
  if (kv.kv_storage != PagedKvStorage::kSame) {  // FP8 pool (f16 / bf16 activations: paged_kv_write_validate)
    CacheParams c{kv.k, kv.v, kv.src_ld, kv.k_cache, kv.v_cache, kv.slot_mapping, kv.width, kv.num_slots, false};
    c.fp8 = true, c.e4m3 = kv.kv_storage == PagedKvStorage::kFp8E4M3, c.k_scale = kv.k_scale, c.v_scale = kv.v_scale;
    return launch<true>(a, c, stream);
  }
  const bool wide = (kv.width * size) % 16 == 0 && (kv.src_ld * size) % 16 == 0 && aligned16(kv.k) &&
                    aligned16(kv.v) && aligned16(kv.k_cache) && aligned16(kv.v_cache);
  const CacheParams c{kv.k, kv.v, kv.src_ld, kv.k_cache, kv.v_cache, kv.slot_mapping, kv.width, kv.num_slots, wide};
  return launch<true>(a, c, stream);
}

}  // namespace mmserve::kernels
