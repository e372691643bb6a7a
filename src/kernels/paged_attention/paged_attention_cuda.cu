// Paged attention on the GPU (paged_attention_cuda.h): the split-K decode kernel and its reduce, the plain
// kernel of every shape the fast paths do not take, the dispatch, and the paged KV write. The tensor-core prefill
// is paged_attention_mma.cu.
//
// Decode (q_len_b == 1): grid (partitions of max_seq_len, kv_heads, num_seqs), 4 warps. Lanes work in groups of 8
// per key (each lane head_dim / 8 elements, in 16-byte loads), a warp on 4 keys at once, 4 (head_dim 64) or 2 (128)
// of them in flight per group (on the H200, 4 was 8% faster at 64 and 4% slower at 128). Pass 1 computes the scores
// of every query head of the group against the partition's keys into shared memory (the block ids of the partition
// are staged there first); the softmax of the partition follows; pass 2
// reads V and accumulates the weighted rows, which are summed over the key groups and warps. A partition outside
// the window exits at once. With several partitions, (max, sum, unnormalised output) go to the workspace,
// [num_seqs][heads][partitions], and the partition that finishes last (a counter per sequence and kv head, in the
// workspace, reset by that CTA) rescales and combines them: one launch per call, which inside a decode CUDA graph
// of 16-32 layers is one node per layer fewer than a separate reduce kernel.
// FP8 pools (paged_attention.h): every kernel is a template on the pool's element type KT. The decode kernel
// loads a lane's head_dim / 8 codes in one access (16 bytes at head_dim 128, 8 at 64), converts them two at a time
// to f32 (exact) and folds the scales into the query (K) and the output (V); the plain kernel converts one code at a
// time; the KV write quantises (fp8_cuda_codes.cuh: the CPU twin's codes). A 16-bit pool compiles to the kernels it
// had before.
// Tests: paged_attention_cuda_test.cpp; bench: paged_attention_cuda_bench.cpp.
#include <string>
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_cuda_common.cuh"
#include "kernels/attention/mma_ptx.cuh"
#include "kernels/common/cuda_align.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/paged_attention/paged_attention_cuda_common.cuh"

