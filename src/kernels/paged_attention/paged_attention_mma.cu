// The tensor-core prefill of paged_attention_cuda (f16/bf16, head_dim 64 or 128, q_len_b > 1): causal
// FlashAttention-2 over pages, after attention_kv_mma.cu (whose header describes the fragment layouts).
//
// grid (ceil(max_query_len / 64), num_seqs, heads), 4 warps; a CTA takes 64 new tokens of one sequence and one
// query head (found through query_start; tiles past the sequence's q_len exit at once), each warp one m-tile of
// 16 rows. Key tiles of 64 are gathered row by row through the block table into padded shared rows (cp.async of
// 16 bytes when aligned) in a ring of 2 or 3 buffers, tile t + 1 in flight while tile t is consumed. Only tiles
// between the first key the CTA's first token sees (sliding window) and the last key its last token sees
// (causality) are loaded; a warp skips the tiles none of its rows sees, and runs the branch-free body on tiles
// all its rows see whole. Keys past the last visible one are zeros in shared memory, never read from the pool.
// FP8 pools: 8 codes (8 bytes) are loaded and converted to T on the way into shared memory (exact: every code is
// an f16 and a bf16 value), so the mma sees T as for a 16-bit pool; K's scale goes into the scores' multiplier and
// V's into the output's. These loads are synchronous (no cp.async from 1-byte rows into 2-byte shared rows): the
// next tile's loads no longer overlap the current tile's math (not tuned yet; the decode kernel is the FP8 pool's
// hot path).
// Tests: paged_attention_cuda_test.cpp; bench: paged_attention_cuda_bench.cpp (prefill of 2,048 tokens).
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_mma_common.cuh"
#include "kernels/common/cuda_align.h"
#include "kernels/paged_attention/paged_attention_cuda_common.cuh"

namespace mmserve::kernels::paged_detail {
namespace {

using attention_kv_detail::kKeyTile;
using attention_kv_detail::kSmemPad;
using attention_kv_detail::mma_smem;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // new tokens per CTA

constexpr int64_t smem_bytes(int kDp, int kStages) {
  return (static_cast<int64_t>(kRows) + kStages * 2 * kKeyTile) * (kDp + kSmemPad) * 2;
}

// 8 elements of T (16 bytes) from global to shared memory.
template <typename T>
__device__ __forceinline__ void copy8(uint16_t* dst, const T* src, bool vec) {
  if (vec) {
    cp_async_16(dst, src);
    return;
  }
  uint16_t w[8];
  memcpy(w, src, 16);  // 2-byte aligned element loads
  uint4 packed;
  memcpy(&packed, w, 16);
  *reinterpret_cast<uint4*>(dst) = packed;
}

// 8 pool elements (KT: T, or FP8 codes) at src to 8 T in shared memory at dst.
template <typename T, typename KT>
__device__ __forceinline__ void copy8_kv(uint16_t* dst, const KT* src, bool vec) {
  if constexpr (KvCodes<KT>::kFp8) {
    uint2 codes;
    if (vec) {
      codes = *reinterpret_cast<const uint2*>(src);
    } else {
      memcpy(&codes, src, 8);
    }
    *reinterpret_cast<uint4*>(dst) = fp8x8_to_16bit<T, KvCodes<KT>::kFormat>(codes);
  } else {
    copy8(dst, src, vec);
  }
}

template <typename T, typename KT, int kDp, int kStages>
__global__ void __launch_bounds__(kThreads, 2) paged_prefill_mma_kernel(const PagedParams p) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kChunks = kDp / 8;
  constexpr int kSteps = kDp / 16;
  constexpr int kDimTiles = kDp / 8;
  constexpr int kStageElems = 2 * kKeyTile * kLd;
  constexpr float kNegInf = -INFINITY;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(mma_smem);  // [kRows][kLd]
  uint16_t* kv_s = q_s + kRows * kLd;                     // [kStages][K, V][kKeyTile][kLd]

