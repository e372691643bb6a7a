// Attention over separate K/V on the GPU (contract in attention_kv.h, paths in attention_kv_cuda.h): the
// host dispatch, the flash-decoding kernel of a decode step (q_len == 1) with the combine kernel of its
// split partials, and the CUDA-core tiled kernel (q_len > 1 in f32 or with head_dim > 128). The tensor-core
// kernel is in attention_kv_mma.cu.
//
// Decode kernel (q_len == 1, memory bound: every visible K/V byte is read once). One CTA of 128 threads per
// (KV split, head, batch row). A key's row of head_dim elements is read by a group of `group` lanes, each
// holding kVec consecutive elements (one 16-byte load: 8 f16/bf16, 16 FP8/INT8, 4 f32; f32 rows of more
// than 128 dims take two loads per lane), so a warp reads 32 / group keys per load instruction and each
// group of lanes walks its own keys, kUnroll at a time: the K and V loads of those keys are all issued
// before any is used (2 * kUnroll 16-byte loads in flight per thread), straight from global memory into
// registers. FP8/INT8 are widened in registers (the scales are folded in: k_scale into the query, v_scale
// into the output). Each group keeps its online-softmax state (max, sum, kVec output dims per lane) in
// registers; the score of a key is its group's partial dot products summed by shuffles. At the end the
// groups' states meet in shared memory and are merged to the CTA's result.
// Split KV: split s covers keys [s * chunk, (s + 1) * chunk); with one split the CTA writes the output,
// otherwise (max, sum, unnormalised output times v_scale) to the workspace, and the combine kernel
// rescales the partials to the common max. The split count is fixed on the host from batch, heads and
// kv_len (never from kv_lengths, which only the device reads), so a captured graph stays valid as lengths
// change; keys past a row's length are never read (a split past it does nothing but write an empty
// partial).
//
// Tiled kernel (q_len > 1): one CTA of 128 threads per (batch row, head, tile of kRows query rows). Each
// step stages 64 keys of K and V in shared memory as f32 (dequantised on the way, 16-byte loads when
// the layout allows), computes the tile's scores thread-per-(row, key) against f32 queries pre-scaled
// by scale * log2(e) * k_scale, updates the online softmax (one warp per row) and accumulates O in
// shared memory thread-per-(row, dim). Keys past a row's visible prefix are never read: the tile stops at
// the last visible key of the CTA's last row, and what a row must not see is masked to -inf.
// Tests: attention_kv_cuda_test.cpp; bench: attention_kv_cuda_bench.cpp.
#include <algorithm>
#include <limits>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_cuda.h"
#include "kernels/attention/attention_kv_cuda_common.cuh"

namespace mmserve::kernels {
namespace {

using namespace attention_kv_detail;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;  // query rows per CTA of the tiled kernel
constexpr int64_t kHeadDimMax = 256;

// Decode kernel: threads per CTA, keys per lane group per step, and the split plan's bounds.
constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kUnroll = 4;
// CTAs the split aims for: about four per SM of an H200 (132 SMs), enough loads in flight to approach the
// HBM bandwidth at batch 1.
constexpr int64_t kDecodeCtasTarget = 512;
// At most kDecodeCtasTarget splits (split_plan), whose weights the combine kernel keeps in shared memory.
constexpr int kMaxSplits = static_cast<int>(kDecodeCtasTarget);
// Keys a split covers at least: a CTA reads 64 (16-bit K/V, head_dim 64) to 128 keys per step, so a split
// is one or two steps at least. A KV range of at most kDecodeNoSplitMax keys is not split at all (one
// launch, no combine: at most eight steps of one CTA per (batch row, head)). That is the decoder's
// self-attention cache (Whisper: 448 positions, mostly far from full), where a split would add a combine
// launch per layer and CTAs past the row's length that find nothing to read.
constexpr int64_t kDecodeMinChunk = 128;
constexpr int64_t kDecodeNoSplitMax = 512;
// Shared floats of the groups' output states: groups * head_dim <= kDecodeThreads * 16 (the group is the
// smallest power of two of lanes covering head_dim, so groups * head_dim <= 32 * kDecodeWarps * kVec for
// group < 32, and 4 * 256 with 32 lanes).
constexpr int kDecodeStateFloats = kDecodeThreads * 16;

// ------------------------------------------------------------------------------------ decode kernel

struct DecodeParams {
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
  float* partial;  // [batch, heads, splits, head_dim + 2] when splits > 1
  int kv_len, heads, head_dim, splits, chunk;
  int group;  // lanes per key: a power of two <= 32
  float scale_log2;
};

// 16 bytes of stored K/V elements -> f32 (before the scale).
__device__ __forceinline__ void unpack_f32(const uint4& w, float (&f)[4]) {
  f[0] = __uint_as_float(w.x);
  f[1] = __uint_as_float(w.y);
  f[2] = __uint_as_float(w.z);
  f[3] = __uint_as_float(w.w);
}

__device__ __forceinline__ void unpack_f32(const uint4& w, float (&f)[8], __half) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &words[i], 4);
    const float2 x = __half22float2(h);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

__device__ __forceinline__ void unpack_f32(const uint4& w, float (&f)[8], __nv_bfloat16) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 -> f32 is the 16 bits moved up
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void unpack_f32(const uint4& w, float (&f)[16], __nv_fp8_e4m3) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {  // cvt.rn.f16x2.e4m3x2: two at a time, exact
      const __half2_raw raw =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>((words[i] >> (16 * pair)) & 0xffffu), __NV_E4M3);
      const float2 x = __half22float2(__half2(raw));
      f[4 * i + 2 * pair] = x.x;
      f[4 * i + 2 * pair + 1] = x.y;
    }
  }
}