namespace mmserve::kernels {
namespace paged_detail {
namespace {

using attention_kv_detail::kv_to_f32;
using attention_kv_detail::warp_max;
using attention_kv_detail::warp_sum;

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * 32;
constexpr int kKeysPerStep = kDecodeWarps * 4;  // 4 groups of 8 lanes per warp, one key each
constexpr int kPartitionMax = 512;
constexpr int kPartitionMin = 64;
// Fewer CTAs than this (two per SM of an H100 / H200) and the partitions halve, down to kPartitionMin keys.
constexpr int64_t kTargetCtas = 264;
constexpr int kHeadDimMax = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Keys per decode partition, from host-side fields only (so the workspace size and the grid agree on replays).
int decode_partition(const PagedAttentionArgs& a) {
  int part = kPartitionMax;
  while (part > kPartitionMin && a.num_seqs * a.kv_heads * ceil_div(a.max_seq_len, part) < kTargetCtas) part /= 2;
  return part;
}

bool decode_takes(const PagedAttentionArgs& a) {
  const int64_t group = a.heads / a.kv_heads;
  return (a.head_dim == 64 || a.head_dim == 128) && (group == 1 || group == 2 || group == 4 || group == 8) &&
         group * a.head_dim <= 512 && aligned16(a.k_cache) && aligned16(a.v_cache);
}

struct DecodeParams {
  PagedParams p;
  float* ws_max;  // [num_seqs][heads][parts], log2 domain
  float* ws_sum;
  float* ws_acc;  // [num_seqs][heads][parts][head_dim]
  unsigned* ws_count;  // [num_seqs][kv_heads]: partitions finished; zero between calls
  int part, parts;
};

// A lane's share of a K or V row: kChunks accesses of kVec elements of KT (16 bytes, or 8 for FP8 at head_dim 64).
template <typename KT, int kPerLane>
struct DecodeLoad {
  static constexpr int kVec = 16 / sizeof(KT) < kPerLane ? 16 / static_cast<int>(sizeof(KT)) : kPerLane;
  static constexpr int kChunks = kPerLane / kVec;
  using Chunk = std::conditional_t<kVec * sizeof(KT) == 16, uint4, uint2>;
};

template <typename KT, int kVec, int kChunks, typename Chunk>
__device__ __forceinline__ void load_row(Chunk (&dst)[kChunks], const KT* row, int sub) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) dst[c] = *reinterpret_cast<const Chunk*>(row + (sub + 8 * c) * kVec);
}

// The kVec elements of one access as f32 (FP8: codes converted two at a time, before their scale).
template <typename KT, int kVec, typename Chunk>
__device__ __forceinline__ void unpack(const Chunk& chunk, float (&x)[kVec]) {
  if constexpr (KvCodes<KT>::kFp8) {
#pragma unroll
    for (int e = 0; e < kVec; e += 2) {
      const float2 f = fp8x2_to_float2<KvCodes<KT>::kFormat>(reinterpret_cast<const uint16_t*>(&chunk)[e / 2]);
      x[e] = f.x;
      x[e + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = to_f32(reinterpret_cast<const KT*>(&chunk)[e]);
  }
}

template <typename T, typename KT, int kD, int kG>
__global__ void __launch_bounds__(kDecodeThreads) paged_decode_kernel(const DecodeParams dp) {
  constexpr int kPerLane = kD / 8;  // elements of a row per lane
  using Load = DecodeLoad<KT, kPerLane>;
  constexpr int kVec = Load::kVec;
  constexpr int kChunks = Load::kChunks;
  using Chunk = typename Load::Chunk;
  constexpr int kUnroll = kD <= 64 ? 4 : 2;  // keys in flight per group
  __shared__ float scores[kG][kPartitionMax];
  __shared__ float partial[kDecodeWarps][kG][kD];
  __shared__ int32_t blocks[kPartitionMax + 2];
  __shared__ float stat[kDecodeWarps][kG];
  __shared__ float row_max[kG], row_sum[kG];
  const PagedParams& p = dp.p;
  pdl_trigger();  // cuda_pdl.cuh: the lengths, tables, q and caches are earlier kernels' (and copies') output
  pdl_wait();

  const int part = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const int row = p.query_start[b];
  if (p.query_start[b + 1] - row != 1) return;
  const int L = p.seq_lens[b];
  const KeyRange keys = visible_keys(0, 1, L, p.window);
  const int first_part = keys.lo / dp.part, last_part = (keys.hi - 1) / dp.part;
  if (part < first_part || part > last_part) return;
  const int k0 = max(part * dp.part, keys.lo), n = min((part + 1) * dp.part, keys.hi) - k0;
  const bool direct = first_part == last_part;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, kg = lane / 8, sub = lane % 8;
  const int32_t* table = p.block_tables + static_cast<int64_t>(b) * p.block_table_ld;
  const int first_block = k0 / p.block_size, n_blocks = (k0 + n - 1) / p.block_size - first_block + 1;
  for (int i = tid; i < n_blocks; i += kDecodeThreads) blocks[i] = table[first_block + i];
  auto row_of = [&](const void* cache, int j) {  // key k0 + j, kv head g
    const int key = k0 + j;
    const int64_t slot = static_cast<int64_t>(blocks[key / p.block_size - first_block]) * p.block_size +
                         key % p.block_size;
    return static_cast<const KT*>(cache) + slot * p.width + g * kD;
  };

  // The group's queries, pre-scaled into the log2 domain (and by an FP8 pool's K scale); lane `sub` holds elements
  // (sub + 8 c) * kVec + e.
  float q_mul = p.scale_log2;
  if constexpr (KvCodes<KT>::kFp8) q_mul *= kv_scale<KT>(p.k_scale);
  float qf[kG][kPerLane];
  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(row) * p.q_ld + g * kG * kD;
#pragma unroll
  for (int h = 0; h < kG; ++h) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) qf[h][c * kVec + e] = to_f32(q[h * kD + (sub + 8 * c) * kVec + e]) * q_mul;
    }
  }
  __syncthreads();  // blocks[]

