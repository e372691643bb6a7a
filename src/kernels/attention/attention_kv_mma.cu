// The tensor-core path of attention_kv_cuda (f16/bf16 q and out, q_len > 1, head_dim <= 128, any K/V
// storage): FlashAttention-2 with K/V streamed through shared memory, so any kv_len works (Whisper's
// encoder: 1500 x 1500 at head_dim 64; cross-attention: q_len up to 448 against 1500 keys).
//
// One CTA of 4 warps per (batch row, head, tile of 64 or 128 query rows); each warp owns one m-tile of 16
// rows, or two for long queries (each K/V fragment then feeds two mma, and two dependency chains
// interleave). K and V come in tiles of 64 keys into two shared buffers: tile t + 1 is fetched
// (cp.async, 16 bytes at a time, when K/V are f16/bf16 and aligned; plain loads converted to T otherwise:
// FP8 E4M3 and INT8 values are exact in f16 and bf16, so compressed K/V cost no extra rounding, their
// scales being applied to the scores and the output instead) while tile t is consumed. Per tile and warp:
// S = Q K^T by mma.sync m16n8k16 with f32 accumulators (K fragments by ldmatrix), the mask only on tiles
// that cross a row's visible prefix, the online softmax in the log2 domain, P rounded to T straight from
// the accumulator layout into A fragments, O += P V with V fragments from ldmatrix.trans. Keys past the
// CTA's last visible key are never read from global memory (zeros in shared memory instead), so padding
// may hold NaN.
// Tests: attention_kv_cuda_test.cpp; bench: attention_kv_cuda_bench.cpp (Whisper large-v3 encoder).
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_cuda_common.cuh"

namespace mmserve::kernels::attention_kv_detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
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
  int causal, vec_q, vec_kv;
};

