// Attention over separate K/V on the GPU (contract in attention_kv.h, paths in attention_kv_cuda.h): the
// host dispatch, the CUDA-core tiled kernel (decode with split KV, and the f32 / wide-head path) and the
// combine kernel of the split partials. The tensor-core kernel is in attention_kv_mma.cu.
//
// Tiled kernel: one CTA of 128 threads per (batch row, head, tile of kRows query rows, KV split). Each
// step stages 64 keys of K and V in shared memory as f32 (dequantised on the way, 16-byte loads when
// the layout allows), computes the tile's scores thread-per-(row, key) against f32 queries pre-scaled
// by scale * log2(e) * k_scale, updates the online softmax (one warp per row) and accumulates O in
// shared memory thread-per-(row, dim); the decode instance (kRows = 1) keeps all 128 threads busy at
// head_dim 64 instead: two threads per score, and P V split over two halves of the keys. Keys past a
// row's visible prefix are never read: the tile stops at the last visible key of the CTA's last row, and
// what a row must not see is masked to -inf.
// Split KV (q_len == 1): split s covers keys [s * chunk, (s + 1) * chunk); each CTA writes (max, sum,
// unnormalised output times v_scale) to the workspace, and the combine kernel rescales the partials to
// the common max. The split count is fixed on the host from batch, heads and kv_len (never from
// kv_lengths, which only the device reads), so a captured graph stays valid as lengths change.
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
constexpr int kRowsMulti = 16;  // query rows per CTA of the tiled kernel when q_len > 1
static_assert(kThreads == 2 * 64, "the decode path computes each of a tile's 64 scores with two threads");
constexpr int64_t kHeadDimMax = 256;
// CTAs the split-KV decode aims for: about four per SM of an H200 (132 SMs), enough loads in flight to
// approach the HBM bandwidth at batch 1.
constexpr int64_t kDecodeCtasTarget = 512;

extern __shared__ __align__(16) unsigned char tiled_smem[];

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
  float* partial;  // [batch, heads, splits, head_dim + 2] when splits > 1
  int q_len, kv_len, heads, head_dim, splits, chunk;
  float scale_log2;
  int causal, vec_kv;
};

// Stages keys [0, nk) of a K/V tile as f32 (K rows ldk apart, V rows d_head apart). The 16-byte path
// issues kBatch loads of K and of V per thread before converting any of them, so that a decode CTA, which
// sees only a tile or two, has its loads in flight together instead of one latency after another.
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

