// SAM's ViT attention with the decomposed relative position bias on the GPU (see rel_pos_attention_cuda.h).
//
// rel_pos_bias_kernel: one CTA per (64 query rows, head, sequence); the rows' q and both tables in shared memory
//   (f32; the tables' rows padded to an odd stride), one thread per (row, table entry) dot product. Writes bias[s][h][i][0 .. height) = rel_h, [height .. height + width) = rel_w.
// rel_pos_attention_mma_kernel (f16/bf16): FlashAttention-2 as attention_kv_mma.cu's kernel (whose helpers it shares:
//   attention_kv_mma_common.cuh), specialised: 4 warps x 16 query rows per CTA, K/V tiles of 64 keys in a ring of two
//   shared buffers (cp.async), Q fragments in registers, P rounded to T straight from the accumulators. Before the
//   online softmax every score becomes, in the log2 domain, s * scale * log2e + (rel_h[ky] + rel_w[kx]) * log2e, the
//   CTA's bias rows staged in shared memory once and each key tile's (ky, kx) in a small table beside its K/V buffer.
//   Keys past `tokens` are masked in the last tile only.
// rel_pos_attention_simt_kernel (f32, or forced): one query row per thread (q and the output accumulator in
//   registers), K/V tiles of 16 keys in shared memory as f32, the same staged bias rows, online softmax with expf.
// Tests: rel_pos_attention_cuda_test.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_align.h"
#include "kernels/attention/attention_kv_mma_common.cuh"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/rel_pos_attention/rel_pos_attention_cuda.h"

