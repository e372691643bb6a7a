// Fused multi-head self-attention on the GPU (the contract is in attention_cuda.h).
//
// f16/bf16 (the fast path): one CTA per (batch, head, tile of query rows); tiles are balanced and at most
// 128 rows (8 warps; 64 when 128 would not fit next to K and V), e.g. seq 257 -> 3 tiles of 96 rows, 77 ->
// one of 80, 50 -> one of 64. The CTA copies its Q tile and the K and V rows of the head that the tile can
// see into shared memory once (cp.async, 16 bytes at a time when the layout allows it, scalar loads
// otherwise), zero-padded to multiples of 16 in both seq and head_dim. Each warp owns 16 query rows and
// walks the resident keys 64 at a time with an online softmax (FlashAttention-2): S = Q K^T by mma.sync
// m16n8k16 with f32 accumulators kept in registers (K fragments by ldmatrix), the mask (only on key blocks
// that cross kv_length or the causal diagonal) and scale * log2(e) applied, exp2 against the running row
// max, P rounded to the input type straight from the accumulator layout into A fragments (the m16n8 C
// layout of two adjacent key tiles is the m16k16 A layout), O += P V with V's B fragments from
// ldmatrix.trans, then O / rowsum staged through the warp's (by then unused) Q rows in shared memory for
// coalesced stores. Keys past kv_lengths[b] (and, with the causal mask, past the tile's last query) are
// never read from global memory: padding may hold NaN.
// f32 (the precise reference path): one warp per query row, the row's scores in shared memory, expf.
// A query row that sees no key is written as zeros in both. kv_lengths values are clamped to [0, seq]
// on the device (the host cannot read them without a synchronisation).
// Tests: attention_cuda_test.cpp (vs the CPU twin, every dtype, odd shapes, masks, strides, graph
// capture); bench: attention_cuda_bench.cpp (CLIP shapes in bf16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/mma_ptx.cuh"

