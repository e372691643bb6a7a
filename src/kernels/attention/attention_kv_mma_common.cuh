// What the two tensor-core attention kernels share (attention_kv_mma.cu: mma.sync, any head_dim <= 128 and K/V
// storage; attention_kv_wgmma.cu: Hopper wgmma for the encoder's head_dim 64): the m-tile constants, the mma.sync
// wrappers (mma_ptx.cuh), the cp.async ring's primitives, the quad reductions of the online softmax, the kernel
// parameters, and the row loader into padded shared rows. attention_kv_mma.cu's header comment describes the
// algorithm both follow.
#pragma once

#include <cstdint>

#include "kernels/attention/attention_kv_cuda_common.cuh"
#include "kernels/attention/mma_ptx.cuh"

namespace mmserve::kernels::attention_kv_detail {

constexpr int kRowsPerWarp = 16;  // rows of one m-tile; a warp owns one or two
// From this many query rows on, a warp takes two m-tiles (the encoder's 1500; a 448-token prompt keeps
// one, for enough CTAs).
constexpr int64_t kLongQueries = 512;
constexpr int kSmemPad = 8;  // elements after each shared row: fragment reads hit 32 distinct banks

extern __shared__ __align__(16) unsigned char mma_smem[];

// One value (an exact one: a stored K/V element) as the 16 bits of T.
template <typename T>
__device__ __forceinline__ uint16_t bits_of(float x) {
  const T v = from_f32<T>(x);
  uint16_t u;
  memcpy(&u, &v, 2);
  return u;
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

// The fields both launchers fill alike; each sets the rest (scales, vectorised paths) itself.
inline MmaParams mma_params(const AttentionKvArgs& a) {
  MmaParams p{};
  p.q = a.q;
  p.q_ld = a.q_ld;
  p.k = a.k;
  p.v = a.v;
  p.kv_ld = a.kv_ld;
  p.kv_batch_stride = attention_kv_batch_rows(a);
  p.out = a.out;
  p.out_ld = a.out_ld;
  p.kv_lengths = a.kv_lengths;
  p.q_len = static_cast<int>(a.q_len);
  p.kv_len = static_cast<int>(a.kv_len);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.scale_log2 = a.scale * kLog2e;
  p.causal = a.causal ? 1 : 0;
  return p;
}

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

// The wgmma path (attention_kv_wgmma.cu). Whether it takes these arguments: f16/bf16 K/V of the activation
// dtype, head_dim 64, 16-byte aligned rows, a positive scale, an sm_90 device, and enough query rows for its
// 128-row CTAs to beat the mma.sync kernel; then its launch.
bool attention_kv_wgmma_takes(const AttentionKvArgs& a);
Status launch_attention_kv_wgmma(const AttentionKvArgs& a, cudaStream_t stream);

}  // namespace mmserve::kernels::attention_kv_detail
