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
// Tests: attention_kv_cuda_test.cpp; bench: attention_kv_cuda_bench.cpp (Whisper large-v3 encoder).
#include <string>
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_cuda_common.cuh"

namespace mmserve::kernels::attention_kv_detail {
namespace {

constexpr int kRowsPerWarp = 16;  // rows of one m-tile; a warp owns one or two
// From this many query rows on, a warp takes two m-tiles (the encoder's 1500; a 448-token prompt keeps
// one, for enough CTAs).
constexpr int64_t kLongQueries = 512;
constexpr int kSmemPad = 8;  // elements after each shared row: fragment reads hit 32 distinct banks

extern __shared__ __align__(16) unsigned char mma_smem[];

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T, `lo` in the low 16 bits.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

// One value (an exact one: a stored K/V element) as the 16 bits of T.
template <typename T>
__device__ __forceinline__ uint16_t bits_of(float x) {
  const T v = from_f32<T>(x);
  uint16_t u;
  memcpy(&u, &v, 2);
  return u;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row))
               : "memory");
}

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void cp_async_16(void* dst_shared, const void* src_global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst_shared)), "l"(src_global)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

struct MmaParams {
  const void* q;
  int64_t q_ld;
  const void* k;
  const void* v;
  int64_t kv_ld, kv_batch_stride;
  void* out;
  int64_t out_ld;
  const float* k_scale;
  const float* v_scale;
  const int32_t* kv_lengths;
  int q_len, kv_len, heads, head_dim;
  float scale_log2;
  int causal, vec_q, vec_kv, vec_out;
};

// Rows [0, rows_valid) x columns [0, head_dim) of a strided global matrix of KT into shared rows of
// kDp + kSmemPad elements of T; rows up to kRows and columns up to kDp become zeros. `vec`: 16-byte
// cp.async (KT == T only; needs 16-byte aligned rows and head_dim % 8 == 0). All kThreads threads of the
// CTA call it; the caller commits, waits and synchronises.
template <typename T, typename KT, int kDp, int kRows, int kThreads>
__device__ __forceinline__ void load_rows(uint16_t* dst, const KT* src, int64_t ld, int rows_valid, int head_dim,
                                          bool vec) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kChunks = kDp / 8;