namespace mmserve::kernels {
namespace {

// Tensor-core kernel (f16/bf16).
constexpr int kWarpsMax = 8;
constexpr int kThreadsMax = kWarpsMax * 32;
constexpr int kRowsPerWarp = 16;  // the M of one mma
constexpr int kKeyBlock = 64;     // keys per online-softmax step (8 n-tiles of 8)
constexpr int kSmemPad = 8;       // elements after each shared row: fragment reads hit 32 distinct banks
constexpr int64_t kHeadDimMax16 = 128;
// Hopper's per-block shared memory limit (opt-in), also the H200's.
constexpr int64_t kSmemMax = 227 * 1024;

// f32 kernel.
constexpr int kF32Warps = 8;  // query rows per CTA, one per warp
constexpr int64_t kHeadDimMaxF32 = 256;
constexpr int64_t kSeqMaxF32 = 4096;

constexpr float kLog2e = 1.4426950408889634f;

constexpr int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// Shared bytes of the tensor-core kernel: Q tile [tile_rows][dp + 8], K and V [round_up(seq, 16)][dp + 8].
int64_t smem_bytes_mma(int64_t seq, int64_t head_dim, int64_t tile_rows) {
  const int64_t ld = round_up(head_dim, 16) + kSmemPad;
  return (tile_rows + 2 * round_up(seq, 16)) * ld * 2;
}

// Query tiles of the tensor-core kernel: as few as tiles of at most 128 rows allow, balanced, each a
// multiple of 16 rows (one warp per 16); 64-row tiles when a 128-row one would not fit in shared memory.
struct MmaTiling {
  int64_t tiles = 0;
  int64_t warps = 0;  // per CTA
  int64_t smem = 0;   // bytes per CTA
};

MmaTiling mma_tiling(int64_t seq, int64_t head_dim) {
  MmaTiling t;
  for (int64_t rows_max : {int64_t{128}, int64_t{64}}) {
    const int64_t tiles = std::max<int64_t>(1, (seq + rows_max - 1) / rows_max);
    const int64_t rows = std::max<int64_t>(16, round_up((seq + tiles - 1) / tiles, 16));
    t.tiles = std::max<int64_t>(1, (seq + rows - 1) / rows);  // no empty tile
    t.warps = rows / kRowsPerWarp;
    t.smem = smem_bytes_mma(seq, head_dim, rows);
    if (t.smem <= kSmemMax) break;
  }
  return t;
}

// Shared bytes of the f32 kernel: per warp, the query row and the row's scores.
int64_t smem_bytes_f32(int64_t seq, int64_t head_dim) {
  return kF32Warps * (head_dim + seq) * 4;
}

extern __shared__ __align__(16) unsigned char attention_smem[];

// ---- device helpers -------------------------------------------------------------------------------------

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t load_u32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Copies rows [0, rows_valid) x columns [0, head_dim) of a strided 16-bit global matrix into shared rows
// of kDp + kSmemPad elements; rows [rows_valid, rows_total) and columns [head_dim, kDp) become zeros.
// `vec`: 16-byte cp.async (needs src and ld 16-byte aligned and head_dim % 8 == 0), else scalar loads.
// Called by all threads of the CTA; the caller waits (cp_async_wait_all) and synchronises.
template <int kDp>
__device__ __forceinline__ void load_rows(uint16_t* dst, const uint16_t* src, int64_t ld, int rows_valid,
                                          int rows_total, int head_dim, bool vec) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kChunks = kDp / 8;  // 16-byte chunks per shared row
  for (int idx = threadIdx.x; idx < rows_total * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks;
    const int c = (idx % kChunks) * 8;
    uint16_t* d = dst + r * kLd + c;
    if (r < rows_valid && c < head_dim) {
      const uint16_t* s = src + r * ld + c;
      if (vec) {
        cp_async_16(d, s);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t lo = c + 2 * e < head_dim ? s[2 * e] : 0u;
          const uint32_t hi = c + 2 * e + 1 < head_dim ? s[2 * e + 1] : 0u;
          w[e] = lo | (hi << 16);
        }
        *reinterpret_cast<uint4*>(d) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Keys visible to the rows of batch row b: the prefix [0, kv_len).
__device__ __forceinline__ int kv_length(const int32_t* kv_lengths, int b, int seq) {
  if (kv_lengths == nullptr) return seq;
  return min(max(kv_lengths[b], 0), seq);
}

// ---- tensor-core kernel (f16 / bf16) --------------------------------------------------------------------

struct MmaParams {
  const uint16_t* qkv;  // raw 16-bit words of T
  int64_t qkv_ld;
  uint16_t* out;
  int64_t out_ld;
  int seq, heads, head_dim, tiles;
  float scale_log2;  // scale * log2(e)
  int causal;
  const int32_t* kv_lengths;
  int vec_in, vec_out;  // 16-byte global accesses allowed
};

// grid.x = batch * heads * tiles (tile fastest, so the CTAs of one head run together and share K/V in L2);
// block = one warp per 16 rows of the query tile (at most 8); dynamic shared memory = smem_bytes_mma(seq,
// head_dim, tile rows). kDp = head_dim rounded up to 16.
template <typename T, int kDp>
__global__ void __launch_bounds__(kThreadsMax) attention_mma_kernel(const MmaParams p) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kSteps = kDp / 16;    // k-steps of S = Q K^T
  constexpr int kDimTiles = kDp / 8;  // n-tiles of O
  constexpr int kChunks = kDp / 8;
  constexpr float kNegInf = -INFINITY;

  const int tile_rows = static_cast<int>(blockDim.x / 32) * kRowsPerWarp;
  const int seq_pad = (p.seq + 15) & ~15;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(attention_smem);  // [tile_rows][kLd]
  uint16_t* k_s = q_s + tile_rows * kLd;                        // [seq_pad][kLd]
  uint16_t* v_s = k_s + seq_pad * kLd;                          // [seq_pad][kLd]

  const int tile = static_cast<int>(blockIdx.x % p.tiles);
  const int bh = static_cast<int>(blockIdx.x / p.tiles);
  const int h = bh % p.heads;
  const int b = bh / p.heads;
  const int q0 = tile * tile_rows;
  if (q0 >= p.seq) return;  // never with the host's tiling; the whole CTA leaves together
  const int kv_len = kv_length(p.kv_lengths, b, p.seq);
  // Keys any row of this CTA can see: the prefix [0, n_load), loaded and zero-padded to a multiple of 16.
  const int n_load = p.causal ? min(kv_len, min(q0 + tile_rows, p.seq)) : kv_len;
  const int n_load_pad = (n_load + 15) & ~15;

  const int64_t hidden = static_cast<int64_t>(p.heads) * p.head_dim;
  const uint16_t* q_g = p.qkv + static_cast<int64_t>(b) * p.seq * p.qkv_ld + static_cast<int64_t>(h) * p.head_dim;
  const uint16_t* k_g = q_g + hidden;
  const uint16_t* v_g = q_g + 2 * hidden;
  const bool vec_in = p.vec_in != 0;
  load_rows<kDp>(q_s, q_g + static_cast<int64_t>(q0) * p.qkv_ld, p.qkv_ld, min(tile_rows, p.seq - q0), tile_rows,
                 p.head_dim, vec_in);
  load_rows<kDp>(k_s, k_g, p.qkv_ld, n_load, n_load_pad, p.head_dim, vec_in);
  load_rows<kDp>(v_s, v_g, p.qkv_ld, n_load, n_load_pad, p.head_dim, vec_in);
  cp_async_wait_all();
  __syncthreads();  // the only CTA-wide barrier: after it each warp works alone

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // fragment row (and row + 8)
  const int t = lane % 4;  // fragment column pair
  const int r0 = q0 + warp * kRowsPerWarp;
  if (r0 >= p.seq) return;
  const int r_last = min(r0 + kRowsPerWarp - 1, p.seq - 1);
  // Keys any row of this warp sees; a key block or 16-key chunk at or past it is skipped (warp-uniform).
  const int n_warp = p.causal ? min(kv_len, r_last + 1) : kv_len;
  const int row_a = r0 + g, row_b = r0 + g + 8;

  uint16_t* w_s = q_s + warp * kRowsPerWarp * kLd;  // this warp's 16 Q rows; later its O staging area
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    qa[ks][0] = load_u32(w_s + g * kLd + ks * 16 + 2 * t);
    qa[ks][1] = load_u32(w_s + (g + 8) * kLd + ks * 16 + 2 * t);
    qa[ks][2] = load_u32(w_s + g * kLd + ks * 16 + 8 + 2 * t);
    qa[ks][3] = load_u32(w_s + (g + 8) * kLd + ks * 16 + 8 + 2 * t);
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_a = kNegInf, m_b = kNegInf;  // running max (log2 domain) of rows row_a, row_b
  float l_a = 0.0f, l_b = 0.0f;        // this lane's part of the running row sums

  for (int kb = 0; kb < n_warp; kb += kKeyBlock) {
    // S = Q K^T for keys [kb, kb + 64): s[nt] holds keys kb + 8 nt + 2t (+1) of rows g (s[nt][0..1]) and
    // g + 8 (s[nt][2..3]).
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kb + kc * 16 >= n_warp) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int nt = 2 * kc + half;
        const uint16_t* k_row = k_s + (kb + nt * 8 + (lane & 7)) * kLd;
#pragma unroll
        for (int ks = 0; ks + 1 < kSteps; ks += 2) {
          uint32_t kf[4];
          ldmatrix_x4(kf, k_row + ks * 16 + (lane >> 3) * 8);
          mma_16816<T>(s[nt], qa[ks], kf[0], kf[1]);
          mma_16816<T>(s[nt], qa[ks + 1], kf[2], kf[3]);
        }
        if constexpr (kSteps % 2 == 1) {
          uint32_t kf[2];
          ldmatrix_x2(kf, k_row + (kSteps - 1) * 16 + ((lane >> 3) & 1) * 8);
          mma_16816<T>(s[nt], qa[kSteps - 1], kf[0], kf[1]);
        }
      }
    }