__device__ __forceinline__ void unpack_f32(const uint4& w, float (&f)[16], int8_t) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // x + 128 as the low mantissa byte of 2^23 (0x4B0000uu), then minus 2^23 + 128: exact, two
    // instructions per element instead of a slow integer-to-float conversion.
    const uint32_t biased = words[i] ^ 0x80808080u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      f[4 * i + j] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | j)) - 8388736.0f;
    }
  }
}

template <typename KT, int kVec>
__device__ __forceinline__ void unpack(const uint4& w, float (&f)[kVec]) {
  if constexpr (sizeof(KT) == 4) {
    unpack_f32(w, f);
  } else {
    unpack_f32(w, f, KT{});
  }
}

// The kVec elements of a key row from dimension dim0 into w (zeros where not loaded). kVecLoad: one 16-byte
// load (the whole chunk is inside head_dim, the address 16-byte aligned); otherwise element by element.
template <typename KT, bool kVecLoad>
__device__ __forceinline__ uint4 load_chunk(const KT* row, int dim0, int d_head) {
  constexpr int kVec = 16 / sizeof(KT);
  uint4 w = make_uint4(0, 0, 0, 0);
  if constexpr (kVecLoad) {
    if (dim0 < d_head) w = __ldg(reinterpret_cast<const uint4*>(row + dim0));
  } else {
    KT e[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      if (dim0 + i < d_head) {
        e[i] = row[dim0 + i];
      } else {
        memset(&e[i], 0, sizeof(KT));
      }
    }
    memcpy(&w, e, 16);
  }
  return w;
}