  const int tile = blockIdx.x, b = blockIdx.y, h = blockIdx.z;
  const int row0 = p.query_start[b], q_len = p.query_start[b + 1] - row0;
  const int i0 = tile * kRows;
  if (q_len < p.min_q || i0 >= q_len) return;
  const int L = p.seq_lens[b];
  const int rows = min(kRows, q_len - i0);
  // Rows past q_len take the last token's keys (never stored): the ranges stay monotone in the row.
  auto range = [&](int i) { return visible_keys(min(i, q_len - 1), q_len, L, p.window); };
  const int n_cta = range(i0 + rows - 1).hi;  // keys [.., n_cta) are ever read
  const int t_begin = range(i0).lo / kKeyTile, t_end = (n_cta + kKeyTile - 1) / kKeyTile;

  const int32_t* table = p.block_tables + static_cast<int64_t>(b) * p.block_table_ld;
  const int64_t col = static_cast<int64_t>(h / p.group) * kDp;
  const KT* k_g = static_cast<const KT*>(p.k_cache) + col;
  const KT* v_g = static_cast<const KT*>(p.v_cache) + col;
  const bool vec_kv = p.vec_kv != 0;
  auto load_tile = [&](int t) {
    uint16_t* k_s = kv_s + ((t - t_begin) % kStages) * kStageElems;
    uint16_t* v_s = k_s + kKeyTile * kLd;
    const int kb = t * kKeyTile;
#pragma unroll
    for (int idx = threadIdx.x; idx < kKeyTile * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = (idx % kChunks) * 8;
      const int j = kb + r;
      if (j < n_cta) {
        const int64_t at = key_slot(table, j, p.block_size) * p.width + c;
        copy8_kv<T>(k_s + r * kLd + c, k_g + at, vec_kv);
        copy8_kv<T>(v_s + r * kLd + c, v_g + at, vec_kv);
      } else {
        *reinterpret_cast<uint4*>(k_s + r * kLd + c) = make_uint4(0u, 0u, 0u, 0u);
        *reinterpret_cast<uint4*>(v_s + r * kLd + c) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };

  // Commit groups, oldest first: Q, tiles t_begin .. t_begin + kStages - 2, then one per iteration.
  const T* q_g = static_cast<const T*>(p.q) + static_cast<int64_t>(row0 + i0) * p.q_ld + static_cast<int64_t>(h) * kDp;
#pragma unroll
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    if (r < rows) {
      copy8(q_s + r * kLd + c, q_g + r * p.q_ld + c, p.vec_q != 0);
    } else {
      *reinterpret_cast<uint4*>(q_s + r * kLd + c) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  cp_async_commit();
#pragma unroll
  for (int st = 0; st + 1 < kStages; ++st) {
    if (t_begin + st < t_end) load_tile(t_begin + st);
    cp_async_commit();
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int r0 = i0 + warp * 16;  // first new token of this warp
  const bool warp_active = r0 < q_len;
  const KeyRange warp_first = range(r0), warp_last = range(r0 + 15);
  const KeyRange ra = range(r0 + g), rb = range(r0 + g + 8);
  float s_mul_signed = p.scale_log2;
  if constexpr (KvCodes<KT>::kFp8) s_mul_signed *= kv_scale<KT>(p.k_scale);
  const float s_mul = fabsf(s_mul_signed);
  const uint32_t q_sign = s_mul_signed < 0.0f ? 0x80008000u : 0u;  // a negative scale flips q (exact)

  cp_async_wait<kStages - 1>();  // Q has landed
  __syncthreads();
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    ldmatrix_x4(qa[ks], q_s + (warp * 16 + (lane & 15)) * kLd + ks * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int e = 0; e < 4; ++e) qa[ks][e] ^= q_sign;
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_a = kNegInf, m_b = kNegInf, l_a = 0.0f, l_b = 0.0f;  // scaled running max, partial row sums

  auto tile_step = [&](auto masked_tag, const uint16_t* k_s, int kb) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const uint16_t* v_s = k_s + kKeyTile * kLd;
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const uint16_t* k_row = k_s + (nt * 8 + (lane & 7)) * kLd;
#pragma unroll
      for (int ks = 0; ks < kSteps; ks += 2) {
        uint32_t kf[4];
        ldmatrix_x4(kf, k_row + ks * 16 + (lane >> 3) * 8);
        mma_16816<T>(s[nt], qa[ks], kf[0], kf[1]);
        mma_16816<T>(s[nt], qa[ks + 1], kf[2], kf[3]);
      }
    }
    auto seen = [&](const KeyRange& r, int key) { return !kMasked || (key >= r.lo && key < r.hi); };
    float mx_a = kNegInf, mx_b = kNegInf;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kb + nt * 8 + 2 * t4 + e;
        mx_a = fmaxf(mx_a, seen(ra, key) ? s[nt][e] : kNegInf);
        mx_b = fmaxf(mx_b, seen(rb, key) ? s[nt][2 + e] : kNegInf);
      }
    }
    mx_a = quad_max(mx_a);
    mx_b = quad_max(mx_b);
    // A row with nothing visible yet keeps m = -inf and base 0 (no -inf - -inf).
    const float m_new_a = fmaxf(m_a, mx_a == kNegInf ? kNegInf : mx_a * s_mul);
    const float m_new_b = fmaxf(m_b, mx_b == kNegInf ? kNegInf : mx_b * s_mul);
    const float base_a = m_new_a == kNegInf ? 0.0f : m_new_a, base_b = m_new_b == kNegInf ? 0.0f : m_new_b;
    const float alpha_a = exp2_approx(m_a - base_a), alpha_b = exp2_approx(m_b - base_b);
    m_a = m_new_a;
    m_b = m_new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kb + nt * 8 + 2 * t4 + e;
        float pa = exp2_approx(fmaf(s[nt][e], s_mul, -base_a));
        float pb = exp2_approx(fmaf(s[nt][2 + e], s_mul, -base_b));
        if constexpr (kMasked) {
          pa = seen(ra, key) ? pa : 0.0f;
          pb = seen(rb, key) ? pb : 0.0f;
        }
        s[nt][e] = pa;
        s[nt][2 + e] = pb;
        sum_a += pa;
        sum_b += pb;
      }
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      o[dt][0] *= alpha_a;
      o[dt][1] *= alpha_a;
      o[dt][2] *= alpha_b;
      o[dt][3] *= alpha_b;
    }
    // O += P V, 16 keys (one A fragment, rounded to T from the accumulators) at a time.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      uint32_t pa[4];
      pa[0] = pack2<T>(s[2 * kc][0], s[2 * kc][1]);
      pa[1] = pack2<T>(s[2 * kc][2], s[2 * kc][3]);
      pa[2] = pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pa[3] = pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
      const int v_key = kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint16_t* v_row = v_s + v_key * kLd + (lane >> 4) * 8;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; dt += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_row + dt * 8);
        mma_16816<T>(o[dt], pa, vb[0], vb[1]);
        mma_16816<T>(o[dt + 1], pa, vb[2], vb[3]);
      }
    }
  };

  for (int t = t_begin; t < t_end; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t is in shared memory for everyone, and everyone has left tile t - 1
    if (t + kStages - 1 < t_end) load_tile(t + kStages - 1);
    cp_async_commit();
    const int kb = t * kKeyTile;
    if (warp_active && kb < warp_last.hi && kb + kKeyTile > warp_first.lo) {
      const uint16_t* k_s = kv_s + ((t - t_begin) % kStages) * kStageElems;
      if (kb >= warp_last.lo && kb + kKeyTile <= warp_first.hi) {
        tile_step(std::false_type{}, k_s, kb);
      } else {
        tile_step(std::true_type{}, k_s, kb);
      }
    }
  }
  cp_async_wait<0>();
  if (!warp_active) return;

  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(row0) * p.out_ld + static_cast<int64_t>(h) * kDp;
  const float la = quad_sum(l_a), lb = quad_sum(l_b);
  float mul_a = la > 0.0f ? 1.0f / la : 0.0f, mul_b = lb > 0.0f ? 1.0f / lb : 0.0f;
  if constexpr (KvCodes<KT>::kFp8) {
    const float v_mul = kv_scale<KT>(p.v_scale);
    mul_a *= v_mul;
    mul_b *= v_mul;
  }
  const int row_a = r0 + g, row_b = row_a + 8;
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) {
    const int c = dt * 8 + 2 * t4;
    if (p.vec_out != 0) {
      if (row_a < q_len) *reinterpret_cast<uint32_t*>(out + row_a * p.out_ld + c) = pack2<T>(o[dt][0] * mul_a, o[dt][1] * mul_a);
      if (row_b < q_len) *reinterpret_cast<uint32_t*>(out + row_b * p.out_ld + c) = pack2<T>(o[dt][2] * mul_b, o[dt][3] * mul_b);
      continue;
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (row_a < q_len) out[row_a * p.out_ld + c + e] = from_f32<T>(o[dt][e] * mul_a);
      if (row_b < q_len) out[row_b * p.out_ld + c + e] = from_f32<T>(o[dt][2 + e] * mul_b);
    }
  }
}