    // Scale into the log2 domain, mask (only a block that crosses kv_len or, causal, the diagonal of this
    // warp's first row: skipped chunks always are such blocks), and the block's row max.
    float mx_a = kNegInf, mx_b = kNegInf;
    const bool need_mask = kb + kKeyBlock > kv_len || (p.causal && kb + kKeyBlock - 1 > r0);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kb + nt * 8 + 2 * t + e;
          const bool seen_a = key < kv_len && (!p.causal || key <= row_a);
          const bool seen_b = key < kv_len && (!p.causal || key <= row_b);
          s[nt][e] = seen_a ? s[nt][e] * p.scale_log2 : kNegInf;
          s[nt][2 + e] = seen_b ? s[nt][2 + e] * p.scale_log2 : kNegInf;
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale_log2;
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
    }
    mx_a = quad_max(mx_a);
    mx_b = quad_max(mx_b);
    const float m_new_a = fmaxf(m_a, mx_a), m_new_b = fmaxf(m_b, mx_b);
    // A row with nothing visible yet keeps max -inf; exponentiate against 0 then so that no -inf - -inf
    // NaN appears (its p are all 0 and its alpha is exp2(-inf) = 0 on zero accumulators).
    const float base_a = m_new_a == kNegInf ? 0.0f : m_new_a;
    const float base_b = m_new_b == kNegInf ? 0.0f : m_new_b;
    const float alpha_a = exp2_approx(m_a - base_a), alpha_b = exp2_approx(m_b - base_b);
    m_a = m_new_a;
    m_b = m_new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      s[nt][0] = exp2_approx(s[nt][0] - base_a);
      s[nt][1] = exp2_approx(s[nt][1] - base_a);
      s[nt][2] = exp2_approx(s[nt][2] - base_b);
      s[nt][3] = exp2_approx(s[nt][3] - base_b);
      sum_a += s[nt][0] + s[nt][1];
      sum_b += s[nt][2] + s[nt][3];
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