#pragma unroll
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = (idx % kChunks) * 8;
    uint16_t* d = dst + r * kLd + c;
    if (r < rows_valid && c < head_dim) {
      const KT* s = src + r * ld + c;
      if constexpr (sizeof(KT) == 2) {
        if (vec) {
          cp_async_16(d, s);
          continue;
        }
      }
      uint16_t w[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) w[e] = c + e < head_dim ? bits_of<T>(kv_to_f32(s[e])) : uint16_t{0};
      uint4 packed;
      memcpy(&packed, w, 16);
      *reinterpret_cast<uint4*>(d) = packed;
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

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
  MmaParams p{};
  p.q = a.q;
  p.q_ld = a.q_ld;
  p.k = a.k;
  p.v = a.v;
  p.kv_ld = a.kv_ld;
  p.kv_batch_stride = a.kv_batch_stride;
  p.out = a.out;
  p.out_ld = a.out_ld;
  p.k_scale = a.storage == KvStorage::kSame ? nullptr : a.k_scale;
  p.v_scale = a.storage == KvStorage::kSame ? nullptr : a.v_scale;
  p.kv_lengths = a.kv_lengths;
  p.q_len = static_cast<int>(a.q_len);
  p.kv_len = static_cast<int>(a.kv_len);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.scale_log2 = a.scale * kLog2e;
  p.causal = a.causal ? 1 : 0;
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

// ---- Hopper path: warpgroup MMA (wgmma) for head_dim 64 with f16/bf16 K/V (the encoder) ----
// Each warpgroup (4 warps) owns 64 query rows. S = Q K^T is one wgmma m64n64k16 chain over head_dim with
// both operands in shared memory; the online softmax runs on the accumulators, whose per-thread layout is
// mma.sync's C layout (warp w of the group holds rows 16w + g and 16w + g + 8, columns 8j + 2 t4 (+1));
// O += P V takes P from registers (mma.sync's A layout, rounded to T) and V from shared memory, read
// N-major (transposed) by the hardware. Q, K and V rows are 128 bytes (64 elements) stored in the 128-byte
// swizzle the descriptors name: 16-byte chunk c of row r at chunk c ^ (r % 8), 8-row atoms 1024 bytes apart.
constexpr int kSwRow = 128;                 // bytes of one 64-element row
constexpr int kSwTile = kKeyTile * kSwRow;  // bytes of one K or V tile
// From this many query rows on (the encoder's 1500, a 448-token prompt) the wgmma kernel's 128-row CTAs
// are faster than the mma.sync kernel's (measured on an H200: 263 vs 223 TFLOP/s at 16 x 1500 x 1500, 86
// vs 75 at 448 x 1500); shorter queries keep the mma.sync kernel's 64-row CTAs.
constexpr int64_t kWgmmaMinQueries = 256;

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading byte offset (unused by the
// swizzled K-major layouts and by an N-major B of 64 columns: one atom), stride byte offset (8-row atoms).
__device__ __forceinline__ uint64_t sw128_desc(const void* p) {
  const uint64_t addr = shared_address(p);
  return ((addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator reads or writes across a wgmma issue or wait.
__device__ __forceinline__ void fence_regs(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// cp.async and plain stores are generic-proxy writes; wgmma reads shared memory through the async proxy.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#define MMSERVE_WGMMA_D                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MMSERVE_WGMMA_D_OPERANDS(d)                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (+)= A B, m64n64k16, A and B (K-major) in shared memory; accumulate = 0 overwrites d.
template <typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " MMSERVE_WGMMA_D ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : MMSERVE_WGMMA_D_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MMSERVE_WGMMA_D ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : MMSERVE_WGMMA_D_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
  }
}

// d += A B, m64n64k16, A from registers (mma.sync's A fragment per warp), B N-major in shared memory.
template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " MMSERVE_WGMMA_D
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : MMSERVE_WGMMA_D_OPERANDS(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  } else {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MMSERVE_WGMMA_D
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : MMSERVE_WGMMA_D_OPERANDS(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  }
}
#undef MMSERVE_WGMMA_D
#undef MMSERVE_WGMMA_D_OPERANDS

// Rows [0, rows_valid) of a strided global matrix of 64-element rows (16-byte aligned) into the swizzled
// layout; rows up to kRows become zeros. The caller commits, waits, fences and synchronises.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_rows_sw128(unsigned char* dst, const uint16_t* src, int64_t ld, int rows_valid) {
#pragma unroll
  for (int idx = threadIdx.x; idx < kRows * 8; idx += kThreads) {
    const int r = idx / 8, c = idx % 8;
    unsigned char* d = dst + r * kSwRow + ((c ^ (r & 7)) << 4);
    if (r < rows_valid) {
      cp_async_16(d, src + r * ld + c * 8);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

template <int kGroups_, int kStages_>
struct WgmmaShape {
  static constexpr int kGroups = kGroups_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kGroups * 128;
  static constexpr int kCtaRows = kGroups * 64;
  static constexpr int kMinCtas = kGroups <= 2 ? 2 : 1;  // two CTAs of two groups: <= 128 registers a thread
  // + 1024: the dynamic shared memory base is rounded up to the swizzle atom.
  static constexpr int64_t smem_bytes() {
    return 1024 + static_cast<int64_t>(kCtaRows) * kSwRow + kStages * 2 * kSwTile;
  }
};

// grid = (q tiles, heads, batch), block = Shape::kThreads. T = f16/bf16 for q, K, V and out; head_dim 64;
// 16-byte aligned rows; scale > 0 (the launcher checks all of that).
template <typename T, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kMinCtas) attention_kv_wgmma_kernel(const MmaParams p) {
  constexpr int kStages = Shape::kStages;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kCtaRows = Shape::kCtaRows;
  constexpr float kNegInf = -INFINITY;
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(mma_smem) + 1023) & ~uintptr_t{1023});
  unsigned char* q_s = smem;                      // [kCtaRows][128 B]
  unsigned char* kv_s = q_s + kCtaRows * kSwRow;  // [kStages][K, V][kKeyTile][128 B]

  const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int L = kv_length(p.kv_lengths, b, p.kv_len);
  const bool causal = p.causal != 0;
  const int i0 = tile * kCtaRows;
  const int rows = min(kCtaRows, p.q_len - i0);
  const int n_cta = row_visible(i0 + rows - 1, p.q_len, L, causal);
  const float s_mul = p.scale_log2;

  const uint16_t* q_g = static_cast<const uint16_t*>(p.q) + (static_cast<int64_t>(b) * p.q_len + i0) * p.q_ld +
                        static_cast<int64_t>(h) * 64;
  const int64_t kv_base = static_cast<int64_t>(b) * p.kv_batch_stride * p.kv_ld + static_cast<int64_t>(h) * 64;
  const uint16_t* k_g = static_cast<const uint16_t*>(p.k) + kv_base;
  const uint16_t* v_g = static_cast<const uint16_t*>(p.v) + kv_base;
  const int n_tiles = (n_cta + kKeyTile - 1) / kKeyTile;
  auto load_tile = [&](int t) {
    unsigned char* k_s = kv_s + (t % kStages) * 2 * kSwTile;
    const int kb = t * kKeyTile;
    const int valid = min(kKeyTile, n_cta - kb);
    load_rows_sw128<kKeyTile, kThreads>(k_s, k_g + kb * p.kv_ld, p.kv_ld, valid);
    load_rows_sw128<kKeyTile, kThreads>(k_s + kSwTile, v_g + kb * p.kv_ld, p.kv_ld, valid);
  };

  // The same commit-group ring as the mma.sync kernel: Q, tiles 0 .. kStages - 2, one group per iteration.
  load_rows_sw128<kCtaRows, kThreads>(q_s, q_g, p.q_ld, rows);
  cp_async_commit();
#pragma unroll
  for (int st = 0; st + 1 < kStages; ++st) {
    if (st < n_tiles) load_tile(st);
    cp_async_commit();
  }

  const int group = threadIdx.x / 128;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int group_r0 = i0 + group * 64;
  const bool group_active = group_r0 < p.q_len;
  const int r0 = group_r0 + warp * 16;  // this warp's 16 rows
  auto visible = [&](int i) { return i < p.q_len ? row_visible(i, p.q_len, L, causal) : L; };
  // wgmma is collective over the warpgroup, so skipping and masking are decided per group.
  const int n_first = visible(group_r0);
  const int n_group = group_active ? visible(min(group_r0 + 63, p.q_len - 1)) : 0;
  const int n_a = visible(r0 + g), n_b = visible(r0 + g + 8);
  const uint64_t q_desc = sw128_desc(q_s + group * 64 * kSwRow);

  float o[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.0f;
  float m_a = kNegInf, m_b = kNegInf, l_a = 0.0f, l_b = 0.0f;

  auto tile_step = [&](auto masked_tag, const unsigned char* k_s, int kb) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const unsigned char* v_s = k_s + kSwTile;
    float s[32];
    // S = Q K^T over head_dim in 4 k-steps of 16 (32 bytes further into each swizzled row).
    wgmma_fence();
    const uint64_t k_desc = sw128_desc(k_s);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_ss<T>(s, q_desc + 2 * ks, k_desc + 2 * ks, ks);
    wgmma_commit();
    wgmma_wait_all();
    fence_regs(s);
    // Online softmax: s[4 nt + e] is key kb + 8 nt + 2 t4 + (e & 1) of row g (e < 2) or g + 8.
    float mx_a = kNegInf, mx_b = kNegInf;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kb + nt * 8 + 2 * t4 + e;
        const bool va = !kMasked || key < n_a, vb = !kMasked || key < n_b;
        mx_a = fmaxf(mx_a, va ? s[4 * nt + e] : kNegInf);
        mx_b = fmaxf(mx_b, vb ? s[4 * nt + 2 + e] : kNegInf);
      }
    }
    mx_a = quad_max(mx_a);
    mx_b = quad_max(mx_b);
    float base_a, base_b;
    if constexpr (kMasked) {
      const float m_new_a = fmaxf(m_a, mx_a == kNegInf ? kNegInf : mx_a * s_mul);
      const float m_new_b = fmaxf(m_b, mx_b == kNegInf ? kNegInf : mx_b * s_mul);
      base_a = m_new_a == kNegInf ? 0.0f : m_new_a;
      base_b = m_new_b == kNegInf ? 0.0f : m_new_b;
      const float alpha_a = exp2_approx(m_a - base_a), alpha_b = exp2_approx(m_b - base_b);
      m_a = m_new_a;
      m_b = m_new_b;
      l_a *= alpha_a;
      l_b *= alpha_b;
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        o[4 * dt] *= alpha_a;
        o[4 * dt + 1] *= alpha_a;
        o[4 * dt + 2] *= alpha_b;
        o[4 * dt + 3] *= alpha_b;
      }
    } else {
      base_a = fmaxf(m_a, mx_a * s_mul);
      base_b = fmaxf(m_b, mx_b * s_mul);
      const float alpha_a = exp2_approx(m_a - base_a), alpha_b = exp2_approx(m_b - base_b);
      m_a = base_a;
      m_b = base_b;
      l_a *= alpha_a;
      l_b *= alpha_b;
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        o[4 * dt] *= alpha_a;
        o[4 * dt + 1] *= alpha_a;
        o[4 * dt + 2] *= alpha_b;
        o[4 * dt + 3] *= alpha_b;
      }
    }
    uint32_t pa[4][4];  // P as four k16 A fragments
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      float pv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pv[e] = exp2_approx(fmaf(s[4 * nt + e], s_mul, e < 2 ? -base_a : -base_b));
        if constexpr (kMasked) {
          const int key = kb + nt * 8 + 2 * t4 + (e & 1);
          pv[e] = key < (e < 2 ? n_a : n_b) ? pv[e] : 0.0f;
        }
      }
      l_a += pv[0] + pv[1];
      l_b += pv[2] + pv[3];
      pa[nt / 2][(nt % 2) * 2] = pack2<T>(pv[0], pv[1]);
      pa[nt / 2][(nt % 2) * 2 + 1] = pack2<T>(pv[2], pv[3]);
    }
    // O += P V: k-step kc covers keys 16 kc .. 16 kc + 15, two 1024-byte atoms of V. The register
    // writes above (rescaled O, P) happen before the fence.
    fence_regs(o);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kc][e])::"memory");
    }
    wgmma_fence();
    const uint64_t v_desc = sw128_desc(v_s);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) wgmma_rs<T>(o, pa[kc], v_desc + kc * (2048 >> 4));
    wgmma_commit();
    wgmma_wait_all();  // V's buffer is refilled once every warp passed the next barrier
    fence_regs(o);
  };

  cp_async_wait<kStages - 1>();
  fence_proxy_async();
  __syncthreads();
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();
    if (t + kStages - 1 < n_tiles) load_tile(t + kStages - 1);
    cp_async_commit();
    const int kb = t * kKeyTile;
    if (group_active && kb < n_group) {
      const unsigned char* k_s = kv_s + (t % kStages) * 2 * kSwTile;
      if (kb + kKeyTile <= n_first) {
        tile_step(std::false_type{}, k_s, kb);
      } else {
        tile_step(std::true_type{}, k_s, kb);
      }
    }
  }
  cp_async_wait<0>();
  if (!group_active) return;

  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(b) * p.q_len * p.out_ld + static_cast<int64_t>(h) * 64;
  const float la = quad_sum(l_a), lb = quad_sum(l_b);
  const float mul_a = la > 0.0f ? 1.0f / la : 0.0f;
  const float mul_b = lb > 0.0f ? 1.0f / lb : 0.0f;
  const int row_a = r0 + g, row_b = row_a + 8;
  const bool vec_out = p.vec_out != 0;