// grid = (splits, heads, batch), block = kDecodeThreads.
template <typename T, typename KT, bool kVecLoad>
__global__ void __launch_bounds__(kDecodeThreads) attention_kv_decode_kernel(const DecodeParams p) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(KT));
  constexpr int kChunks = sizeof(KT) == 4 ? 2 : 1;  // f32 rows past 128 dims take two loads per lane
  __shared__ float o_s[kDecodeStateFloats];         // [groups][head_dim]
  __shared__ float m_s[kDecodeThreads], l_s[kDecodeThreads];

  const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int d_head = p.head_dim, group = p.group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gl = lane & (group - 1);  // lane within the group
  const int groups_per_warp = 32 / group;
  const int n_groups = kDecodeWarps * groups_per_warp;
  const int gid = warp * groups_per_warp + lane / group;
  const int L = kv_length(p.kv_lengths, b, p.kv_len);
  const int key_begin = split * p.chunk;
  const int key_end = min(key_begin + p.chunk, L);
  const bool any = key_end > key_begin;
  const bool compressed = p.k_scale != nullptr;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const float k_mul = compressed && any ? p.k_scale[bh] : 1.0f;
  const float v_mul = compressed && any ? p.v_scale[bh] : 1.0f;

  // This lane's dimensions: chunk c covers [dim0(c), dim0(c) + kVec).
  int dim0[kChunks];
  float qf[kChunks][kVec], acc[kChunks][kVec];
  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(b) * p.q_ld + static_cast<int64_t>(h) * d_head;
  const float q_mul = p.scale_log2 * k_mul;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    dim0[c] = (c * group + gl) * kVec;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int d = dim0[c] + e;
      qf[c][e] = any && d < d_head ? to_f32(q[d]) * q_mul : 0.0f;
      acc[c][e] = 0.0f;
    }
  }
  float m = -INFINITY, l = 0.0f;

  const int64_t kv_base = static_cast<int64_t>(b) * p.kv_batch_stride * p.kv_ld + static_cast<int64_t>(h) * d_head;
  const KT* k = static_cast<const KT*>(p.k) + kv_base;
  const KT* v = static_cast<const KT*>(p.v) + kv_base;
  const int step = n_groups * kUnroll;
  // Uniform over the CTA (the shuffles below need every lane).
  for (int kb = key_begin; kb < key_end; kb += step) {
    uint4 kw[kUnroll][kChunks], vw[kUnroll][kChunks];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = kb + u * n_groups + gid;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        kw[u][c] = make_uint4(0, 0, 0, 0);
        vw[u][c] = make_uint4(0, 0, 0, 0);
      }
      if (j < key_end) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          kw[u][c] = load_chunk<KT, kVecLoad>(k + j * p.kv_ld, dim0[c], d_head);
          vw[u][c] = load_chunk<KT, kVecLoad>(v + j * p.kv_ld, dim0[c], d_head);
        }
      }
    }
    float s[kUnroll];
    float m_step = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float kf[kVec];
        unpack<KT, kVec>(kw[u][c], kf);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot = fmaf(qf[c][e], kf[e], dot);
      }
      for (int o = group >> 1; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      s[u] = kb + u * n_groups + gid < key_end ? dot : -INFINITY;
      m_step = fmaxf(m_step, s[u]);
    }
    const float m_new = fmaxf(m, m_step);
    // A group with nothing visible yet keeps max -inf: exponentiate against 0 (no -inf - -inf NaN).
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m - base);
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[c][e] *= alpha;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float pu = exp2f(s[u] - base);
      l += pu;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float vf[kVec];
        unpack<KT, kVec>(vw[u][c], vf);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[c][e] = fmaf(pu, vf[e], acc[c][e]);
      }
    }
    m = m_new;
  }

  // Merge the groups' states: each group's (max, sum) and output dims into shared memory, then one thread
  // per dimension rescales them to the common max.
  if (gl == 0) {
    m_s[gid] = m;
    l_s[gid] = l;
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int d = dim0[c] + e;
      if (d < d_head) o_s[gid * d_head + d] = acc[c][e];
    }
  }
  __syncthreads();
  float m_all = -INFINITY;
  for (int g = 0; g < n_groups; ++g) m_all = fmaxf(m_all, m_s[g]);
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(b) * p.out_ld + static_cast<int64_t>(h) * d_head;
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    if (m_all != -INFINITY) {
      for (int g = 0; g < n_groups; ++g) {
        const float w = exp2f(m_s[g] - m_all);
        num = fmaf(w, o_s[g * d_head + d], num);
        den = fmaf(w, l_s[g], den);
      }
    }
    if (p.splits == 1) {
      out[d] = from_f32<T>(den > 0.0f ? num * (v_mul / den) : 0.0f);
    } else {
      float* part = p.partial + (bh * p.splits + split) * (d_head + 2);
      part[2 + d] = num * v_mul;
      if (d == 0) {
        part[0] = m_all;
        part[1] = den;
      }
    }
  }
}