  // Pass 1: scores.
  for (int base = 0; base < n; base += kKeysPerStep * kUnroll) {
    Chunk kr[kUnroll][kChunks];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kKeysPerStep + warp * 4 + kg;
      if (j < n) load_row<KT, kVec>(kr[u], row_of(p.k_cache, j), sub);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kKeysPerStep + warp * 4 + kg;
      float dot[kG];
#pragma unroll
      for (int h = 0; h < kG; ++h) dot[h] = 0.0f;
      if (j < n) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          float x[kVec];
          unpack<KT>(kr[u][c], x);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
#pragma unroll
            for (int h = 0; h < kG; ++h) dot[h] = fmaf(qf[h][c * kVec + e], x[e], dot[h]);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], 1);
        dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], 2);
        dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], 4);
      }
      if (sub == 0 && j < n) {
#pragma unroll
        for (int h = 0; h < kG; ++h) scores[h][j] = dot[h];
      }
    }
  }
  __syncthreads();

  // The partition's softmax: max, then 2^(s - max) in place and the sum.
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    float mx = -INFINITY;
    for (int j = tid; j < n; j += kDecodeThreads) mx = fmaxf(mx, scores[h][j]);
    mx = warp_max(mx);
    if (lane == 0) stat[warp][h] = mx;
  }
  __syncthreads();
  if (tid < kG) {
    float mx = stat[0][tid];
    for (int w = 1; w < kDecodeWarps; ++w) mx = fmaxf(mx, stat[w][tid]);
    row_max[tid] = mx;
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    float sum = 0.0f;
    for (int j = tid; j < n; j += kDecodeThreads) {
      const float e = exp2_approx(scores[h][j] - row_max[h]);
      scores[h][j] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) stat[warp][h] = sum;
  }
  __syncthreads();
  if (tid < kG) {
    float sum = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) sum += stat[w][tid];
    row_sum[tid] = sum;
  }

  // Pass 2: the weighted sum of V rows (the group's lanes hold their elements of every head).
  float acc[kG][kPerLane];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[h][i] = 0.0f;
  }
  for (int base = 0; base < n; base += kKeysPerStep * kUnroll) {
    Chunk vr[kUnroll][kChunks];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kKeysPerStep + warp * 4 + kg;
      if (j < n) load_row<KT, kVec>(vr[u], row_of(p.v_cache, j), sub);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kKeysPerStep + warp * 4 + kg;
      if (j >= n) continue;
      float w[kG];
#pragma unroll
      for (int h = 0; h < kG; ++h) w[h] = scores[h][j];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float x[kVec];
        unpack<KT>(vr[u][c], x);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
#pragma unroll
          for (int h = 0; h < kG; ++h) acc[h][c * kVec + e] = fmaf(w[h], x[e], acc[h][c * kVec + e]);
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < kG; ++h) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], 8);
      acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], 16);
    }
  }
  if (kg == 0) {
#pragma unroll
    for (int h = 0; h < kG; ++h) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) partial[warp][h][(sub + 8 * c) * kVec + e] = acc[h][c * kVec + e];
      }
    }
  }
  __syncthreads();

  const int h0 = g * kG;
  for (int idx = tid; idx < kG * kD; idx += kDecodeThreads) {
    const int h = idx / kD, d = idx % kD;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) s += partial[w][h][d];
    if constexpr (KvCodes<KT>::kFp8) s *= kv_scale<KT>(p.v_scale);  // V's scale, once per output element
    if (direct) {
      static_cast<T*>(p.out)[static_cast<int64_t>(row) * p.out_ld + (h0 + h) * kD + d] = from_f32<T>(s / row_sum[h]);
    } else {
      const int64_t at = (static_cast<int64_t>(b) * p.heads + h0 + h) * dp.parts + part;
      dp.ws_acc[at * kD + d] = s;
      if (d == 0) {
        dp.ws_max[at] = row_max[h];
        dp.ws_sum[at] = row_sum[h];
      }
    }
  }
  if (direct) return;
  // The last of the sequence's partitions to finish combines them for the group's heads (L2 reads: the other
  // partitions' CTAs ran on other SMs).
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  unsigned* count = dp.ws_count + static_cast<int64_t>(b) * gridDim.y + g;
  if (tid == 0) last = atomicAdd(count, 1u) == static_cast<unsigned>(last_part - first_part);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int h = 0; h < kG; ++h) {
    const int64_t at = (static_cast<int64_t>(b) * p.heads + h0 + h) * dp.parts;
    float mx = -INFINITY;
    for (int i = first_part; i <= last_part; ++i) mx = fmaxf(mx, __ldcg(dp.ws_max + at + i));
    float sum = 0.0f;
    for (int i = first_part; i <= last_part; ++i) sum += __ldcg(dp.ws_sum + at + i) * exp2_approx(__ldcg(dp.ws_max + at + i) - mx);
    const float inv = 1.0f / sum;
    for (int d = tid; d < kD; d += kDecodeThreads) {
      float acc_d = 0.0f;
      for (int i = first_part; i <= last_part; ++i) {
        acc_d += __ldcg(dp.ws_acc + (at + i) * kD + d) * exp2_approx(__ldcg(dp.ws_max + at + i) - mx);
      }
      static_cast<T*>(p.out)[static_cast<int64_t>(row) * p.out_ld + static_cast<int64_t>(h0 + h) * kD + d] =
          from_f32<T>(acc_d * inv);
    }
  }
  if (tid == 0) *count = 0;  // ready for the next call (a graph replays this one)
}

