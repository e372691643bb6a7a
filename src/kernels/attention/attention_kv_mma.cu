// The tensor-core paths of attention_kv_cuda (f16/bf16 q and out, q_len > 1, head_dim <= 128, any K/V
// storage): FlashAttention-2 with K/V streamed through shared memory, so any kv_len works (Whisper's
// encoder: 1500 x 1500 at head_dim 64; cross-attention: q_len up to 448 against 1500 keys). Two kernels
// share the tiling, the K/V ring and the online softmax:
//
// - attention_kv_mma_kernel (mma.sync m16n8k16, any head_dim <= 128, any storage): one CTA of 4 warps per
//   (batch row, head, tile of 64 or 128 query rows); each warp owns one m-tile of 16 rows, or two for long
//   queries (each K/V fragment then feeds two mma, and two dependency chains interleave). Q fragments stay
//   in registers, K fragments come by ldmatrix, V fragments by ldmatrix.trans; shared rows are padded by 8
//   elements, so every ldmatrix phase hits 32 distinct banks. Compressed K/V (FP8 E4M3, INT8) are converted
//   to T on the way into shared memory: their values are exact in f16 and bf16, so they cost no extra
//   rounding, their scales being applied to the scores and the output instead.
// - attention_kv_wgmma_kernel (Hopper wgmma m64n64k16; head_dim 64, K/V of the activation dtype, aligned
//   rows, positive scale, q_len >= 256): warpgroups of 64 query rows, S = Q K^T with both operands read
//   from 128-byte-swizzled shared memory, O += P V with P from registers and V read transposed.
//
// Both: K and V come in tiles of 64 keys through a ring of shared buffers (cp.async 16 bytes at a time when
// aligned), tile t + 1 (and t + 2 with three buffers) in flight while tile t is consumed, one barrier per
// tile. The online softmax runs in the log2 domain with the scale folded into one FFMA per score, and P is
// rounded to T straight from the accumulator layout into A fragments (no shared-memory round trip). A tile
// that every row of a warp (warpgroup) sees whole runs a body without a branch or a mask; the mask (the
// last partial tile, kv_lengths, the causal diagonal) is a second instantiation of the same body. Keys past
// the CTA's last visible key are never read from global memory (zeros in shared memory instead), so
// padding may hold NaN.
// Files: this one (the mma.sync kernel and the dispatch), attention_kv_wgmma.cu (the wgmma kernel),
// attention_kv_mma_common.cuh (what both use).
// Tests: attention_kv_cuda_test.cpp; bench: attention_kv_cuda_bench.cpp (Whisper large-v3 encoder).
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_mma_common.cuh"