template <typename T, typename KT, int kDp, int kStages>
Status launch(const PagedAttentionArgs& a, PagedParams p, cudaStream_t stream) {
  p.vec_q = aligned16(a.q) && a.q_ld % 8 == 0;
  p.vec_kv = aligned16(a.k_cache) && aligned16(a.v_cache);  // head_dim and width are multiples of 8
  p.vec_out = reinterpret_cast<uintptr_t>(a.out) % 4 == 0 && a.out_ld % 2 == 0;
  constexpr int64_t smem = smem_bytes(kDp, kStages);
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(paged_prefill_mma_kernel<T, KT, kDp, kStages>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.max_query_len + kRows - 1) / kRows), static_cast<unsigned>(a.num_seqs),
                  static_cast<unsigned>(a.heads));
  paged_prefill_mma_kernel<T, KT, kDp, kStages><<<grid, kThreads, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T, typename KT>
Status launch_for_head_dim(const PagedAttentionArgs& a, const PagedParams& p, cudaStream_t stream) {
  // Two stages at 128 keep two CTAs' shared memory in one SM (2 x 87 KB).
  return a.head_dim == 64 ? launch<T, KT, 64, 3>(a, p, stream) : launch<T, KT, 128, 2>(a, p, stream);
}

template <typename T>
Status launch_for_storage(const PagedAttentionArgs& a, const PagedParams& p, cudaStream_t stream) {
  switch (a.kv_storage) {
    case PagedKvStorage::kFp8E4M3: return launch_for_head_dim<T, __nv_fp8_e4m3>(a, p, stream);
    case PagedKvStorage::kFp8E5M2: return launch_for_head_dim<T, __nv_fp8_e5m2>(a, p, stream);
    default: return launch_for_head_dim<T, T>(a, p, stream);
  }
}

}  // namespace

bool paged_prefill_mma_takes(const PagedAttentionArgs& a) {
  return (a.dtype == DType::kF16 || a.dtype == DType::kBF16) && (a.head_dim == 64 || a.head_dim == 128);
}

Status launch_paged_prefill_mma(const PagedAttentionArgs& a, const PagedParams& p, cudaStream_t stream) {
  return a.dtype == DType::kF16 ? launch_for_storage<__half>(a, p, stream)
                                : launch_for_storage<__nv_bfloat16>(a, p, stream);
}

}  // namespace mmserve::kernels::paged_detail