// grid = (q_tiles * splits, heads, batch), block = kThreads, dynamic shared memory = tiled_smem_bytes.
template <typename T, typename KT, int kRows>
__global__ void __launch_bounds__(kThreads) attention_kv_tiled_kernel(const TiledParams p) {
  const int d_head = p.head_dim;
  // K rows are ldk apart: d_head + 1 keeps the thread-per-key reads of the multi-row path free of bank
  // conflicts, d_head + 2 those of the decode path's thread pairs (key j = t / 2, dims t % 2 + 2i).
  const int ldk = d_head + (kRows == 1 ? 2 : 1);
  float* q_s = reinterpret_cast<float*>(tiled_smem);  // [kRows][d_head]
  float* k_s = q_s + kRows * d_head;                  // [kKeyTile][ldk]
  float* v_s = k_s + kKeyTile * (d_head + 2);         // [kKeyTile][d_head]
  float* s_s = v_s + kKeyTile * d_head;               // [kRows][kKeyTile]
  float* o_s = s_s + kRows * kKeyTile;                // [kRows][d_head]
  float* m_s = o_s + kRows * d_head;                  // [kRows]
  float* l_s = m_s + kRows;                           // [kRows]
  float* alpha_s = l_s + kRows;                       // [kRows]
  float* half_s = alpha_s + kRows;                    // [2][d_head]: decode P V, one half of the keys each

  const int split = static_cast<int>(blockIdx.x % p.splits);
  const int tile = static_cast<int>(blockIdx.x / p.splits);
  const int h = blockIdx.y, b = blockIdx.z;
  const int L = kv_length(p.kv_lengths, b, p.kv_len);
  const int i0 = tile * kRows;
  const int rows = min(kRows, p.q_len - i0);
  const bool causal = p.causal != 0;
  const int n_cta = row_visible(i0 + rows - 1, p.q_len, L, causal);
  const int key_begin = split * p.chunk;
  const int key_end = min(key_begin + p.chunk, n_cta);
  const bool compressed = p.k_scale != nullptr;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const float k_mul = compressed && key_end > key_begin ? p.k_scale[bh] : 1.0f;
  const float v_mul = compressed && key_end > key_begin ? p.v_scale[bh] : 1.0f;

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
  for (int kb = key_begin; kb < key_end; kb += kKeyTile) {
    const int nk = min(kKeyTile, key_end - kb);
    load_kv_tile<KT>(k_s, v_s, k + kb * p.kv_ld, v + kb * p.kv_ld, p.kv_ld, nk, d_head, ldk, p.vec_kv != 0);
    __syncthreads();
    if constexpr (kRows == 1) {
      // Two threads per key (kThreads == 2 * kKeyTile), each summing every other dimension.
      const int j = threadIdx.x >> 1, half = threadIdx.x & 1;
      const bool seen = j < nk && kb + j < n_cta;
      float dot = 0.0f;
      if (seen) {
        for (int d = half; d < d_head; d += 2) dot = fmaf(q_s[d], k_s[j * ldk + d], dot);
      }
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      if (half == 0) s_s[j] = seen ? dot : -INFINITY;
    } else {
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
    if constexpr (kRows == 1) {
      // (dim, half of the keys) per thread, so that all threads work at head_dim 64; then the halves add.
      constexpr int kHalf = kKeyTile / 2;
      for (int idx = threadIdx.x; idx < 2 * d_head; idx += blockDim.x) {
        const int d = idx % d_head, half = idx / d_head;
        const int j_end = min(nk, (half + 1) * kHalf);
        float acc = 0.0f;
        for (int j = half * kHalf; j < j_end; ++j) acc = fmaf(s_s[j], v_s[j * d_head + d], acc);
        half_s[idx] = acc;
      }
      __syncthreads();
      for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
        o_s[d] = o_s[d] * alpha_s[0] + half_s[d] + half_s[d_head + d];
      }
    } else {
      for (int idx = threadIdx.x; idx < kRows * d_head; idx += blockDim.x) {
        const int r = idx / d_head, d = idx % d_head;
        const float* pr = s_s + r * kKeyTile;
        float acc = o_s[idx] * alpha_s[r];
        for (int j = 0; j < nk; ++j) acc = fmaf(pr[j], v_s[j * d_head + d], acc);
        o_s[idx] = acc;
      }
    }
    __syncthreads();
  }

  if (p.splits == 1) {
    T* out =
        static_cast<T*>(p.out) + (static_cast<int64_t>(b) * p.q_len + i0) * p.out_ld + static_cast<int64_t>(h) * d_head;
    for (int idx = threadIdx.x; idx < rows * d_head; idx += blockDim.x) {
      const int r = idx / d_head, d = idx % d_head;
      const float l = l_s[r];
      out[r * p.out_ld + d] = from_f32<T>(l > 0.0f ? o_s[idx] * (v_mul / l) : 0.0f);
    }
  } else {  // kRows == 1 (q_len == 1): the partial of this split
    float* part = p.partial + (bh * p.splits + split) * (d_head + 2);
    if (threadIdx.x == 0) {
      part[0] = m_s[0];
      part[1] = l_s[0];
    }
    for (int d = threadIdx.x; d < d_head; d += blockDim.x) part[2 + d] = o_s[d] * v_mul;
  }
}