// Rows [0, rows_valid) x columns [0, head_dim) of a strided global matrix of KT into shared rows of
// kDp + kSmemPad elements of T; rows up to rows_total and columns up to kDp become zeros. `vec`: 16-byte
// cp.async (KT == T only; needs 16-byte aligned rows and head_dim % 8 == 0). All threads of the CTA call
// it; the caller commits, waits and synchronises.
template <typename T, typename KT, int kDp>
__device__ __forceinline__ void load_rows(uint16_t* dst, const KT* src, int64_t ld, int rows_valid, int rows_total,
                                          int head_dim, bool vec) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kChunks = kDp / 8;
  for (int idx = threadIdx.x; idx < rows_total * kChunks; idx += blockDim.x) {
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

// grid = (q tiles, heads, batch), block = kThreads; dynamic shared memory = mma_smem_bytes(kDp, kMTiles).
// Each warp owns kMTiles m-tiles of 16 query rows: every K and V fragment read from shared memory feeds
// kMTiles mma, and the m-tiles' dependency chains interleave (2 for long queries: the encoder).
template <typename T, typename KT, int kDp, int kMTiles>
__global__ void __launch_bounds__(kThreads) attention_kv_mma_kernel(const MmaParams p) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kSteps = kDp / 16;
  constexpr int kDimTiles = kDp / 8;
  constexpr int kWarpRows = kMTiles * kRowsPerWarp;
  constexpr int kCtaRows = kWarps * kWarpRows;
  constexpr float kNegInf = -INFINITY;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(mma_smem);  // [kCtaRows][kLd]
  uint16_t* kv_s = q_s + kCtaRows * kLd;                  // [2 buffers][K, V][kKeyTile][kLd]

  const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int L = kv_length(p.kv_lengths, b, p.kv_len);
  const bool causal = p.causal != 0;
  const int i0 = tile * kCtaRows;
  const int rows = min(kCtaRows, p.q_len - i0);
  const int n_cta = row_visible(i0 + rows - 1, p.q_len, L, causal);  // keys [0, n_cta) are ever read
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const bool compressed = p.k_scale != nullptr && n_cta > 0;
  const float s_mul = p.scale_log2 * (compressed ? p.k_scale[bh] : 1.0f);
  const float v_mul = compressed ? p.v_scale[bh] : 1.0f;

  const T* q_g = static_cast<const T*>(p.q) + (static_cast<int64_t>(b) * p.q_len + i0) * p.q_ld +
                 static_cast<int64_t>(h) * p.head_dim;
  const int64_t kv_base = static_cast<int64_t>(b) * p.kv_batch_stride * p.kv_ld + static_cast<int64_t>(h) * p.head_dim;
  const KT* k_g = static_cast<const KT*>(p.k) + kv_base;
  const KT* v_g = static_cast<const KT*>(p.v) + kv_base;
  const bool vec_kv = p.vec_kv != 0;
  auto load_tile = [&](int t) {
    uint16_t* k_s = kv_s + (t & 1) * 2 * kKeyTile * kLd;
    uint16_t* v_s = k_s + kKeyTile * kLd;
    const int kb = t * kKeyTile;
    const int valid = min(kKeyTile, n_cta - kb);
    load_rows<T, KT, kDp>(k_s, k_g + kb * p.kv_ld, p.kv_ld, valid, kKeyTile, p.head_dim, vec_kv);
    load_rows<T, KT, kDp>(v_s, v_g + kb * p.kv_ld, p.kv_ld, valid, kKeyTile, p.head_dim, vec_kv);
  };

  load_rows<T, T, kDp>(q_s, q_g, p.q_ld, rows, kCtaRows, p.head_dim, p.vec_q != 0);
  const int n_tiles = (n_cta + kKeyTile - 1) / kKeyTile;
  if (n_tiles > 0) load_tile(0);
  cp_async_commit();

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

  uint32_t qa[kMTiles][kSteps][4];
  float o[kMTiles][kDimTiles][4];
  float m_a[kMTiles], m_b[kMTiles], l_a[kMTiles], l_b[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
    m_a[mt] = m_b[mt] = kNegInf;
    l_a[mt] = l_b[mt] = 0.0f;
  }

  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {
      load_tile(t + 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const uint16_t* w_s = q_s + (warp * kWarpRows + mt * 16) * kLd;
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks) {
          qa[mt][ks][0] = *reinterpret_cast<const uint32_t*>(w_s + g * kLd + ks * 16 + 2 * t4);
          qa[mt][ks][1] = *reinterpret_cast<const uint32_t*>(w_s + (g + 8) * kLd + ks * 16 + 2 * t4);
          qa[mt][ks][2] = *reinterpret_cast<const uint32_t*>(w_s + g * kLd + ks * 16 + 8 + 2 * t4);
          qa[mt][ks][3] = *reinterpret_cast<const uint32_t*>(w_s + (g + 8) * kLd + ks * 16 + 8 + 2 * t4);
        }
      }
    }
    const int kb = t * kKeyTile;
    if (warp_active && kb < n_warp) {
      const uint16_t* k_s = kv_s + (t & 1) * 2 * kKeyTile * kLd;
      const uint16_t* v_s = k_s + kKeyTile * kLd;
      // S = Q K^T for the tile's keys: s[mt][nt] holds keys kb + 8 nt + 2 t4 (+1) of rows g (s[..][0..1]) and
      // g + 8 (s[..][2..3]) of m-tile mt.
      float s[kMTiles][8][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
      }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kb + kc * 16 >= n_warp) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int nt = 2 * kc + half;
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
      }
      // Scale into the log2 domain; mask only a tile that crosses the visible prefix of the warp's first
      // row (skipped chunks always lie in such a tile). Then the online softmax per m-tile.
      const bool need_mask = kb + kKeyTile > n_first;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if (need_mask) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = kb + nt * 8 + 2 * t4 + e;
              s[mt][nt][e] = key < n_a[mt] ? s[mt][nt][e] * s_mul : kNegInf;
              s[mt][nt][2 + e] = key < n_b[mt] ? s[mt][nt][2 + e] * s_mul : kNegInf;
            }
          }
        } else {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] *= s_mul;
          }
        }
        float mx_a = kNegInf, mx_b = kNegInf;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          mx_a = fmaxf(mx_a, fmaxf(s[mt][nt][0], s[mt][nt][1]));
          mx_b = fmaxf(mx_b, fmaxf(s[mt][nt][2], s[mt][nt][3]));
        }
        mx_a = quad_max(mx_a);
        mx_b = quad_max(mx_b);
        const float m_new_a = fmaxf(m_a[mt], mx_a), m_new_b = fmaxf(m_b[mt], mx_b);
        // A row with nothing visible yet keeps max -inf; exponentiate against 0 then (no -inf - -inf NaN).
        const float base_a = m_new_a == kNegInf ? 0.0f : m_new_a;
        const float base_b = m_new_b == kNegInf ? 0.0f : m_new_b;
        const float alpha_a = exp2_approx(m_a[mt] - base_a), alpha_b = exp2_approx(m_b[mt] - base_b);
        m_a[mt] = m_new_a;
        m_b[mt] = m_new_b;
        float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          s[mt][nt][0] = exp2_approx(s[mt][nt][0] - base_a);
          s[mt][nt][1] = exp2_approx(s[mt][nt][1] - base_a);
          s[mt][nt][2] = exp2_approx(s[mt][nt][2] - base_b);
          s[mt][nt][3] = exp2_approx(s[mt][nt][3] - base_b);
          sum_a += s[mt][nt][0] + s[mt][nt][1];
          sum_b += s[mt][nt][2] + s[mt][nt][3];
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
      // O += P V, one 16-key chunk (n-tiles 2kc, 2kc + 1 of S = one A fragment) at a time; each V fragment
      // pair serves every m-tile.
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        if (kb + kc * 16 >= n_warp) continue;
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
    }
    __syncthreads();  // the buffer of tile t is refilled with tile t + 2 by the next iteration
  }
  cp_async_wait<0>();  // with no visible key the Q copy was never waited for
  if (!warp_active) return;

  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(b) * p.q_len * p.out_ld + static_cast<int64_t>(h) * p.head_dim;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const float la = quad_sum(l_a[mt]), lb = quad_sum(l_b[mt]);
    const float mul_a = la > 0.0f ? v_mul / la : 0.0f;
    const float mul_b = lb > 0.0f ? v_mul / lb : 0.0f;
    const int row_a = r0 + mt * 16 + g, row_b = row_a + 8;
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = dt * 8 + 2 * t4 + e;
        if (col >= p.head_dim) continue;
        if (row_a < p.q_len) out[row_a * p.out_ld + col] = from_f32<T>(o[mt][dt][e] * mul_a);
        if (row_b < p.q_len) out[row_b * p.out_ld + col] = from_f32<T>(o[mt][dt][2 + e] * mul_b);
      }
    }
  }
}