    // O += P V, one 16-key chunk (n-tiles 2kc, 2kc + 1 of S = one A fragment) at a time.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kb + kc * 16 >= n_warp) continue;
      const uint32_t pa[4] = {pack2<T>(s[2 * kc][0], s[2 * kc][1]), pack2<T>(s[2 * kc][2], s[2 * kc][3]),
                              pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
      // ldmatrix rows: matrices 0..3 = (keys 0-7, dims dt), (keys 8-15, dims dt), (keys 0-7, dims dt + 1),
      // (keys 8-15, dims dt + 1): B fragments (b0, b1) of dim tiles dt and dt + 1.
      const int v_key = kb + kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint16_t* v_row = v_s + v_key * kLd + (lane >> 4) * 8;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; dt += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_row + dt * 8);
        mma_16816<T>(o[dt], pa, vb[0], vb[1]);
        mma_16816<T>(o[dt + 1], pa, vb[2], vb[3]);
      }
    }
  }

  // Normalise, round to T, and stage the warp's 16 output rows in its own Q rows (Q is in registers).
  l_a = quad_sum(l_a);
  l_b = quad_sum(l_b);
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  __syncwarp();
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) {
    const uint32_t top = l_a > 0.0f ? pack2<T>(o[dt][0] * inv_a, o[dt][1] * inv_a) : 0u;
    const uint32_t bottom = l_b > 0.0f ? pack2<T>(o[dt][2] * inv_b, o[dt][3] * inv_b) : 0u;
    *reinterpret_cast<uint32_t*>(w_s + g * kLd + dt * 8 + 2 * t) = top;
    *reinterpret_cast<uint32_t*>(w_s + (g + 8) * kLd + dt * 8 + 2 * t) = bottom;
  }
  __syncwarp();
  uint16_t* out_g = p.out + (static_cast<int64_t>(b) * p.seq + r0) * p.out_ld + static_cast<int64_t>(h) * p.head_dim;
  const int rows = r_last - r0 + 1;
  for (int idx = lane; idx < kRowsPerWarp * kChunks; idx += 32) {
    const int r = idx / kChunks;
    const int c = (idx % kChunks) * 8;
    if (r >= rows || c >= p.head_dim) continue;
    const uint16_t* src = w_s + r * kLd + c;
    uint16_t* dst = out_g + r * p.out_ld + c;
    if (p.vec_out) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int e = 0; e < 8 && c + e < p.head_dim; ++e) dst[e] = src[e];
    }
  }
}

// ---- f32 kernel ------------------------------------------------------------------------------------------

struct F32Params {
  const float* qkv;
  int64_t qkv_ld;
  float* out;
  int64_t out_ld;
  int seq, heads, head_dim, tiles;
  float scale;
  int causal;
  const int32_t* kv_lengths;
};