#pragma unroll
  for (int dt = 0; dt < 8; ++dt) {
    const int col = dt * 8 + 2 * t4;
    if (vec_out) {
      if (row_a < p.q_len) {
        *reinterpret_cast<uint32_t*>(out + row_a * p.out_ld + col) = pack2<T>(o[4 * dt] * mul_a, o[4 * dt + 1] * mul_a);
      }
      if (row_b < p.q_len) {
        *reinterpret_cast<uint32_t*>(out + row_b * p.out_ld + col) =
            pack2<T>(o[4 * dt + 2] * mul_b, o[4 * dt + 3] * mul_b);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (row_a < p.q_len) out[row_a * p.out_ld + col + e] = from_f32<T>(o[4 * dt + e] * mul_a);
        if (row_b < p.q_len) out[row_b * p.out_ld + col + e] = from_f32<T>(o[4 * dt + 2 + e] * mul_b);
      }
    }
  }
}

// The wgmma kernel takes: f16/bf16 K/V of the activation dtype, head_dim 64, 16-byte aligned rows, a
// positive scale (its running max is kept scaled), an sm_90 device.
bool wgmma_eligible(const AttentionKvArgs& a) {
  static const bool hopper = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9;
  }();
  return hopper && a.storage == KvStorage::kSame && a.head_dim == 64 && a.scale > 0.0f && aligned16(a.q) &&
         aligned16(a.k) && aligned16(a.v) && a.q_ld % 8 == 0 && a.kv_ld % 8 == 0;
}