namespace mmserve::kernels {
namespace {

using attention_kv_detail::kKeyTile;
using attention_kv_detail::kLog2e;
using attention_kv_detail::kSmemPad;
using attention_kv_detail::load_rows;

constexpr int kHeadDimMax = 128;

struct Params {
  const void* qkv;
  int64_t qkv_ld;
  void* out;
  int64_t out_ld;
  const float* bias;  // [sequences, heads, tokens, span] or null
  int height, width, heads, head_dim;
  float scale;
  int vec_q, vec_out;
};

// Odd row stride of the staged bias rows: rows of one fragment column hit distinct banks.
__host__ __device__ inline int bias_ld(int span) {
  return span | 1;
}

// ---- the bias projections

constexpr int kBiasRows = 64;     // query rows per CTA
constexpr int kBiasThreads = 256;

// Odd row stride of the staged tables: the lanes of a warp read consecutive table rows at one column.
__host__ __device__ inline int table_ld(int head_dim) {
  return head_dim | 1;
}

__host__ __device__ inline size_t bias_smem_bytes(int height, int width, int head_dim) {
  return sizeof(float) * (static_cast<size_t>(kBiasRows) * head_dim +
                          static_cast<size_t>(2 * height - 1 + 2 * width - 1) * table_ld(head_dim));
}

// One CTA per (64 query rows, head, sequence): the rows' q and both tables staged in shared memory (coalesced
// loads), then one thread per (row, table entry) dot product, consecutive lanes on consecutive entries.
template <typename T>
__global__ void __launch_bounds__(kBiasThreads) rel_pos_bias_kernel(const T* qkv, int64_t qkv_ld, const float* rel_h,
                                                                    const float* rel_w, int height, int width,
                                                                    int heads, int head_dim, float* bias) {
  extern __shared__ float bias_smem[];
  const int tokens = height * width, span = height + width, ld = table_ld(head_dim);
  const int lh = 2 * height - 1, lw = 2 * width - 1;
  float* q_rows = bias_smem;                           // [kBiasRows][head_dim]
  float* tables = q_rows + kBiasRows * head_dim;       // [lh + lw][ld]: rel_pos_h rows, then rel_pos_w rows
  const int i0 = blockIdx.x * kBiasRows, h = blockIdx.y, s = blockIdx.z;
  for (int idx = threadIdx.x; idx < kBiasRows * head_dim; idx += blockDim.x) {
    const int r = idx / head_dim, c = idx % head_dim, i = i0 + r;
    q_rows[idx] = i < tokens ? to_f32(qkv[(static_cast<int64_t>(s) * tokens + i) * qkv_ld + h * head_dim + c]) : 0.0f;
  }
  for (int idx = threadIdx.x; idx < (lh + lw) * head_dim; idx += blockDim.x) {
    const int row = idx / head_dim, c = idx % head_dim;
    tables[row * ld + c] = row < lh ? rel_h[idx] : rel_w[idx - lh * head_dim];
  }
  __syncthreads();
  const int rows = min(kBiasRows, tokens - i0);
  for (int idx = threadIdx.x; idx < rows * span; idx += blockDim.x) {
    const int r = idx / span, k = idx % span, i = i0 + r;
    const int qy = i / width, qx = i % width;
    const float* table = k < height ? tables + (qy - k + height - 1) * ld : tables + (lh + qx - (k - height) + width - 1) * ld;
    const float* q = q_rows + r * head_dim;
    float dot = 0.0f;
    for (int c = 0; c < head_dim; ++c) dot = fmaf(q[c], table[c], dot);
    bias[((static_cast<int64_t>(s) * heads + h) * tokens + i) * span + k] = dot;
  }
}

// Copies the bias rows [i0, i0 + rows) of one (sequence, head) into shared rows of bias_ld(span) floats, scaled by
// `mul` (rows past `tokens` become zeros).
__device__ __forceinline__ void stage_bias(float* dst, const float* src, int i0, int rows, int tokens, int span,
                                           float mul, int threads) {
  const int ld = bias_ld(span);
  for (int idx = threadIdx.x; idx < rows * span; idx += threads) {
    const int r = idx / span, c = idx % span;
    dst[r * ld + c] = i0 + r < tokens ? src[static_cast<int64_t>(i0) * span + idx] * mul : 0.0f;
  }
}

// ---- CUDA-core kernel

constexpr int kSimtRows = 64;  // query rows (= threads) per CTA
constexpr int kSimtKeys = 16;  // keys per tile

template <int kD>
constexpr size_t simt_smem_bytes(int span) {
  return sizeof(float) * (2 * kSimtKeys * kD) + sizeof(int) * 2 * kSimtKeys +
         sizeof(float) * kSimtRows * bias_ld(span);
}

template <typename T, int kD>
__global__ void __launch_bounds__(kSimtRows) rel_pos_attention_simt_kernel(const Params p) {
  extern __shared__ __align__(16) float simt_smem[];
  const int tokens = p.height * p.width, span = p.height + p.width, ld = bias_ld(span);
  float* k_s = simt_smem;                                      // [kSimtKeys][kD]
  float* v_s = k_s + kSimtKeys * kD;                           // [kSimtKeys][kD]
  int* key_y = reinterpret_cast<int*>(v_s + kSimtKeys * kD);   // bias column of rel_h per key
  int* key_x = key_y + kSimtKeys;                              // bias column of rel_w per key
  float* b_s = reinterpret_cast<float*>(key_x + kSimtKeys);    // [kSimtRows][ld]
  const int i0 = blockIdx.x * kSimtRows, h = blockIdx.y, s = blockIdx.z;
  const int tid = threadIdx.x, i = i0 + tid;
  const int hd = p.head_dim, hidden = p.heads * hd;
  const T* rows = static_cast<const T*>(p.qkv) + static_cast<int64_t>(s) * tokens * p.qkv_ld;

  float q[kD];
#pragma unroll
  for (int c = 0; c < kD; ++c) q[c] = i < tokens && c < hd ? to_f32(rows[i * p.qkv_ld + h * hd + c]) : 0.0f;
  const bool has_bias = p.bias != nullptr;
  if (has_bias) {
    stage_bias(b_s, p.bias + (static_cast<int64_t>(s) * p.heads + h) * tokens * span, i0, kSimtRows, tokens, span,
               1.0f, kSimtRows);
  }
  float o[kD];
#pragma unroll
  for (int c = 0; c < kD; ++c) o[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int kb = 0; kb < tokens; kb += kSimtKeys) {
    __syncthreads();  // everyone has left the previous tile (and the bias rows are staged)
    for (int idx = tid; idx < kSimtKeys * kD; idx += kSimtRows) {
      const int r = idx / kD, c = idx % kD, j = kb + r;
      const bool ok = j < tokens && c < hd;
      k_s[idx] = ok ? to_f32(rows[j * p.qkv_ld + hidden + h * hd + c]) : 0.0f;
      v_s[idx] = ok ? to_f32(rows[j * p.qkv_ld + 2 * hidden + h * hd + c]) : 0.0f;
    }
    if (tid < kSimtKeys) {
      const int j = min(kb + tid, tokens - 1);  // keys past the end are masked; their columns must stay in the row
      key_y[tid] = j / p.width;
      key_x[tid] = p.height + j % p.width;
    }
    __syncthreads();
    const int n = min(kSimtKeys, tokens - kb);
    float sc[kSimtKeys];
    float mx = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kSimtKeys; ++jj) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kD; c += 4) {
        const float4 kv = *reinterpret_cast<const float4*>(k_s + jj * kD + c);
        dot = fmaf(q[c], kv.x, dot);
        dot = fmaf(q[c + 1], kv.y, dot);
        dot = fmaf(q[c + 2], kv.z, dot);
        dot = fmaf(q[c + 3], kv.w, dot);
      }
      float score = dot * p.scale;
      if (has_bias) score = (score + b_s[tid * ld + key_y[jj]]) + b_s[tid * ld + key_x[jj]];  // HF: (attn + rel_h) + rel_w
      sc[jj] = jj < n ? score : -INFINITY;
      mx = fmaxf(mx, sc[jj]);
    }
    const float m_new = fmaxf(m, mx);  // finite: key kb exists
    const float alpha = expf(m - m_new);
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kD; ++c) o[c] *= alpha;
#pragma unroll
    for (int jj = 0; jj < kSimtKeys; ++jj) {
      const float pj = expf(sc[jj] - m_new);
      l += pj;
#pragma unroll
      for (int c = 0; c < kD; c += 4) {
        const float4 vv = *reinterpret_cast<const float4*>(v_s + jj * kD + c);
        o[c] = fmaf(pj, vv.x, o[c]);
        o[c + 1] = fmaf(pj, vv.y, o[c + 1]);
        o[c + 2] = fmaf(pj, vv.z, o[c + 2]);
        o[c + 3] = fmaf(pj, vv.w, o[c + 3]);
      }
    }
    m = m_new;
  }
  if (i >= tokens) return;
  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(s) * tokens + i) * p.out_ld + h * hd;
  const float inv = 1.0f / l;