// grid = (heads, batch), block = kThreads: out[b, 0, h, :] from the splits' partials.
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_kv_combine_kernel(const TiledParams p) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int d_head = p.head_dim;
  const float* part = p.partial + (static_cast<int64_t>(b) * p.heads + h) * p.splits * (d_head + 2);
  float m = -INFINITY;
  for (int s = 0; s < p.splits; ++s) m = fmaxf(m, part[s * (d_head + 2)]);
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(b) * p.out_ld + static_cast<int64_t>(h) * d_head;
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    if (m != -INFINITY) {
      for (int s = 0; s < p.splits; ++s) {
        const float* ps = part + s * (d_head + 2);
        if (ps[0] == -INFINITY) continue;  // a split that saw no key
        const float w = exp2f(ps[0] - m);
        num = fmaf(w, ps[2 + d], num);
        den = fmaf(w, ps[1], den);
      }
    }
    out[d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

int64_t tiled_smem_bytes(int rows, int64_t head_dim) {
  return (rows * head_dim + kKeyTile * (head_dim + 2) + kKeyTile * head_dim + rows * kKeyTile + rows * head_dim +
          3 * rows + 2 * head_dim) *
         4;
}

// The split-KV plan of a decode step: splits and keys per split (a multiple of kKeyTile).
struct SplitPlan {
  int64_t splits = 1;
  int64_t chunk = 0;
};

SplitPlan split_plan(const AttentionKvArgs& a) {
  SplitPlan plan;
  plan.chunk = std::max<int64_t>(a.kv_len, 1);
  if (a.q_len != 1 || a.kv_len <= kKeyTile || a.batch * a.heads <= 0) return plan;
  const int64_t tiles = (a.kv_len + kKeyTile - 1) / kKeyTile;
  const int64_t wanted = (kDecodeCtasTarget + a.batch * a.heads - 1) / (a.batch * a.heads);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, tiles);
  if (splits == 1) return plan;
  plan.chunk = (tiles + splits - 1) / splits * kKeyTile;
  plan.splits = (a.kv_len + plan.chunk - 1) / plan.chunk;
  if (plan.splits == 1) plan.chunk = a.kv_len;
  return plan;
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
  if (a.batch > 65535 || a.heads > 65535) return "batch and heads must be <= 65535 (grid dimensions)";
  if (a.q_len > (1 << 24) || a.kv_len > (1 << 24) || a.kv_batch_stride > (int64_t{1} << 40)) {
    return "q_len / kv_len out of range";
  }
  return "";
}

template <typename T, typename KT, int kRows>
Status launch_tiled(const AttentionKvArgs& a, const SplitPlan& plan, cudaStream_t stream) {
  TiledParams p{};
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
  p.partial = static_cast<float*>(a.workspace);
  p.q_len = static_cast<int>(a.q_len);
  p.kv_len = static_cast<int>(a.kv_len);
  p.heads = static_cast<int>(a.heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.splits = static_cast<int>(plan.splits);
  p.chunk = static_cast<int>(plan.chunk);
  p.scale_log2 = a.scale * kLog2e;
  p.causal = a.causal ? 1 : 0;
  constexpr int64_t kVec = 16 / sizeof(KT);
  p.vec_kv = aligned16(a.k) && aligned16(a.v) && a.kv_ld % kVec == 0 && a.head_dim % kVec == 0;
  const int64_t smem = tiled_smem_bytes(kRows, a.head_dim);
  if (smem > 48 * 1024) {
    CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_kv_tiled_kernel<T, KT, kRows>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int64_t q_tiles = (a.q_len + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(q_tiles * plan.splits), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  attention_kv_tiled_kernel<T, KT, kRows><<<grid, kThreads, static_cast<size_t>(smem), stream>>>(p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  if (plan.splits > 1) {
    attention_kv_combine_kernel<T>
        <<<dim3(static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch)), kThreads, 0, stream>>>(p);
    CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return ok_status();
}

template <typename T, typename KT>
Status launch_tiled_rows(const AttentionKvArgs& a, cudaStream_t stream) {
  const SplitPlan plan = split_plan(a);
  if (a.q_len == 1) return launch_tiled<T, KT, 1>(a, plan, stream);
  return launch_tiled<T, KT, kRowsMulti>(a, plan, stream);
}

template <typename T>
Status launch_tiled_storage(const AttentionKvArgs& a, cudaStream_t stream) {
  switch (a.storage) {
    case KvStorage::kFp8E4M3: return launch_tiled_rows<T, __nv_fp8_e4m3>(a, stream);
    case KvStorage::kInt8: return launch_tiled_rows<T, int8_t>(a, stream);
    default: return launch_tiled_rows<T, T>(a, stream);
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
    case DType::kF16: return launch_tiled_storage<__half>(a, stream);
    case DType::kBF16: return launch_tiled_storage<__nv_bfloat16>(a, stream);
    default: return launch_tiled_storage<float>(a, stream);
  }
}

}  // namespace mmserve::kernels