// One pool element as f32 (an FP8 code before its scale).
template <typename KT>
__device__ __forceinline__ float pool_to_f32(KT x) {
  if constexpr (KvCodes<KT>::kFp8) {
    return kv_to_f32(x);
  } else {
    return to_f32(x);
  }
}

// The plain kernel: grid (ceil(max_query_len / 4), num_seqs, heads), one warp per new token; lane l holds
// elements l + 32 e. Online softmax, one key at a time.
template <typename T, typename KT>
__global__ void __launch_bounds__(128) paged_plain_kernel(const PagedParams p) {
  constexpr int kPerLane = kHeadDimMax / 32;
  const int lane = threadIdx.x % 32;
  const int i = blockIdx.x * 4 + threadIdx.x / 32, b = blockIdx.y, h = blockIdx.z;
  const int row0 = p.query_start[b], q_len = p.query_start[b + 1] - row0;
  if (q_len < p.min_q || i >= q_len) return;
  const KeyRange keys = visible_keys(i, q_len, p.seq_lens[b], p.window);
  const int32_t* table = p.block_tables + static_cast<int64_t>(b) * p.block_table_ld;
  const int64_t col = static_cast<int64_t>(h / p.group) * p.head_dim;
  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(row0 + i) * p.q_ld + static_cast<int64_t>(h) * p.head_dim;
  float q_mul = p.scale_log2;
  if constexpr (KvCodes<KT>::kFp8) q_mul *= kv_scale<KT>(p.k_scale);
  float qf[kPerLane], acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    qf[e] = d < p.head_dim ? to_f32(q[d]) * q_mul : 0.0f;
    acc[e] = 0.0f;
  }
  float mx = -INFINITY, sum = 0.0f;
  for (int j = keys.lo; j < keys.hi; ++j) {
    const int64_t at = key_slot(table, j, p.block_size) * p.width + col;
    const KT* k = static_cast<const KT*>(p.k_cache) + at;
    const KT* v = static_cast<const KT*>(p.v_cache) + at;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < p.head_dim) dot = fmaf(qf[e], pool_to_f32(k[d]), dot);
    }
    dot = warp_sum(dot);
    const float mx_new = fmaxf(mx, dot);
    const float alpha = exp2_approx(mx - mx_new), w = exp2_approx(dot - mx_new);
    sum = sum * alpha + w;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      acc[e] = acc[e] * alpha + (d < p.head_dim ? w * pool_to_f32(v[d]) : 0.0f);
    }
    mx = mx_new;
  }
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(row0 + i) * p.out_ld + static_cast<int64_t>(h) * p.head_dim;
  float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  if constexpr (KvCodes<KT>::kFp8) inv *= kv_scale<KT>(p.v_scale);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < p.head_dim) out[d] = from_f32<T>(acc[e] * inv);
  }
}

PagedParams paged_params(const PagedAttentionArgs& a) {
  PagedParams p{};
  p.q = a.q;
  p.q_ld = a.q_ld;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.out = a.out;
  p.out_ld = a.out_ld;
  p.block_tables = a.block_tables;
  p.block_table_ld = a.block_table_ld;
  p.seq_lens = a.seq_lens;
  p.query_start = a.query_start;
  p.width = a.kv_heads * a.head_dim;
  p.heads = static_cast<int>(a.heads);
  p.group = static_cast<int>(a.heads / a.kv_heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.block_size = static_cast<int>(a.block_size);
  p.window = static_cast<int>(a.window);
  p.scale_log2 = a.scale * kLog2e;
  p.k_scale = a.k_scale;
  p.v_scale = a.v_scale;
  return p;
}

template <typename T, typename KT, int kD, int kG>
Status launch_decode(const PagedAttentionArgs& a, const DecodeParams& dp, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(dp.parts), static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.num_seqs));
  CUDA_RETURN_IF_ERROR(launch_pdl(paged_decode_kernel<T, KT, kD, kG>, grid, dim3(kDecodeThreads), 0, stream, dp));
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename T, typename KT, int kD>
Status launch_decode_for_group(const PagedAttentionArgs& a, const DecodeParams& dp, cudaStream_t stream) {
  switch (a.heads / a.kv_heads) {
    case 1: return launch_decode<T, KT, kD, 1>(a, dp, stream);
    case 2: return launch_decode<T, KT, kD, 2>(a, dp, stream);
    case 4: return launch_decode<T, KT, kD, 4>(a, dp, stream);
    default:
      if constexpr (kD * 8 <= 512) {
        return launch_decode<T, KT, kD, 8>(a, dp, stream);
      } else {
        return internal_error("paged_attention_cuda: decode group size not instantiated");
      }
  }
}