constexpr int64_t mma_smem_bytes(int kDp, int kMTiles) {
  return (kWarps * kMTiles * kRowsPerWarp + 4 * kKeyTile) * (kDp + kSmemPad) * 2;
}

template <typename T, typename KT, int kDp, int kMTiles>
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
  // multiples of 8 elements.
  p.vec_q = aligned16(a.q) && a.q_ld % 8 == 0 && a.head_dim % 8 == 0;
  p.vec_kv = sizeof(KT) == 2 && aligned16(a.k) && aligned16(a.v) && a.kv_ld % 8 == 0 && a.head_dim % 8 == 0;
  constexpr int64_t smem = mma_smem_bytes(kDp, kMTiles);
  if constexpr (smem > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_kv_mma_kernel<T, KT, kDp, kMTiles>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  constexpr int64_t cta_rows = kWarps * kMTiles * kRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((a.q_len + cta_rows - 1) / cta_rows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  attention_kv_mma_kernel<T, KT, kDp, kMTiles><<<grid, kThreads, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

// Two m-tiles per warp (128 query rows per CTA) for long queries at head_dim <= 64, where the extra
// registers fit and the CTAs still cover the GPU; one (64 rows per CTA) otherwise.
template <typename T, typename KT>
Status launch_for_head_dim(const AttentionKvArgs& a, cudaStream_t stream) {
  const bool two = a.q_len >= kLongQueries;
  if (a.head_dim <= 16) return two ? launch<T, KT, 16, 2>(a, stream) : launch<T, KT, 16, 1>(a, stream);
  if (a.head_dim <= 32) return two ? launch<T, KT, 32, 2>(a, stream) : launch<T, KT, 32, 1>(a, stream);
  if (a.head_dim <= 64) return two ? launch<T, KT, 64, 2>(a, stream) : launch<T, KT, 64, 1>(a, stream);
  return launch<T, KT, 128, 1>(a, stream);
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
  if (a.dtype == DType::kF16) return launch_for_storage<__half>(a, stream);
  if (a.dtype == DType::kBF16) return launch_for_storage<__nv_bfloat16>(a, stream);
  return unimplemented("attention_kv_mma: f16/bf16 only");
}

}  // namespace mmserve::kernels::attention_kv_detail