namespace mmserve::kernels::attention_kv_detail {
namespace {

// A CTA shape: kWarps warps, each owning kMTiles m-tiles of 16 query rows, K/V tiles in a ring of kStages
// shared buffers (tile t + kStages - 1 is in flight while tile t is consumed).
template <int kWarps_, int kMTiles_, int kStages_>
struct MmaShape {
  static constexpr int kWarps = kWarps_;
  static constexpr int kMTiles = kMTiles_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kCtaRows = kWarps * kMTiles * kRowsPerWarp;
  // Two CTAs per SM up to 8 m-tiles per CTA (the other CTA's warps compute while one waits at its
  // barrier; 4 warps x 2 m-tiles take up to 255 registers a thread, 8 x 1 are held to 128), one beyond.
  static constexpr int kMinCtas = kWarps * kMTiles <= 8 ? 2 : 1;
  static constexpr int64_t smem_bytes(int kDp) {
    return (static_cast<int64_t>(kCtaRows) + kStages * 2 * kKeyTile) * (kDp + kSmemPad) * 2;
  }
};

// grid = (q tiles, heads, batch), block = Shape::kThreads; dynamic shared memory = Shape::smem_bytes(kDp).
// Every K and V fragment read from shared memory feeds kMTiles mma. One barrier per key tile: the buffer
// refilled at tile t is the one of tile t - 1, which every warp has left once it passed the barrier.
template <typename T, typename KT, int kDp, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kMinCtas) attention_kv_mma_kernel(const MmaParams p) {
  constexpr int kMTiles = Shape::kMTiles;
  constexpr int kStages = Shape::kStages;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kSteps = kDp / 16;
  constexpr int kDimTiles = kDp / 8;
  constexpr int kWarpRows = kMTiles * kRowsPerWarp;
  constexpr int kCtaRows = Shape::kCtaRows;
  constexpr int kStageElems = 2 * kKeyTile * kLd;
  constexpr float kNegInf = -INFINITY;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(mma_smem);  // [kCtaRows][kLd]
  uint16_t* kv_s = q_s + kCtaRows * kLd;                  // [kStages][K, V][kKeyTile][kLd]

  const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int L = kv_length(p.kv_lengths, b, p.kv_len);
  const bool causal = p.causal != 0;
  const int i0 = tile * kCtaRows;
  const int rows = min(kCtaRows, p.q_len - i0);
  const int n_cta = row_visible(i0 + rows - 1, p.q_len, L, causal);  // keys [0, n_cta) are ever read
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const bool compressed = p.k_scale != nullptr && n_cta > 0;
  // Scores go to the log2 domain with one FFMA per element: p = 2^(s * s_mul - m). The running max m is
  // kept scaled, which needs s_mul >= 0 (a max of s is then a max of s * s_mul); a negative multiplier
  // (a negative softmax scale or K scale) flips the sign of q instead, which is exact.
  const float s_mul_signed = p.scale_log2 * (compressed ? p.k_scale[bh] : 1.0f);
  const float s_mul = fabsf(s_mul_signed);
  const uint32_t q_sign = s_mul_signed < 0.0f ? 0x80008000u : 0u;
  const float v_mul = compressed ? p.v_scale[bh] : 1.0f;

  const T* q_g = static_cast<const T*>(p.q) + (static_cast<int64_t>(b) * p.q_len + i0) * p.q_ld +
                 static_cast<int64_t>(h) * p.head_dim;
  const int64_t kv_base = static_cast<int64_t>(b) * p.kv_batch_stride * p.kv_ld + static_cast<int64_t>(h) * p.head_dim;
  const KT* k_g = static_cast<const KT*>(p.k) + kv_base;
  const KT* v_g = static_cast<const KT*>(p.v) + kv_base;
  const bool vec_kv = p.vec_kv != 0;
  const int n_tiles = (n_cta + kKeyTile - 1) / kKeyTile;
  auto load_tile = [&](int t) {
    uint16_t* k_s = kv_s + (t % kStages) * kStageElems;
    uint16_t* v_s = k_s + kKeyTile * kLd;
    const int kb = t * kKeyTile;
    const int valid = min(kKeyTile, n_cta - kb);
    load_rows<T, KT, kDp, kKeyTile, kThreads>(k_s, k_g + kb * p.kv_ld, p.kv_ld, valid, p.head_dim, vec_kv);
    load_rows<T, KT, kDp, kKeyTile, kThreads>(v_s, v_g + kb * p.kv_ld, p.kv_ld, valid, p.head_dim, vec_kv);
  };

  // Commit groups, oldest first: Q, then tiles 0 .. kStages - 2, then one per loop iteration (empty past
  // the last tile), so tile t is complete once at most kStages - 2 groups are pending at its iteration.
  load_rows<T, T, kDp, kCtaRows, kThreads>(q_s, q_g, p.q_ld, rows, p.head_dim, p.vec_q != 0);
  cp_async_commit();
#pragma unroll
  for (int st = 0; st + 1 < kStages; ++st) {
    if (st < n_tiles) load_tile(st);
    cp_async_commit();
  }

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int r0 = i0 + warp * kWarpRows;  // first query row of this warp
  const bool warp_active = r0 < p.q_len;
  // Rows past q_len are zero queries that see every key (harmless, never stored): the visible counts then
  // grow with the row, so the warp's first row has the fewest and its last the most.
  auto visible = [&](int i) { return i < p.q_len ? row_visible(i, p.q_len, L, causal) : L; };
  const int n_first = visible(r0);
  const int n_warp = warp_active ? visible(min(r0 + kWarpRows - 1, p.q_len - 1)) : 0;
  int n_a[kMTiles], n_b[kMTiles];  // visible keys of rows g and g + 8 of each m-tile
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    n_a[mt] = visible(r0 + mt * 16 + g);
    n_b[mt] = visible(r0 + mt * 16 + g + 8);
  }