template <typename T, typename KT>
Status launch_all(const PagedAttentionArgs& a, cudaStream_t stream) {
  PagedParams p = paged_params(a);
  const bool decode = decode_takes(a);
  if (decode) {
    DecodeParams dp{};
    dp.p = p;
    dp.part = decode_partition(a);
    dp.parts = static_cast<int>(ceil_div(a.max_seq_len, dp.part));
    const int64_t entries = a.num_seqs * a.heads * dp.parts;
    dp.ws_max = static_cast<float*>(a.workspace);
    dp.ws_sum = dp.ws_max + entries;
    dp.ws_acc = dp.ws_sum + entries;
    dp.ws_count = reinterpret_cast<unsigned*>(dp.ws_acc + entries * a.head_dim);
    const Status status = a.head_dim == 64 ? launch_decode_for_group<T, KT, 64>(a, dp, stream)
                                           : launch_decode_for_group<T, KT, 128>(a, dp, stream);
    RETURN_IF_ERROR(status);
    if (a.max_query_len == 1) return ok_status();
  }
  p.min_q = decode ? 2 : 1;
  if constexpr (sizeof(T) == 2) {
    if (paged_prefill_mma_takes(a)) return launch_paged_prefill_mma(a, p, stream);
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(a.max_query_len, 4)), static_cast<unsigned>(a.num_seqs),
                  static_cast<unsigned>(a.heads));
  paged_plain_kernel<T, KT><<<grid, 128, 0, stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

// The KV write: grid (num_tokens), one CTA copies row t of k and of v to its slot.
template <typename W>
__global__ void __launch_bounds__(128) paged_kv_write_kernel(const W* k, const W* v, int64_t src_ld, W* k_cache,
                                                            W* v_cache, const int32_t* slot_mapping, int64_t width,
                                                            int64_t num_slots) {
  const int64_t t = blockIdx.x, slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    k_cache[slot * width + c] = k[t * src_ld + c];
    v_cache[slot * width + c] = v[t * src_ld + c];
  }
}

// The FP8 write: grid (num_tokens), one CTA quantises row t of k and of v into its slot's codes (the CPU twin's
// codes: fp8_encode(x / scale)). The scales are read on the device.
template <typename T>
__global__ void __launch_bounds__(128) paged_kv_write_fp8_kernel(const T* k, const T* v, int64_t src_ld,
                                                                uint8_t* k_cache, uint8_t* v_cache,
                                                                const int32_t* slot_mapping, int64_t width,
                                                                int64_t num_slots, const float* k_scale,
                                                                const float* v_scale, bool e4m3) {
  const int64_t t = blockIdx.x, slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const float ks = *k_scale, vs = *v_scale;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    k_cache[slot * width + c] = fp8_encode_scaled(to_f32(k[t * src_ld + c]), ks, e4m3);
    v_cache[slot * width + c] = fp8_encode_scaled(to_f32(v[t * src_ld + c]), vs, e4m3);
  }
}

}  // namespace
}  // namespace paged_detail

using namespace paged_detail;

size_t paged_attention_cuda_workspace_bytes(const PagedAttentionArgs& a) {
  if (a.num_seqs <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.head_dim <= 0 || a.max_seq_len <= 0) return 0;
  const int64_t parts = ceil_div(a.max_seq_len, decode_partition(a));
  if (parts <= 1) return 0;
  return static_cast<size_t>(a.num_seqs * a.heads * parts * (a.head_dim + 2)) * sizeof(float) +
         static_cast<size_t>(a.num_seqs * a.kv_heads) * sizeof(unsigned);
}