// grid.x = batch * heads * tiles, tiles = ceil(seq / 8); block = 8 warps, one query row each; dynamic
// shared memory = smem_bytes_f32(seq, head_dim). Plain f32 with expf: the precise path.
__global__ void __launch_bounds__(kF32Warps * 32) attention_f32_kernel(const F32Params p) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float* q_s = reinterpret_cast<float*>(attention_smem) + warp * (p.head_dim + p.seq);  // [head_dim]
  float* p_s = q_s + p.head_dim;                                                        // [seq]

  const int tile = static_cast<int>(blockIdx.x % p.tiles);
  const int bh = static_cast<int>(blockIdx.x / p.tiles);
  const int h = bh % p.heads;
  const int b = bh / p.heads;
  const int i = tile * kF32Warps + warp;
  if (i >= p.seq) return;
  const int kv_len = kv_length(p.kv_lengths, b, p.seq);
  const int n = p.causal ? min(i + 1, kv_len) : kv_len;  // keys [0, n) visible to row i

  const int64_t hidden = static_cast<int64_t>(p.heads) * p.head_dim;
  const float* base = p.qkv + static_cast<int64_t>(b) * p.seq * p.qkv_ld + static_cast<int64_t>(h) * p.head_dim;
  const float* q = base + static_cast<int64_t>(i) * p.qkv_ld;
  const float* k = base + hidden;
  const float* v = base + 2 * hidden;
  float* o = p.out + (static_cast<int64_t>(b) * p.seq + i) * p.out_ld + static_cast<int64_t>(h) * p.head_dim;
  if (n == 0) {
    for (int d = lane; d < p.head_dim; d += 32) o[d] = 0.0f;
    return;
  }
  for (int d = lane; d < p.head_dim; d += 32) q_s[d] = q[d];
  __syncwarp();

  float mx = -INFINITY;
  for (int j = lane; j < n; j += 32) {
    const float* kj = k + static_cast<int64_t>(j) * p.qkv_ld;
    float dot = 0.0f;
    for (int d = 0; d < p.head_dim; ++d) dot = fmaf(q_s[d], kj[d], dot);
    const float s = dot * p.scale;
    p_s[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j < n; j += 32) {  // each lane rereads only the scores it wrote
    const float e = expf(p_s[j] - mx);
    p_s[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  const float inv = 1.0f / sum;
  for (int d = lane; d < p.head_dim; d += 32) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc = fmaf(p_s[j], v[static_cast<int64_t>(j) * p.qkv_ld + d], acc);
    o[d] = acc * inv;
  }
}

// ---- host side -------------------------------------------------------------------------------------------

template <typename Kernel>
Status set_smem_limit(Kernel kernel, int64_t bytes) {
  if (bytes > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  return ok_status();
}

template <typename T, int kDp>
Status launch_mma(const AttentionCudaArgs& a, const MmaTiling& tiling, cudaStream_t stream) {
  MmaParams p{};
  p.qkv = static_cast<const uint16_t*>(a.qkv);
  p.qkv_ld = a.qkv_ld;
  p.out = static_cast<uint16_t*>(a.out);
  p.out_ld = a.out_ld;
  p.seq = static_cast<int>(a.seq);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.tiles = static_cast<int>(tiling.tiles);
  p.scale_log2 = a.scale * kLog2e;
  p.causal = a.causal ? 1 : 0;
  p.kv_lengths = a.kv_lengths;
  // 16-byte accesses need every row and head start on a 16-byte boundary: base pointer aligned, ld and
  // head_dim (hence every column offset h * head_dim, hidden, 2 * hidden) multiples of 8 elements.
  p.vec_in = aligned16(a.qkv) && a.qkv_ld % 8 == 0 && a.head_dim % 8 == 0;
  p.vec_out = aligned16(a.out) && a.out_ld % 8 == 0 && a.head_dim % 8 == 0;
  RETURN_IF_ERROR(set_smem_limit(attention_mma_kernel<T, kDp>, tiling.smem));
  const int64_t blocks = a.batch * a.heads * tiling.tiles;
  const int threads = static_cast<int>(tiling.warps) * 32;
  attention_mma_kernel<T, kDp><<<static_cast<unsigned>(blocks), threads, static_cast<size_t>(tiling.smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T>
Status launch_mma_for_head_dim(const AttentionCudaArgs& a, cudaStream_t stream) {
  const MmaTiling tiles = mma_tiling(a.seq, a.head_dim);
  switch (round_up(a.head_dim, 16)) {
    case 16: return launch_mma<T, 16>(a, tiles, stream);
    case 32: return launch_mma<T, 32>(a, tiles, stream);
    case 48: return launch_mma<T, 48>(a, tiles, stream);
    case 64: return launch_mma<T, 64>(a, tiles, stream);
    case 80: return launch_mma<T, 80>(a, tiles, stream);
    case 96: return launch_mma<T, 96>(a, tiles, stream);
    case 112: return launch_mma<T, 112>(a, tiles, stream);
    case 128: return launch_mma<T, 128>(a, tiles, stream);
    default: return unimplemented("attention_cuda: head_dim " + std::to_string(a.head_dim) + " > 128");
  }
}

Status launch_f32(const AttentionCudaArgs& a, cudaStream_t stream) {
  F32Params p{};
  p.qkv = static_cast<const float*>(a.qkv);
  p.qkv_ld = a.qkv_ld;
  p.out = static_cast<float*>(a.out);
  p.out_ld = a.out_ld;
  p.seq = static_cast<int>(a.seq);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.tiles = static_cast<int>((a.seq + kF32Warps - 1) / kF32Warps);
  p.scale = a.scale;
  p.causal = a.causal ? 1 : 0;
  p.kv_lengths = a.kv_lengths;
  const int64_t smem = smem_bytes_f32(a.seq, a.head_dim);
  RETURN_IF_ERROR(set_smem_limit(attention_f32_kernel, smem));
  const int64_t blocks = a.batch * a.heads * p.tiles;
  attention_f32_kernel<<<static_cast<unsigned>(blocks), kF32Warps * 32, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

std::string shape_string(const AttentionCudaArgs& a) {
  return std::string(dtype_name(a.dtype)) + " batch=" + std::to_string(a.batch) + " seq=" + std::to_string(a.seq) +
         " heads=" + std::to_string(a.heads) + " head_dim=" + std::to_string(a.head_dim);
}

}  // namespace

bool attention_cuda_supported(DType dtype, int64_t seq, int64_t head_dim) {
  if (seq < 0 || head_dim <= 0) return false;
  switch (dtype) {
    case DType::kF32: return head_dim <= kHeadDimMaxF32 && seq <= kSeqMaxF32;
    case DType::kF16:
    case DType::kBF16: return head_dim <= kHeadDimMax16 && mma_tiling(seq, head_dim).smem <= kSmemMax;
    default: return false;
  }
}

Status attention_cuda(const AttentionCudaArgs& a, cudaStream_t stream) {
  if (a.batch < 0 || a.seq < 0 || a.heads <= 0 || a.head_dim <= 0) {
    return invalid_argument("attention_cuda: bad sizes " + shape_string(a) + " (batch, seq >= 0; heads, head_dim > 0)");
  }
  if (a.dtype != DType::kF32 && a.dtype != DType::kF16 && a.dtype != DType::kBF16) {
    return unimplemented(std::string("attention_cuda: dtype ") + dtype_name(a.dtype) + " (f32, f16, bf16 only)");
  }
  // Sizes past these are not attention heads; the bound also keeps every product below in int64/int32.
  if (a.heads > (1 << 16) || a.head_dim > (1 << 16) || a.seq > (1 << 24) || a.batch > (1 << 24)) {
    return unimplemented("attention_cuda: sizes out of range: " + shape_string(a));
  }
  const int64_t hidden = a.heads * a.head_dim;
  if (a.qkv_ld < 3 * hidden || a.out_ld < hidden) {
    return invalid_argument("attention_cuda: qkv_ld " + std::to_string(a.qkv_ld) +
                            " (needs >= " + std::to_string(3 * hidden) + ") or out_ld " + std::to_string(a.out_ld) +
                            " (needs >= " + std::to_string(hidden) + ") too small for " + shape_string(a));
  }
  if (a.batch == 0 || a.seq == 0) return ok_status();
  if (a.qkv == nullptr || a.out == nullptr) return invalid_argument("attention_cuda: null qkv or out");
  if (!attention_cuda_supported(a.dtype, a.seq, a.head_dim)) {
    if (a.dtype == DType::kF32) {
      return unimplemented("attention_cuda: " + shape_string(a) + " (f32 takes head_dim <= " +
                           std::to_string(kHeadDimMaxF32) + ", seq <= " + std::to_string(kSeqMaxF32) + ")");
    }
    return unimplemented("attention_cuda: " + shape_string(a) + " (f16/bf16 take head_dim <= " +
                         std::to_string(kHeadDimMax16) + " and K, V of a head in " + std::to_string(kSmemMax) +
                         " bytes of shared memory: (64 + 2 * round_up(seq, 16)) * (round_up(head_dim, 16) + 8) * 2 = " +
                         std::to_string(smem_bytes_mma(a.seq, a.head_dim, 64)) + ")");
  }
  const int64_t blocks_per_head =
      a.dtype == DType::kF32 ? (a.seq + kF32Warps - 1) / kF32Warps : mma_tiling(a.seq, a.head_dim).tiles;
  if (a.batch * a.heads * blocks_per_head > std::numeric_limits<int32_t>::max()) {
    return unimplemented("attention_cuda: grid too large for " + shape_string(a));
  }
  switch (a.dtype) {
    case DType::kF16: return launch_mma_for_head_dim<__half>(a, stream);
    case DType::kBF16: return launch_mma_for_head_dim<__nv_bfloat16>(a, stream);
    default: return launch_f32(a, stream);
  }
}

}  // namespace mmserve::kernels