#pragma unroll
  for (int c = 0; c < kD; ++c) {
    if (c < hd) out[c] = from_f32<T>(o[c] * inv);
  }
}

// ---- tensor-core kernel

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kMmaRows = kMmaWarps * 16;  // one m-tile of 16 query rows per warp
constexpr int kMmaStages = 2;

template <int kDp>
constexpr size_t mma_smem_bytes(int span) {
  return sizeof(uint16_t) * (kMmaRows + kMmaStages * 2 * kKeyTile) * (kDp + kSmemPad) +
         sizeof(int2) * kMmaStages * kKeyTile + sizeof(float) * kMmaRows * bias_ld(span);
}

template <typename T, int kDp>
__global__ void __launch_bounds__(kMmaThreads, 2) rel_pos_attention_mma_kernel(const Params p) {
  constexpr int kLd = kDp + kSmemPad;
  constexpr int kSteps = kDp / 16;
  constexpr int kDimTiles = kDp / 8;
  constexpr int kStageElems = 2 * kKeyTile * kLd;
  constexpr float kNegInf = -INFINITY;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(attention_kv_detail::mma_smem);  // [kMmaRows][kLd]
  uint16_t* kv_s = q_s + kMmaRows * kLd;                                       // [stages][K, V][kKeyTile][kLd]
  int2* key_s = reinterpret_cast<int2*>(kv_s + kMmaStages * kStageElems);      // [stages][kKeyTile]: bias columns
  float* b_s = reinterpret_cast<float*>(key_s + kMmaStages * kKeyTile);        // [kMmaRows][ld], times log2e

  const int tokens = p.height * p.width, span = p.height + p.width, ld = bias_ld(span);
  const int tile = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int i0 = tile * kMmaRows;
  const int rows = min(kMmaRows, tokens - i0);
  const int hd = p.head_dim, hidden = p.heads * hd;
  const T* seq = static_cast<const T*>(p.qkv) + static_cast<int64_t>(s) * tokens * p.qkv_ld;
  const T* q_g = seq + static_cast<int64_t>(i0) * p.qkv_ld + h * hd;
  const T* k_g = seq + hidden + h * hd;
  const T* v_g = seq + 2 * hidden + h * hd;
  const float s_mul = p.scale * kLog2e;
  const int n_tiles = (tokens + kKeyTile - 1) / kKeyTile;
  auto load_tile = [&](int t) {
    uint16_t* k_s = kv_s + (t % kMmaStages) * kStageElems;
    uint16_t* v_s = k_s + kKeyTile * kLd;
    const int kb = t * kKeyTile;
    const int valid = min(kKeyTile, tokens - kb);
    load_rows<T, T, kDp, kKeyTile, kMmaThreads>(k_s, k_g + static_cast<int64_t>(kb) * p.qkv_ld, p.qkv_ld, valid, hd,
                                                p.vec_q != 0);
    load_rows<T, T, kDp, kKeyTile, kMmaThreads>(v_s, v_g + static_cast<int64_t>(kb) * p.qkv_ld, p.qkv_ld, valid, hd,
                                                p.vec_q != 0);
    if (threadIdx.x < kKeyTile) {
      const int j = min(kb + static_cast<int>(threadIdx.x), tokens - 1);
      key_s[(t % kMmaStages) * kKeyTile + threadIdx.x] = make_int2(j / p.width, p.height + j % p.width);
    }
  };

  load_rows<T, T, kDp, kMmaRows, kMmaThreads>(q_s, q_g, p.qkv_ld, rows, hd, p.vec_q != 0);
  cp_async_commit();
  load_tile(0);
  cp_async_commit();
  const bool has_bias = p.bias != nullptr;
  if (has_bias) {
    stage_bias(b_s, p.bias + (static_cast<int64_t>(s) * p.heads + h) * tokens * span, i0, kMmaRows, tokens, span,
               kLog2e, kMmaThreads);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int row_a = warp * 16 + g, row_b = row_a + 8;  // local rows of this thread's fragments
  const bool warp_active = i0 + warp * 16 < tokens;
  cp_async_wait<1>();  // Q has landed
  __syncthreads();
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    ldmatrix_x4(qa[ks], q_s + (warp * 16 + (lane & 15)) * kLd + ks * 16 + (lane >> 4) * 8);
  }
  float o[kDimTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_a = kNegInf, m_b = kNegInf, l_a = 0.0f, l_b = 0.0f;

  auto tile_step = [&](auto masked_tag, const uint16_t* k_s, const int2* keys, int kb) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    const uint16_t* v_s = k_s + kKeyTile * kLd;
    float sc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const uint16_t* k_row = k_s + (nt * 8 + (lane & 7)) * kLd;
#pragma unroll
      for (int ks = 0; ks + 1 < kSteps; ks += 2) {
        uint32_t kf[4];
        ldmatrix_x4(kf, k_row + ks * 16 + (lane >> 3) * 8);
        mma_16816<T>(sc[nt], qa[ks], kf[0], kf[1]);
        mma_16816<T>(sc[nt], qa[ks + 1], kf[2], kf[3]);
      }
      if constexpr (kSteps % 2 == 1) {
        uint32_t kf[2];
        ldmatrix_x2(kf, k_row + (kSteps - 1) * 16 + ((lane >> 3) & 1) * 8);
        mma_16816<T>(sc[nt], qa[kSteps - 1], kf[0], kf[1]);
      }
    }
    // Scores to the log2 domain with the bias: s * scale * log2e + (rel_h + rel_w) * log2e.
    float mx_a = kNegInf, mx_b = kNegInf;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = nt * 8 + 2 * t4 + e;
        float bias_a = 0.0f, bias_b = 0.0f;
        if (has_bias) {
          const int2 key = keys[col];
          bias_a = b_s[row_a * ld + key.x] + b_s[row_a * ld + key.y];
          bias_b = b_s[row_b * ld + key.x] + b_s[row_b * ld + key.y];
        }
        float va = fmaf(sc[nt][e], s_mul, bias_a), vb = fmaf(sc[nt][2 + e], s_mul, bias_b);
        if constexpr (kMasked) {
          const bool visible = kb + col < tokens;
          va = visible ? va : kNegInf;
          vb = visible ? vb : kNegInf;
        }
        sc[nt][e] = va;
        sc[nt][2 + e] = vb;
        mx_a = fmaxf(mx_a, va);
        mx_b = fmaxf(mx_b, vb);
      }
    }
    mx_a = quad_max(mx_a);
    mx_b = quad_max(mx_b);
    const float base_a = fmaxf(m_a, mx_a), base_b = fmaxf(m_b, mx_b);  // finite: every tile has a visible key
    const float alpha_a = exp2_approx(m_a - base_a), alpha_b = exp2_approx(m_b - base_b);
    m_a = base_a;
    m_b = base_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pa = exp2_approx(sc[nt][e] - base_a), pb = exp2_approx(sc[nt][2 + e] - base_b);
        sc[nt][e] = pa;
        sc[nt][2 + e] = pb;
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
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      uint32_t pa[4];
      pa[0] = pack2<T>(sc[2 * kc][0], sc[2 * kc][1]);
      pa[1] = pack2<T>(sc[2 * kc][2], sc[2 * kc][3]);
      pa[2] = pack2<T>(sc[2 * kc + 1][0], sc[2 * kc + 1][1]);
      pa[3] = pack2<T>(sc[2 * kc + 1][2], sc[2 * kc + 1][3]);
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

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();  // tile t (and its key table) is in shared memory, everyone has left tile t - 1
    if (t + 1 < n_tiles) load_tile(t + 1);
    cp_async_commit();
    const int kb = t * kKeyTile;
    if (warp_active) {
      const uint16_t* k_s = kv_s + (t % kMmaStages) * kStageElems;
      const int2* keys = key_s + (t % kMmaStages) * kKeyTile;
      if (kb + kKeyTile <= tokens) {
        tile_step(std::false_type{}, k_s, keys, kb);
      } else {
        tile_step(std::true_type{}, k_s, keys, kb);
      }
    }
  }
  cp_async_wait<0>();
  if (!warp_active) return;

  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(s) * tokens + i0) * p.out_ld + h * hd;
  const float la = quad_sum(l_a), lb = quad_sum(l_b);
  const float mul_a = 1.0f / la, mul_b = 1.0f / lb;
  const bool vec_out = p.vec_out != 0;
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) {
    const int col = dt * 8 + 2 * t4;
    if (col >= hd) continue;
    if (vec_out) {
      if (row_a < rows) {
        *reinterpret_cast<uint32_t*>(out + row_a * p.out_ld + col) = pack2<T>(o[dt][0] * mul_a, o[dt][1] * mul_a);
      }
      if (row_b < rows) {
        *reinterpret_cast<uint32_t*>(out + row_b * p.out_ld + col) = pack2<T>(o[dt][2] * mul_b, o[dt][3] * mul_b);
      }
      continue;
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (col + e >= hd) continue;
      if (row_a < rows) out[row_a * p.out_ld + col + e] = from_f32<T>(o[dt][e] * mul_a);
      if (row_b < rows) out[row_b * p.out_ld + col + e] = from_f32<T>(o[dt][2 + e] * mul_b);
    }
  }
}