Status paged_attention_cuda(const PagedAttentionArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(paged_attention_validate(a));
  if (a.num_seqs == 0 || a.num_tokens == 0) return ok_status();
  if (a.head_dim > kHeadDimMax) {
    return unimplemented("paged_attention_cuda: head_dim " + std::to_string(a.head_dim) + " > 256");
  }
  const size_t need = paged_attention_cuda_workspace_bytes(a);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need || !aligned16(a.workspace))) {
    return invalid_argument("paged_attention_cuda: workspace must be 16-byte aligned and hold " +
                            std::to_string(need) + " bytes (paged_attention_cuda_workspace_bytes), got " +
                            std::to_string(a.workspace_bytes));
  }
  // paged_attention_validate allows FP8 pools with f16 / bf16 activations only.
  switch (a.kv_storage) {
    case PagedKvStorage::kFp8E4M3:
      return a.dtype == DType::kF16 ? launch_all<__half, __nv_fp8_e4m3>(a, stream)
                                    : launch_all<__nv_bfloat16, __nv_fp8_e4m3>(a, stream);
    case PagedKvStorage::kFp8E5M2:
      return a.dtype == DType::kF16 ? launch_all<__half, __nv_fp8_e5m2>(a, stream)
                                    : launch_all<__nv_bfloat16, __nv_fp8_e5m2>(a, stream);
    default: break;
  }
  switch (a.dtype) {
    case DType::kF32: return launch_all<float, float>(a, stream);
    case DType::kF16: return launch_all<__half, __half>(a, stream);
    default: return launch_all<__nv_bfloat16, __nv_bfloat16>(a, stream);
  }
}

Status paged_kv_write_cuda(const PagedKvWriteArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(paged_kv_write_validate(a));
  if (a.num_tokens == 0 || a.width == 0) return ok_status();
  const int64_t bytes = a.width * static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t src_bytes = a.src_ld * static_cast<int64_t>(dtype_size(a.dtype));
  const unsigned grid = static_cast<unsigned>(a.num_tokens);
  if (a.kv_storage != PagedKvStorage::kSame) {  // f16 / bf16 only (paged_kv_write_validate)
    const bool e4m3 = a.kv_storage == PagedKvStorage::kFp8E4M3;
    auto* kc = static_cast<uint8_t*>(a.k_cache);
    auto* vc = static_cast<uint8_t*>(a.v_cache);
    if (a.dtype == DType::kF16) {
      paged_kv_write_fp8_kernel<__half><<<grid, 128, 0, stream>>>(
          static_cast<const __half*>(a.k), static_cast<const __half*>(a.v), a.src_ld, kc, vc, a.slot_mapping, a.width,
          a.num_slots, a.k_scale, a.v_scale, e4m3);
    } else {
      paged_kv_write_fp8_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(a.k), static_cast<const __nv_bfloat16*>(a.v), a.src_ld, kc, vc,
          a.slot_mapping, a.width, a.num_slots, a.k_scale, a.v_scale, e4m3);
    }
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return ok_status();
  }
  // Whole rows move as 16-byte words where every row start is 16-byte aligned, else as 2- or 4-byte elements.
  if (bytes % 16 == 0 && src_bytes % 16 == 0 && aligned16(a.k) && aligned16(a.v) && aligned16(a.k_cache) &&
      aligned16(a.v_cache)) {
    const int64_t scale = 16 / static_cast<int64_t>(dtype_size(a.dtype));
    paged_kv_write_kernel<uint4><<<grid, 128, 0, stream>>>(
        static_cast<const uint4*>(a.k), static_cast<const uint4*>(a.v), a.src_ld / scale, static_cast<uint4*>(a.k_cache),
        static_cast<uint4*>(a.v_cache), a.slot_mapping, a.width / scale, a.num_slots);
  } else if (a.dtype == DType::kF32) {
    paged_kv_write_kernel<uint32_t><<<grid, 128, 0, stream>>>(
        static_cast<const uint32_t*>(a.k), static_cast<const uint32_t*>(a.v), a.src_ld,
        static_cast<uint32_t*>(a.k_cache), static_cast<uint32_t*>(a.v_cache), a.slot_mapping, a.width, a.num_slots);
  } else {
    paged_kv_write_kernel<uint16_t><<<grid, 128, 0, stream>>>(
        static_cast<const uint16_t*>(a.k), static_cast<const uint16_t*>(a.v), a.src_ld,
        static_cast<uint16_t*>(a.k_cache), static_cast<uint16_t*>(a.v_cache), a.slot_mapping, a.width, a.num_slots);
  }
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace mmserve::kernels
