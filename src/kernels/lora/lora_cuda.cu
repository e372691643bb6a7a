// LoRA deltas on the GPU (see lora_cuda.h): a split-K shrink launch (a CTA per 512-wide chunk of `in`, row tile
// and 8 rank indices of the targets; one warp per rank index, 16-byte loads) writing partial sums, and an expand
// launch (a thread per output column of every target and a row tile) that first sums its rows' partials once into
// shared memory. kRows 1: the gathered decode form (each row its own slot); kRows 8: the segmented form, each slot's
// weights loaded once per run of rows that share it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
#include "kernels/lora/lora_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kChunk = 512;  // `in` elements per shrink CTA
constexpr int kShrinkWarps = 8;
constexpr int kExpandThreads = 128;
constexpr int kSegmentRows = 8;           // rows per CTA on the segmented path
constexpr int64_t kGatheredMaxRows = 64;  // steps up to this many rows take the gathered path
constexpr int kMaxJ = kLoraCudaMaxTargets * static_cast<int>(kLoraCudaMaxRank);

__host__ __device__ inline int64_t splits_of(int64_t in) {
  return (in + kChunk - 1) / kChunk;
}

// One lane's share of a 512-wide chunk of a row: 16-bit rows as two 16-byte packs (lane l: packs l and l + 32),
// f32 rows as 16 values strided by the warp (coalesced). Columns at or past `in` read as zero.
template <typename T>
struct Frag {
  static constexpr bool kSixteen = sizeof(T) == 2;
  uint4 pack[kSixteen ? 2 : 1];
  float value[kSixteen ? 1 : 16];

  __device__ __forceinline__ void load(const T* row, int64_t c0, int64_t in, int lane, bool read_only) {
    if constexpr (kSixteen) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int64_t c = c0 + k * 256 + lane * 8;
        const uint4* at = reinterpret_cast<const uint4*>(row + c);
        pack[k] = c < in ? (read_only ? __ldg(at) : *at) : make_uint4(0, 0, 0, 0);
      }
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const int64_t c = c0 + k * 32 + lane;
        value[k] = c < in ? (read_only ? __ldg(row + c) : row[c]) : 0.0f;
      }
    }
  }
};