  cp_async_wait<kStages - 1>();  // Q has landed
  __syncthreads();
  // Q fragments stay in registers for the whole key loop (matrices: rows 0-7 / 8-15 x columns 0-7 / 8-15).
  uint32_t qa[kMTiles][kSteps][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      ldmatrix_x4(qa[mt][ks], q_s + (warp * kWarpRows + mt * 16 + (lane & 15)) * kLd + ks * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int e = 0; e < 4; ++e) qa[mt][ks][e] ^= q_sign;
    }
  }

  float o[kMTiles][kDimTiles][4];
  float m_a[kMTiles], m_b[kMTiles], l_a[kMTiles], l_b[kMTiles];  // scaled running max, partial row sums
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
    m_a[mt] = m_b[mt] = kNegInf;
    l_a[mt] = l_b[mt] = 0.0f;
  }

  // One key tile for this warp. kMasked: some key of the tile is hidden from some row of the warp (the
  // last partial tile, kv_lengths, the causal diagonal); the unmasked body has no branch at all, so the
  // compiler interleaves its 2 x 8 x kSteps independent mma chains freely.
  auto tile_step = [&](auto masked_tag, const uint16_t* k_s, int kb) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const uint16_t* v_s = k_s + kKeyTile * kLd;
    // S = Q K^T: s[mt][nt] holds keys kb + 8 nt + 2 t4 (+1) of rows g (s[..][0..1]) and g + 8 (s[..][2..3]).
    float s[kMTiles][8][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const uint16_t* k_row = k_s + (nt * 8 + (lane & 7)) * kLd;
#pragma unroll
      for (int ks = 0; ks + 1 < kSteps; ks += 2) {
        uint32_t kf[4];
        ldmatrix_x4(kf, k_row + ks * 16 + (lane >> 3) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<T>(s[mt][nt], qa[mt][ks], kf[0], kf[1]);
          mma_16816<T>(s[mt][nt], qa[mt][ks + 1], kf[2], kf[3]);
        }
      }
      if constexpr (kSteps % 2 == 1) {
        uint32_t kf[2];
        ldmatrix_x2(kf, k_row + (kSteps - 1) * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_16816<T>(s[mt][nt], qa[mt][kSteps - 1], kf[0], kf[1]);
      }
    }
    // Online softmax per m-tile. Hidden scores never enter the max and give p = 0 exactly (no -inf
    // arithmetic, so a zero multiplier cannot make NaN); a row with nothing visible yet keeps m = -inf.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      float mx_a = kNegInf, mx_b = kNegInf;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kb + nt * 8 + 2 * t4 + e;
          const bool va = !kMasked || key < n_a[mt], vb = !kMasked || key < n_b[mt];
          mx_a = fmaxf(mx_a, va ? s[mt][nt][e] : kNegInf);
          mx_b = fmaxf(mx_b, vb ? s[mt][nt][2 + e] : kNegInf);
        }
      }
      mx_a = quad_max(mx_a);
      mx_b = quad_max(mx_b);
      float base_a, base_b;
      if constexpr (kMasked) {
        const float m_new_a = fmaxf(m_a[mt], mx_a == kNegInf ? kNegInf : mx_a * s_mul);
        const float m_new_b = fmaxf(m_b[mt], mx_b == kNegInf ? kNegInf : mx_b * s_mul);
        base_a = m_new_a == kNegInf ? 0.0f : m_new_a;
        base_b = m_new_b == kNegInf ? 0.0f : m_new_b;
      } else {
        base_a = fmaxf(m_a[mt], mx_a * s_mul);
        base_b = fmaxf(m_b[mt], mx_b * s_mul);
      }
      const float alpha_a = exp2_approx(m_a[mt] - base_a), alpha_b = exp2_approx(m_b[mt] - base_b);
      if constexpr (kMasked) {
        m_a[mt] = fmaxf(m_a[mt], mx_a == kNegInf ? kNegInf : mx_a * s_mul);
        m_b[mt] = fmaxf(m_b[mt], mx_b == kNegInf ? kNegInf : mx_b * s_mul);
      } else {
        m_a[mt] = base_a;
        m_b[mt] = base_b;
      }
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float pa = exp2_approx(fmaf(s[mt][nt][e], s_mul, -base_a));
          float pb = exp2_approx(fmaf(s[mt][nt][2 + e], s_mul, -base_b));
          if constexpr (kMasked) {
            const int key = kb + nt * 8 + 2 * t4 + e;
            pa = key < n_a[mt] ? pa : 0.0f;
            pb = key < n_b[mt] ? pb : 0.0f;
          }
          s[mt][nt][e] = pa;
          s[mt][nt][2 + e] = pb;
          sum_a += pa;
          sum_b += pb;
        }
      }
      l_a[mt] = l_a[mt] * alpha_a + sum_a;
      l_b[mt] = l_b[mt] * alpha_b + sum_b;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) {
        o[mt][dt][0] *= alpha_a;
        o[mt][dt][1] *= alpha_a;
        o[mt][dt][2] *= alpha_b;
        o[mt][dt][3] *= alpha_b;
      }
    }
    // O += P V, one 16-key chunk (n-tiles 2kc, 2kc + 1 of S = one A fragment, rounded to T straight from
    // the accumulators) at a time; each V fragment pair serves every m-tile.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack2<T>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
        pa[mt][1] = pack2<T>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
        pa[mt][2] = pack2<T>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
        pa[mt][3] = pack2<T>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
      }
      const int v_key = kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint16_t* v_row = v_s + v_key * kLd + (lane >> 4) * 8;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; dt += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_row + dt * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<T>(o[mt][dt], pa[mt], vb[0], vb[1]);
          mma_16816<T>(o[mt][dt + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
  };

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t is in shared memory for everyone, and everyone has left tile t - 1
    if (t + kStages - 1 < n_tiles) load_tile(t + kStages - 1);
    cp_async_commit();
    const int kb = t * kKeyTile;
    if (warp_active && kb < n_warp) {
      const uint16_t* k_s = kv_s + (t % kStages) * kStageElems;
      if (kb + kKeyTile <= n_first) {
        tile_step(std::false_type{}, k_s, kb);
      } else {
        tile_step(std::true_type{}, k_s, kb);
      }
    }
  }
  cp_async_wait<0>();
  if (!warp_active) return;

  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(b) * p.q_len * p.out_ld + static_cast<int64_t>(h) * p.head_dim;
  const bool vec_out = p.vec_out != 0;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const float la = quad_sum(l_a[mt]), lb = quad_sum(l_b[mt]);
    const float mul_a = la > 0.0f ? v_mul / la : 0.0f;
    const float mul_b = lb > 0.0f ? v_mul / lb : 0.0f;
    const int row_a = r0 + mt * 16 + g, row_b = row_a + 8;
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      const int col = dt * 8 + 2 * t4;
      if (col >= p.head_dim) continue;
      if (vec_out) {  // both columns exist and the pair is 4-byte aligned
        if (row_a < p.q_len) {
          *reinterpret_cast<uint32_t*>(out + row_a * p.out_ld + col) =
              pack2<T>(o[mt][dt][0] * mul_a, o[mt][dt][1] * mul_a);
        }
        if (row_b < p.q_len) {
          *reinterpret_cast<uint32_t*>(out + row_b * p.out_ld + col) =
              pack2<T>(o[mt][dt][2] * mul_b, o[mt][dt][3] * mul_b);
        }
        continue;
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (col + e >= p.head_dim) continue;
        if (row_a < p.q_len) out[row_a * p.out_ld + col + e] = from_f32<T>(o[mt][dt][e] * mul_a);
        if (row_b < p.q_len) out[row_b * p.out_ld + col + e] = from_f32<T>(o[mt][dt][2 + e] * mul_b);
      }
    }
  }
}

