// The Hopper path of attention_kv_mma (see that file's header for the algorithm both kernels follow):
// attention_kv_wgmma_kernel, warpgroup MMA (wgmma m64n64k16) for head_dim 64 with f16/bf16 K/V of the activation
// dtype (Whisper's encoder).
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/attention_kv_mma_common.cuh"

namespace mmserve::kernels::attention_kv_detail {
namespace {

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
  MmaParams p = mma_params(a);  // head_dim is 64 (wgmma_eligible)
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

}  // namespace

bool attention_kv_wgmma_takes(const AttentionKvArgs& a) {
  return (a.dtype == DType::kF16 || a.dtype == DType::kBF16) && a.q_len >= kWgmmaMinQueries && wgmma_eligible(a);
}

Status launch_attention_kv_wgmma(const AttentionKvArgs& a, cudaStream_t stream) {
  return a.dtype == DType::kF16 ? launch_wgmma<__half, EncoderWgmmaShape>(a, stream)
                                : launch_wgmma<__nv_bfloat16, EncoderWgmmaShape>(a, stream);
}

}  // namespace mmserve::kernels::attention_kv_detail