template <typename T>
__device__ __forceinline__ float dot(const Frag<T>& a, const Frag<T>& x) {
  float acc = 0.0f;
  if constexpr (Frag<T>::kSixteen) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t av[4] = {a.pack[k].x, a.pack[k].y, a.pack[k].z, a.pack[k].w};
      const uint32_t xv[4] = {x.pack[k].x, x.pack[k].y, x.pack[k].z, x.pack[k].w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 af = packed_to_float2<T>(av[w]), xf = packed_to_float2<T>(xv[w]);
        acc = fmaf(xf.x, af.x, fmaf(xf.y, af.y, acc));
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) acc = fmaf(x.value[k], a.value[k], acc);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

// Partial t[row][j] over chunk blockIdx.x, for j = blockIdx.z * kShrinkWarps + warp over every target's r_max
// indices: workspace[(chunk * rows + row) * J + j].
template <typename T, int kRows>
__global__ void __launch_bounds__(32 * kShrinkWarps) shrink_kernel(const __grid_constant__ LoraCudaArgs p) {
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int64_t J = p.num_targets * p.r_max;
  const int64_t j = int64_t{blockIdx.z} * kShrinkWarps + threadIdx.x / 32;
  if (j >= J) return;
  const LoraCudaTarget& tg = p.target[j / p.r_max];
  const int64_t jj = j % p.r_max, c0 = int64_t{blockIdx.x} * kChunk, row0 = int64_t{blockIdx.y} * kRows;
  const T* x = static_cast<const T*>(p.x);
  float* ws = p.workspace + int64_t{blockIdx.x} * p.rows * J + j;
  if constexpr (kRows == 1) {
    const int slot = p.row_slot[row0];
    if (slot < 0 || jj >= tg.ranks[slot * p.param_stride]) return;
    Frag<T> fa, fx;
    fa.load(static_cast<const T*>(tg.a) + slot * tg.a_slot_stride + jj * p.in, c0, p.in, lane, true);
    pdl_wait();  // x is the previous kernel's output; the workspace its input
    fx.load(x + row0 * p.x_ld, c0, p.in, lane, false);
    const float v = dot(fa, fx);
    if (lane == 0) ws[row0 * J] = v;
  } else {
    pdl_wait();
    const int64_t n = min(int64_t{kRows}, p.rows - row0);
    for (int64_t i = 0; i < n; ++i) {
      const int slot = p.row_slot[row0 + i];
      bool seen = slot < 0;
      for (int64_t e = 0; e < i && !seen; ++e) seen = p.row_slot[row0 + e] == slot;
      if (seen || jj >= tg.ranks[slot * p.param_stride]) continue;
      Frag<T> fa;  // this slot's A row, once for every row of the tile under it
      fa.load(static_cast<const T*>(tg.a) + slot * tg.a_slot_stride + jj * p.in, c0, p.in, lane, true);
      for (int64_t k = i; k < n; ++k) {
        if (p.row_slot[row0 + k] != slot) continue;
        Frag<T> fx;
        fx.load(x + (row0 + k) * p.x_ld, c0, p.in, lane, false);
        const float v = dot(fa, fx);
        if (lane == 0) ws[(row0 + k) * J] = v;
      }
    }
  }
}

// B_s's row `o` values j0 .. j0 + 7 as f32, those at or past `rank` as zero (never read: past a slot's rank the
// storage may hold anything).
template <typename T>
__device__ __forceinline__ void load8(const T* b_row, int64_t j0, int64_t rank, float (&v)[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 pk = __ldg(reinterpret_cast<const uint4*>(b_row + j0));
    const uint32_t w[4] = {pk.x, pk.y, pk.z, pk.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = packed_to_float2<T>(w[k]);
      v[2 * k] = j0 + 2 * k < rank ? f.x : 0.0f;
      v[2 * k + 1] = j0 + 2 * k + 1 < rank ? f.y : 0.0f;
    }
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = j0 + k < rank ? __ldg(b_row + j0 + k) : 0.0f;
  }
}

template <typename T, typename TY, int kRows>
__global__ void __launch_bounds__(kExpandThreads) expand_kernel(const __grid_constant__ LoraCudaArgs p) {
  pdl_trigger();
  __shared__ float t[kRows][kMaxJ];
  const int64_t J = p.num_targets * p.r_max, row0 = int64_t{blockIdx.y} * kRows;
  const int64_t n = min(int64_t{kRows}, p.rows - row0);
  // This thread's column: target ti's column oc.
  int ti = 0;
  int64_t oc = int64_t{blockIdx.x} * kExpandThreads + threadIdx.x;
  while (ti + 1 < p.num_targets && oc >= p.target[ti].out) oc -= p.target[ti++].out;
  const LoraCudaTarget& tg = p.target[ti];
  const bool active = oc < tg.out;
  // The gathered form starts its row's first 16 B values before waiting (weights are immutable).
  float pre[2][8] = {};
  int pre_slot = -1;
  int64_t pre_rank = 0;
  if constexpr (kRows == 1) {
    pre_slot = p.row_slot[row0];
    if (active && pre_slot >= 0) {
      pre_rank = tg.ranks[pre_slot * p.param_stride];
      const T* b_row = static_cast<const T*>(tg.b) + pre_slot * tg.b_slot_stride + oc * p.r_max;
      if (pre_rank > 0) load8(b_row, 0, pre_rank, pre[0]);
      if (pre_rank > 8) load8(b_row, 8, pre_rank, pre[1]);
    }
  }
  pdl_wait();
  const int64_t splits = splits_of(p.in);
  for (int64_t idx = threadIdx.x; idx < n * J; idx += kExpandThreads) {
    const int64_t i = idx / J, j = idx % J;
    const int slot = p.row_slot[row0 + i];
    float v = 0.0f;
    if (slot >= 0 && j % p.r_max < p.target[j / p.r_max].ranks[slot * p.param_stride]) {
      const float* ws = p.workspace + (row0 + i) * J + j;
      for (int64_t s = 0; s < splits; ++s) v += ws[s * p.rows * J];
    }
    t[i][j] = v;
  }
  __syncthreads();
  if (!active) return;
  if constexpr (kRows == 1) {
    if (pre_slot < 0 || pre_rank == 0) return;
    const float* t0 = &t[0][ti * p.r_max];
    float acc = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(pre[0][e], t0[e], acc);
    if (pre_rank > 8) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(pre[1][e], t0[8 + e], acc);
    }
    const T* b_row = static_cast<const T*>(tg.b) + pre_slot * tg.b_slot_stride + oc * p.r_max;
    for (int64_t j0 = 16; j0 < pre_rank; j0 += 8) {
      float v[8];
      load8(b_row, j0, pre_rank, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(v[e], t0[j0 + e], acc);
    }
    TY* y = static_cast<TY*>(tg.y) + row0 * p.y_ld + oc;
    *y = from_f32<TY>(to_f32(*y) + acc * tg.scales[pre_slot * p.param_stride]);
    return;
  }
  float acc[kRows] = {};
  for (int64_t i = 0; i < n; ++i) {
    const int slot = p.row_slot[row0 + i];
    bool seen = slot < 0;
    for (int64_t e = 0; e < i && !seen; ++e) seen = p.row_slot[row0 + e] == slot;
    if (seen) continue;
    const int64_t rank = tg.ranks[slot * p.param_stride];
    const T* b_row = static_cast<const T*>(tg.b) + slot * tg.b_slot_stride + oc * p.r_max;
    for (int64_t j0 = 0; j0 < rank; j0 += 8) {
      float v[8];  // this slot's B values, once for every row of the tile under it
      load8(b_row, j0, rank, v);
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        if (k < i || k >= n || p.row_slot[row0 + k] != slot) continue;
        const float* tk = &t[k][ti * p.r_max + j0];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[k] = fmaf(v[e], tk[e], acc[k]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (i >= n) break;
    const int slot = p.row_slot[row0 + i];
    if (slot < 0 || tg.ranks[slot * p.param_stride] == 0) continue;
    TY* y = static_cast<TY*>(tg.y) + (row0 + i) * p.y_ld + oc;
    *y = from_f32<TY>(to_f32(*y) + acc[i] * tg.scales[slot * p.param_stride]);
  }
}

template <typename T, typename TY, int kRows>
Status launch(const LoraCudaArgs& p, cudaStream_t stream) {
  const int64_t J = p.num_targets * p.r_max, tiles = (p.rows + kRows - 1) / kRows;
  int64_t total_out = 0;
  for (int i = 0; i < p.num_targets; ++i) total_out += p.target[i].out;
  const dim3 shrink_grid(static_cast<unsigned>(splits_of(p.in)), static_cast<unsigned>(tiles),
                         static_cast<unsigned>((J + kShrinkWarps - 1) / kShrinkWarps));
  CUDA_RETURN_IF_ERROR(launch_pdl(shrink_kernel<T, kRows>, shrink_grid, dim3(32 * kShrinkWarps), 0, stream, p));
  const dim3 expand_grid(static_cast<unsigned>((total_out + kExpandThreads - 1) / kExpandThreads),
                         static_cast<unsigned>(tiles));
  CUDA_RETURN_IF_ERROR(launch_pdl(expand_kernel<T, TY, kRows>, expand_grid, dim3(kExpandThreads), 0, stream, p));
  return ok_status();
}

template <typename T>
Status launch_for(const LoraCudaArgs& p, cudaStream_t stream) {
  const bool f32_out = p.y_dtype == DType::kF32;
  if (p.rows <= kGatheredMaxRows) return f32_out ? launch<T, float, 1>(p, stream) : launch<T, T, 1>(p, stream);
  return f32_out ? launch<T, float, kSegmentRows>(p, stream) : launch<T, T, kSegmentRows>(p, stream);
}

}  // namespace

int64_t lora_cuda_workspace_floats(int64_t rows, int64_t in, int64_t r_max, int num_targets) {
  return splits_of(in) * rows * r_max * num_targets;
}

Status lora_apply_cuda(const LoraCudaArgs& p, cudaStream_t stream) {
  const bool sixteen = p.dtype == DType::kBF16 || p.dtype == DType::kF16;
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  bool targets_ok = p.num_targets >= 1 && p.num_targets <= kLoraCudaMaxTargets;
  for (int i = 0; targets_ok && i < p.num_targets; ++i) {
    const LoraCudaTarget& t = p.target[i];
    targets_ok =
        t.out > 0 && t.a != nullptr && t.b != nullptr && t.y != nullptr && t.ranks != nullptr && t.scales != nullptr &&
        (!sixteen || (t.a_slot_stride % 8 == 0 && t.b_slot_stride % 8 == 0 && !misaligned(t.a) && !misaligned(t.b)));
  }
  if (!targets_ok || p.rows < 0 || p.in <= 0 || p.r_max <= 0 || p.r_max > kLoraCudaMaxRank ||
      (p.y_dtype != DType::kF32 && p.y_dtype != p.dtype) || p.r_max % 8 != 0 ||
      (sixteen && (p.in % 8 != 0 || p.x_ld % 8 != 0 || misaligned(p.x)))) {
    return invalid_argument(
        "lora_apply_cuda: 1..3 targets with weights, ranks, scales and outputs; r_max a multiple of 8 up to 256; y in "
        "f32 "
        "or the input dtype; 16-bit inputs need in, x_ld and the slot strides multiples of 8 and 16-byte aligned x, A "
        "and B");
  }
  if (p.rows == 0) return ok_status();
  const int64_t tiles = (p.rows + kSegmentRows - 1) / kSegmentRows;
  if ((p.rows <= kGatheredMaxRows ? p.rows : tiles) > 65535) return invalid_argument("lora_apply_cuda: too many rows");
  if (p.workspace == nullptr || p.workspace_floats < lora_cuda_workspace_floats(p.rows, p.in, p.r_max, p.num_targets)) {
    return invalid_argument("lora_apply_cuda: the workspace holds " + std::to_string(p.workspace_floats) +
                            " floats; this call needs " +
                            std::to_string(lora_cuda_workspace_floats(p.rows, p.in, p.r_max, p.num_targets)));
  }
  switch (p.dtype) {
    case DType::kBF16: return launch_for<__nv_bfloat16>(p, stream);
    case DType::kF16: return launch_for<__half>(p, stream);
    case DType::kF32: return launch_for<float>(p, stream);
    default: return unimplemented(std::string("lora_apply_cuda in ") + dtype_name(p.dtype));
  }
}

}  // namespace mmserve::kernels