// grid = (heads, batch), block = kThreads: out[b, 0, h, :] from the splits' partials. The threads stride
// over the splits for the common max and the splits' weights (in shared memory) and the sum, so that those
// loads are in flight together instead of one dependent load per split (a batch-1 step has 12 splits);
// then one thread per dimension sums the weighted partial outputs.
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_kv_combine_kernel(const DecodeParams p) {
  __shared__ float w_s[kMaxSplits];
  __shared__ float red_s[kWarps];
  const int h = blockIdx.x, b = blockIdx.y;
  const int d_head = p.head_dim, stride = d_head + 2;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* part = p.partial + (static_cast<int64_t>(b) * p.heads + h) * p.splits * stride;
  float m = -INFINITY;
  for (int s = threadIdx.x; s < p.splits; s += blockDim.x) m = fmaxf(m, part[s * stride]);
  m = warp_max(m);
  if (lane == 0) red_s[warp] = m;
  __syncthreads();
  m = red_s[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red_s[w]);
  float den = 0.0f;
  for (int s = threadIdx.x; s < p.splits; s += blockDim.x) {
    const float ms = part[s * stride];
    // A split that saw no key (max -inf) weighs 0, and so does everything when no split saw one.
    const float w = m == -INFINITY || ms == -INFINITY ? 0.0f : exp2f(ms - m);
    w_s[s] = w;
    den = fmaf(w, part[s * stride + 1], den);
  }
  den = warp_sum(den);
  __syncthreads();  // every thread has read red_s (the max) before it holds the sums
  if (lane == 0) red_s[warp] = den;
  __syncthreads();
  den = 0.0f;
  for (int w = 0; w < kWarps; ++w) den += red_s[w];
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(b) * p.out_ld + static_cast<int64_t>(h) * d_head;
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
    float num = 0.0f;
#pragma unroll 4
    for (int s = 0; s < p.splits; ++s) num = fmaf(w_s[s], part[s * stride + 2 + d], num);
    out[d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

// ------------------------------------------------------------------------------------ tiled kernel (q_len > 1)

struct TiledParams {
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
  int causal, vec_kv;
};

extern __shared__ __align__(16) unsigned char tiled_smem[];

// Stages keys [0, nk) of a K/V tile as f32 (K rows ldk apart, V rows d_head apart). The 16-byte path
// issues kBatch loads of K and of V per thread before converting any of them.
template <typename KT>
__device__ __forceinline__ void load_kv_tile(float* k_s, float* v_s, const KT* k, const KT* v, int64_t ld, int nk,
                                             int d_head, int ldk, bool vec) {
  if (vec) {
    constexpr int kVec = 16 / sizeof(KT);
    constexpr int kBatch = 4;
    const int chunks = d_head / kVec;
    const int total = nk * chunks;
    for (int base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
      uint4 kw[kBatch], vw[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = base + u * blockDim.x;
        if (idx < total) {
          const int64_t offset = (idx / chunks) * ld + (idx % chunks) * kVec;
          kw[u] = __ldg(reinterpret_cast<const uint4*>(k + offset));
          vw[u] = __ldg(reinterpret_cast<const uint4*>(v + offset));
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = base + u * blockDim.x;
        if (idx >= total) break;
        const int j = idx / chunks, c = (idx % chunks) * kVec;
        KT ke[kVec], ve[kVec];
        memcpy(ke, &kw[u], 16);
        memcpy(ve, &vw[u], 16);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          k_s[j * ldk + c + e] = kv_to_f32(ke[e]);
          v_s[j * d_head + c + e] = kv_to_f32(ve[e]);
        }
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < nk * d_head; idx += blockDim.x) {
      const int j = idx / d_head, d = idx % d_head;
      k_s[j * ldk + d] = kv_to_f32(k[j * ld + d]);
      v_s[j * d_head + d] = kv_to_f32(v[j * ld + d]);
    }
  }
}

// grid = (q_tiles, heads, batch), block = kThreads, dynamic shared memory = tiled_smem_bytes.
template <typename T, typename KT>
__global__ void __launch_bounds__(kThreads) attention_kv_tiled_kernel(const TiledParams p) {
  const int d_head = p.head_dim;
  // K rows are ldk apart: d_head + 1 keeps the thread-per-key reads free of bank conflicts.
  const int ldk = d_head + 1;
  float* q_s = reinterpret_cast<float*>(tiled_smem);  // [kRows][d_head]
  float* k_s = q_s + kRows * d_head;                  // [kKeyTile][ldk]
  float* v_s = k_s + kKeyTile * ldk;                  // [kKeyTile][d_head]
  float* s_s = v_s + kKeyTile * d_head;               // [kRows][kKeyTile]
  float* o_s = s_s + kRows * kKeyTile;                // [kRows][d_head]
  float* m_s = o_s + kRows * d_head;                  // [kRows]
  float* l_s = m_s + kRows;                           // [kRows]
  float* alpha_s = l_s + kRows;                       // [kRows]

  const int tile = blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int L = kv_length(p.kv_lengths, b, p.kv_len);
  const int i0 = tile * kRows;
  const int rows = min(kRows, p.q_len - i0);
  const bool causal = p.causal != 0;
  const int n_cta = row_visible(i0 + rows - 1, p.q_len, L, causal);
  const bool compressed = p.k_scale != nullptr;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const float k_mul = compressed && n_cta > 0 ? p.k_scale[bh] : 1.0f;
  const float v_mul = compressed && n_cta > 0 ? p.v_scale[bh] : 1.0f;

  const T* q =
      static_cast<const T*>(p.q) + (static_cast<int64_t>(b) * p.q_len + i0) * p.q_ld + static_cast<int64_t>(h) * d_head;
  const float q_mul = p.scale_log2 * k_mul;
  for (int idx = threadIdx.x; idx < kRows * d_head; idx += blockDim.x) {
    const int r = idx / d_head, d = idx % d_head;
    q_s[idx] = r < rows ? to_f32(q[r * p.q_ld + d]) * q_mul : 0.0f;
    o_s[idx] = 0.0f;
  }
  for (int r = threadIdx.x; r < kRows; r += blockDim.x) {
    m_s[r] = -INFINITY;
    l_s[r] = 0.0f;
  }
  __syncthreads();

  const int64_t kv_base = static_cast<int64_t>(b) * p.kv_batch_stride * p.kv_ld + static_cast<int64_t>(h) * d_head;
  const KT* k = static_cast<const KT*>(p.k) + kv_base;
  const KT* v = static_cast<const KT*>(p.v) + kv_base;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int kb = 0; kb < n_cta; kb += kKeyTile) {
    const int nk = min(kKeyTile, n_cta - kb);
    load_kv_tile<KT>(k_s, v_s, k + kb * p.kv_ld, v + kb * p.kv_ld, p.kv_ld, nk, d_head, ldk, p.vec_kv != 0);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRows * kKeyTile; idx += blockDim.x) {
      const int r = idx / kKeyTile, j = idx % kKeyTile;
      float s = -INFINITY;
      if (r < rows && j < nk && kb + j < row_visible(i0 + r, p.q_len, L, causal)) {
        const float* qr = q_s + r * d_head;
        const float* kr = k_s + j * ldk;
        float dot = 0.0f;
        for (int d = 0; d < d_head; ++d) dot = fmaf(qr[d], kr[d], dot);
        s = dot;
      }
      s_s[idx] = s;
    }
    __syncthreads();
    for (int r = warp; r < kRows; r += kWarps) {
      const float s0 = s_s[r * kKeyTile + lane], s1 = s_s[r * kKeyTile + lane + 32];
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
      // A row with nothing visible yet keeps max -inf: exponentiate against 0 (no -inf - -inf NaN).
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float p0 = exp2f(s0 - base), p1 = exp2f(s1 - base);
      s_s[r * kKeyTile + lane] = p0;
      s_s[r * kKeyTile + lane + 32] = p1;
      const float sum = warp_sum(p0 + p1);
      if (lane == 0) {
        const float alpha = exp2f(m_old - base);
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
        alpha_s[r] = alpha;
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRows * d_head; idx += blockDim.x) {
      const int r = idx / d_head, d = idx % d_head;
      const float* pr = s_s + r * kKeyTile;
      float acc = o_s[idx] * alpha_s[r];
      for (int j = 0; j < nk; ++j) acc = fmaf(pr[j], v_s[j * d_head + d], acc);
      o_s[idx] = acc;
    }
    __syncthreads();
  }

  T* out =
      static_cast<T*>(p.out) + (static_cast<int64_t>(b) * p.q_len + i0) * p.out_ld + static_cast<int64_t>(h) * d_head;
  for (int idx = threadIdx.x; idx < rows * d_head; idx += blockDim.x) {
    const int r = idx / d_head, d = idx % d_head;
    const float l = l_s[r];
    out[r * p.out_ld + d] = from_f32<T>(l > 0.0f ? o_s[idx] * (v_mul / l) : 0.0f);
  }
}

int64_t tiled_smem_bytes(int64_t head_dim) {
  return (kRows * head_dim + kKeyTile * (head_dim + 1) + kKeyTile * head_dim + kRows * kKeyTile + kRows * head_dim +
          3 * kRows) *
         4;
}

// ------------------------------------------------------------------------------------ host side

// The split-KV plan of a decode step: splits and keys per split.
struct SplitPlan {
  int64_t splits = 1;
  int64_t chunk = 0;
};

SplitPlan split_plan(const AttentionKvArgs& a) {
  SplitPlan plan;
  plan.chunk = std::max<int64_t>(a.kv_len, 1);
  if (a.q_len != 1 || a.kv_len <= kDecodeNoSplitMax || a.batch * a.heads <= 0) return plan;
  const int64_t wanted = (kDecodeCtasTarget + a.batch * a.heads - 1) / (a.batch * a.heads);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, (a.kv_len + kDecodeMinChunk - 1) / kDecodeMinChunk);
  if (splits == 1) return plan;
  // Chunks of whole 64-key tiles, so that the splits' steps line up.
  plan.chunk = ((a.kv_len + splits - 1) / splits + kKeyTile - 1) / kKeyTile * kKeyTile;
  plan.splits = (a.kv_len + plan.chunk - 1) / plan.chunk;
  if (plan.splits == 1) plan.chunk = a.kv_len;
  return plan;
}

// Lanes per key of the decode kernel: the smallest power of two whose 16-byte chunks cover head_dim (at
// most 32: f32 rows of more than 128 dims take two chunks per lane).
int decode_group(int64_t head_dim, size_t kv_elem) {
  const int64_t vec = 16 / static_cast<int64_t>(kv_elem);
  const int64_t need = (head_dim + vec - 1) / vec;
  int group = 1;
  while (group < need && group < 32) group *= 2;
  return group;
}

std::string shape_string(const AttentionKvArgs& a) {
  static const char* kStorage[] = {"same", "fp8_e4m3", "int8"};
  return std::string(dtype_name(a.dtype)) + " kv=" + kStorage[static_cast<int>(a.storage)] +
         " batch=" + std::to_string(a.batch) + " q_len=" + std::to_string(a.q_len) +
         " kv_len=" + std::to_string(a.kv_len) + " heads=" + std::to_string(a.heads) +
         " head_dim=" + std::to_string(a.head_dim);
}

// Why the CUDA kernels do not take these (valid) arguments, or "" when they do.
std::string unsupported_reason(const AttentionKvArgs& a) {
  if (a.head_dim > kHeadDimMax) return "head_dim > " + std::to_string(kHeadDimMax);
  if ((a.kv_heads != 0 && a.kv_heads != a.heads) || a.window != 0) {
    return "grouped-query attention and sliding windows are CPU-only so far";
  }
  if (a.batch > 65535 || a.heads > 65535) return "batch and heads must be <= 65535 (grid dimensions)";
  if (a.q_len > (1 << 24) || a.kv_len > (1 << 24) || a.kv_batch_stride > (int64_t{1} << 40)) {
    return "q_len / kv_len out of range";
  }
  return "";
}

template <typename T, typename KT>
Status launch_decode(const AttentionKvArgs& a, cudaStream_t stream) {
  const SplitPlan plan = split_plan(a);
  DecodeParams p{};
  p.q = a.q;
  p.q_ld = a.q_ld;
  p.k = a.k;
  p.v = a.v;
  p.kv_ld = a.kv_ld;
  p.kv_batch_stride = attention_kv_batch_rows(a);
  p.out = a.out;
  p.out_ld = a.out_ld;
  p.k_scale = a.storage == KvStorage::kSame ? nullptr : a.k_scale;
  p.v_scale = a.storage == KvStorage::kSame ? nullptr : a.v_scale;
  p.kv_lengths = a.kv_lengths;
  p.partial = static_cast<float*>(a.workspace);
  p.kv_len = static_cast<int>(a.kv_len);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.splits = static_cast<int>(plan.splits);
  p.chunk = static_cast<int>(plan.chunk);
  p.group = decode_group(a.head_dim, sizeof(KT));
  p.scale_log2 = a.scale * kLog2e;
  if (kDecodeThreads / p.group * a.head_dim > kDecodeStateFloats || plan.splits > kMaxSplits) {
    // Neither can happen (head_dim <= 256; split_plan makes at most kDecodeCtasTarget splits).
    return internal_error("attention_kv_cuda: decode state of " + shape_string(a) + " exceeds shared memory");
  }
  constexpr int64_t kVec = 16 / sizeof(KT);
  const bool vec = aligned16(a.k) && aligned16(a.v) && a.kv_ld % kVec == 0 && a.head_dim % kVec == 0;
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  if (vec) {
    attention_kv_decode_kernel<T, KT, true><<<grid, kDecodeThreads, 0, stream>>>(p);
  } else {
    attention_kv_decode_kernel<T, KT, false><<<grid, kDecodeThreads, 0, stream>>>(p);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  if (plan.splits > 1) {
    attention_kv_combine_kernel<T>
        <<<dim3(static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch)), kThreads, 0, stream>>>(p);
    CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return ok_status();
}

template <typename T, typename KT>
Status launch_tiled(const AttentionKvArgs& a, cudaStream_t stream) {
  TiledParams p{};
  p.q = a.q;
  p.q_ld = a.q_ld;
  p.k = a.k;
  p.v = a.v;
  p.kv_ld = a.kv_ld;
  p.kv_batch_stride = attention_kv_batch_rows(a);
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
  constexpr int64_t kVec = 16 / sizeof(KT);
  p.vec_kv = aligned16(a.k) && aligned16(a.v) && a.kv_ld % kVec == 0 && a.head_dim % kVec == 0;
  const int64_t smem = tiled_smem_bytes(a.head_dim);
  if (smem > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_kv_tiled_kernel<T, KT>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int64_t q_tiles = (a.q_len + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(q_tiles), static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  attention_kv_tiled_kernel<T, KT><<<grid, kThreads, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T, typename KT>
Status launch_path(const AttentionKvArgs& a, cudaStream_t stream) {
  if (a.q_len == 1) return launch_decode<T, KT>(a, stream);
  return launch_tiled<T, KT>(a, stream);
}

template <typename T>
Status launch_storage(const AttentionKvArgs& a, cudaStream_t stream) {
  switch (a.storage) {
    case KvStorage::kFp8E4M3: return launch_path<T, __nv_fp8_e4m3>(a, stream);
    case KvStorage::kInt8: return launch_path<T, int8_t>(a, stream);
    default: return launch_path<T, T>(a, stream);
  }
}

}  // namespace

size_t attention_kv_cuda_workspace_bytes(const AttentionKvArgs& a) {
  if (a.batch <= 0 || a.heads <= 0 || a.head_dim <= 0) return 0;
  const SplitPlan plan = split_plan(a);
  if (plan.splits <= 1) return 0;
  return static_cast<size_t>(a.batch * a.heads * plan.splits * (a.head_dim + 2)) * sizeof(float);
}

bool attention_kv_cuda_supported(const AttentionKvArgs& a) {
  return attention_kv_validate(a).ok() && unsupported_reason(a).empty();
}

Status attention_kv_cuda(const AttentionKvArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(attention_kv_validate(a));
  if (a.batch == 0 || a.q_len == 0) return ok_status();
  const std::string reason = unsupported_reason(a);
  if (!reason.empty()) return unimplemented("attention_kv_cuda: " + shape_string(a) + ": " + reason);
  const size_t need = attention_kv_cuda_workspace_bytes(a);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need || !aligned16(a.workspace))) {
    return invalid_argument("attention_kv_cuda: " + shape_string(a) + " needs a 16-byte aligned workspace of " +
                            std::to_string(need) + " bytes, got " + std::to_string(a.workspace_bytes));
  }
  const bool sixteen_bit = a.dtype == DType::kF16 || a.dtype == DType::kBF16;
  if (sixteen_bit && a.q_len > 1 && a.head_dim <= kMmaHeadDimMax) return launch_attention_kv_mma(a, stream);
  switch (a.dtype) {
    case DType::kF16: return launch_storage<__half>(a, stream);
    case DType::kBF16: return launch_storage<__nv_bfloat16>(a, stream);
    default: return launch_storage<float>(a, stream);
  }
}

}  // namespace mmserve::kernels