template <typename T, typename Shape>
Status launch_wgmma(const AttentionKvArgs& a, cudaStream_t stream) {
  MmaParams p{};
  p.q = a.q;
  p.q_ld = a.q_ld;
  p.k = a.k;
  p.v = a.v;
  p.kv_ld = a.kv_ld;
  p.kv_batch_stride = a.kv_batch_stride;
  p.out = a.out;
  p.out_ld = a.out_ld;
  p.kv_lengths = a.kv_lengths;
  p.q_len = static_cast<int>(a.q_len);
  p.kv_len = static_cast<int>(a.kv_len);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = 64;
  p.scale_log2 = a.scale * kLog2e;
  p.causal = a.causal ? 1 : 0;
  p.vec_out = reinterpret_cast<uintptr_t>(a.out) % 4 == 0 && a.out_ld % 2 == 0;
  constexpr int64_t smem = Shape::smem_bytes();
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_kv_wgmma_kernel<T, Shape>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.q_len + Shape::kCtaRows - 1) / Shape::kCtaRows),
                  static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  attention_kv_wgmma_kernel<T, Shape><<<grid, Shape::kThreads, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

// Two warpgroups (128 query rows) and two K/V buffers: two CTAs per SM by registers. Measured slower on an
// H200 (16 x 1500 x 1500): a third buffer (254 vs 263 TFLOP/s), one group per CTA (214), three (234), and
// FlashAttention-3's intra-warpgroup overlap of S_t = Q K_t with the softmax and P V of the previous tile
// (208-217: at two CTAs per SM its second score tile does not fit in 128 registers).
using EncoderWgmmaShape = WgmmaShape<2, 2>;

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
  if (a.dtype == DType::kF16 || a.dtype == DType::kBF16) {
    if (a.q_len >= kWgmmaMinQueries && wgmma_eligible(a)) {
      return a.dtype == DType::kF16 ? launch_wgmma<__half, EncoderWgmmaShape>(a, stream)
                                    : launch_wgmma<__nv_bfloat16, EncoderWgmmaShape>(a, stream);
    }
  }
  if (a.dtype == DType::kF16) return launch_for_storage<__half>(a, stream);
  if (a.dtype == DType::kBF16) return launch_for_storage<__nv_bfloat16>(a, stream);
  return unimplemented("attention_kv_mma: f16/bf16 only");
}

}  // namespace mmserve::kernels::attention_kv_detail