// ---- launches

Params params_of(const RelPosAttentionArgs& a) {
  Params p{};
  p.qkv = a.qkv;
  p.qkv_ld = a.qkv_ld;
  p.out = a.out;
  p.out_ld = a.out_ld;
  p.bias = a.rel_pos_h != nullptr ? a.bias : nullptr;
  p.height = static_cast<int>(a.height);
  p.width = static_cast<int>(a.width);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.scale = a.scale;
  p.vec_q = aligned16(a.qkv) && a.qkv_ld % 8 == 0 && a.head_dim % 8 == 0;
  p.vec_out = reinterpret_cast<uintptr_t>(a.out) % 4 == 0 && a.out_ld % 2 == 0 && a.head_dim % 2 == 0;
  return p;
}

template <typename T>
Status launch_bias(const RelPosAttentionArgs& a, cudaStream_t stream) {
  const int64_t tokens = a.height * a.width;
  const dim3 grid(static_cast<unsigned>((tokens + kBiasRows - 1) / kBiasRows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.sequences));
  const size_t smem = bias_smem_bytes(static_cast<int>(a.height), static_cast<int>(a.width), static_cast<int>(a.head_dim));
  CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(rel_pos_bias_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  rel_pos_bias_kernel<T><<<grid, kBiasThreads, smem, stream>>>(
      static_cast<const T*>(a.qkv), a.qkv_ld, a.rel_pos_h, a.rel_pos_w, static_cast<int>(a.height),
      static_cast<int>(a.width), static_cast<int>(a.heads), static_cast<int>(a.head_dim), a.bias);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T, int kD>
Status launch_simt(const RelPosAttentionArgs& a, cudaStream_t stream) {
  const size_t smem = simt_smem_bytes<kD>(static_cast<int>(a.height + a.width));
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(rel_pos_attention_simt_kernel<T, kD>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t tokens = a.height * a.width;
  const dim3 grid(static_cast<unsigned>((tokens + kSimtRows - 1) / kSimtRows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.sequences));
  rel_pos_attention_simt_kernel<T, kD><<<grid, kSimtRows, smem, stream>>>(params_of(a));
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T>
Status launch_simt_for_head_dim(const RelPosAttentionArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 16) return launch_simt<T, 16>(a, stream);
  if (a.head_dim <= 32) return launch_simt<T, 32>(a, stream);
  if (a.head_dim <= 64) return launch_simt<T, 64>(a, stream);
  if (a.head_dim <= 80) return launch_simt<T, 80>(a, stream);
  return launch_simt<T, 128>(a, stream);
}

template <typename T, int kDp>
Status launch_mma(const RelPosAttentionArgs& a, cudaStream_t stream) {
  const size_t smem = mma_smem_bytes<kDp>(static_cast<int>(a.height + a.width));
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(rel_pos_attention_mma_kernel<T, kDp>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t tokens = a.height * a.width;
  const dim3 grid(static_cast<unsigned>((tokens + kMmaRows - 1) / kMmaRows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.sequences));
  rel_pos_attention_mma_kernel<T, kDp><<<grid, kMmaThreads, smem, stream>>>(params_of(a));
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T>
Status launch_mma_for_head_dim(const RelPosAttentionArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 16) return launch_mma<T, 16>(a, stream);
  if (a.head_dim <= 32) return launch_mma<T, 32>(a, stream);
  if (a.head_dim <= 64) return launch_mma<T, 64>(a, stream);
  if (a.head_dim <= 80) return launch_mma<T, 80>(a, stream);
  return launch_mma<T, 128>(a, stream);
}

Status check(const RelPosAttentionArgs& a) {
  RETURN_IF_ERROR(rel_pos_attention_validate(a));
  if (a.head_dim > kHeadDimMax) {
    return unimplemented("rel_pos_attention_cuda: head_dim " + std::to_string(a.head_dim) + " > 128");
  }
  if (a.rel_pos_h != nullptr && a.bias == nullptr) return invalid_argument("rel_pos_attention_cuda: null bias scratch");
  if (a.rel_pos_h != nullptr && bias_smem_bytes(static_cast<int>(a.height), static_cast<int>(a.width),
                                                 static_cast<int>(a.head_dim)) > 200 * 1024) {
    return unimplemented("rel_pos_attention_cuda: relative position tables too large for shared memory");
  }
  if (a.sequences > 65535 || a.heads > 65535) {
    return unimplemented("rel_pos_attention_cuda: more than 65535 sequences or heads");
  }
  return ok_status();
}

template <typename T>
Status run(const RelPosAttentionArgs& a, bool simt, cudaStream_t stream) {
  if (a.rel_pos_h != nullptr) RETURN_IF_ERROR(launch_bias<T>(a, stream));
  if constexpr (std::is_same_v<T, float>) {
    return launch_simt_for_head_dim<T>(a, stream);
  } else {
    return simt ? launch_simt_for_head_dim<T>(a, stream) : launch_mma_for_head_dim<T>(a, stream);
  }
}

Status dispatch(const RelPosAttentionArgs& a, bool simt, cudaStream_t stream) {
  RETURN_IF_ERROR(check(a));
  if (a.sequences == 0) return ok_status();
  switch (a.dtype) {
    case DType::kF16: return run<__half>(a, simt, stream);
    case DType::kBF16: return run<__nv_bfloat16>(a, simt, stream);
    default: return run<float>(a, simt, stream);
  }
}

}  // namespace

Status rel_pos_attention_cuda(const RelPosAttentionArgs& a, cudaStream_t stream) {
  return dispatch(a, /*simt=*/false, stream);
}

Status rel_pos_attention_cuda_simt(const RelPosAttentionArgs& a, cudaStream_t stream) {
  return dispatch(a, /*simt=*/true, stream);
}

}  // namespace mmserve::kernels