template <typename T, typename KT, int kDp, typename Shape>
Status launch(const AttentionKvArgs& a, cudaStream_t stream) {
  MmaParams p = mma_params(a);
  p.k_scale = a.storage == KvStorage::kSame ? nullptr : a.k_scale;
  p.v_scale = a.storage == KvStorage::kSame ? nullptr : a.v_scale;
  // 16-byte accesses need every row and head start 16-byte aligned: aligned base, ld and head_dim
  // multiples of 8 elements; 4-byte output pairs need the same at 2 elements.
  p.vec_q = aligned16(a.q) && a.q_ld % 8 == 0 && a.head_dim % 8 == 0;
  p.vec_kv = sizeof(KT) == 2 && aligned16(a.k) && aligned16(a.v) && a.kv_ld % 8 == 0 && a.head_dim % 8 == 0;
  p.vec_out = reinterpret_cast<uintptr_t>(a.out) % 4 == 0 && a.out_ld % 2 == 0 && a.head_dim % 2 == 0;
  constexpr int64_t smem = Shape::smem_bytes(kDp);
  if constexpr (smem > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_kv_mma_kernel<T, KT, kDp, Shape>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const dim3 grid(static_cast<unsigned>((a.q_len + Shape::kCtaRows - 1) / Shape::kCtaRows),
                  static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  attention_kv_mma_kernel<T, KT, kDp, Shape><<<grid, Shape::kThreads, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

// Long queries (the encoder's 1500): 128 query rows per CTA, two m-tiles per warp at head_dim <= 64, where
// the extra registers fit; shorter ones (a 448-token prompt): 64 rows per CTA, for enough CTAs.
using LongShape = MmaShape<4, 2, 3>;
using ShortShape = MmaShape<4, 1, 3>;
using WideShape = MmaShape<4, 1, 2>;  // head_dim > 64: two stages keep two CTAs' shared memory in one SM

template <typename T, typename KT>
Status launch_for_head_dim(const AttentionKvArgs& a, cudaStream_t stream) {
  const bool long_q = a.q_len >= kLongQueries;
  if (a.head_dim <= 16)
    return long_q ? launch<T, KT, 16, LongShape>(a, stream) : launch<T, KT, 16, ShortShape>(a, stream);
  if (a.head_dim <= 32)
    return long_q ? launch<T, KT, 32, LongShape>(a, stream) : launch<T, KT, 32, ShortShape>(a, stream);
  if (a.head_dim <= 64)
    return long_q ? launch<T, KT, 64, LongShape>(a, stream) : launch<T, KT, 64, ShortShape>(a, stream);
  return launch<T, KT, 128, WideShape>(a, stream);
}

template <typename T>
Status launch_for_storage(const AttentionKvArgs& a, cudaStream_t stream) {
  switch (a.storage) {
    case KvStorage::kFp8E4M3: return launch_for_head_dim<T, __nv_fp8_e4m3>(a, stream);
    case KvStorage::kInt8: return launch_for_head_dim<T, int8_t>(a, stream);
    default: return launch_for_head_dim<T, T>(a, stream);
  }
}

}  // namespace

Status launch_attention_kv_mma(const AttentionKvArgs& a, cudaStream_t stream) {
  if (a.head_dim > kMmaHeadDimMax) return unimplemented("attention_kv_mma: head_dim > 128");
  if (attention_kv_wgmma_takes(a)) return launch_attention_kv_wgmma(a, stream);
  if (a.dtype == DType::kF16) return launch_for_storage<__half>(a, stream);
  if (a.dtype == DType::kBF16) return launch_for_storage<__nv_bfloat16>(a, stream);
  return unimplemented("attention_kv_mma: f16/bf16 only");
}

}  // namespace mmserve::kernels::attention_kv_detail
