// LoRA deltas on the GPU (see lora_cuda.h): a split-K shrink launch (a CTA per 512-wide chunk of `in`, row tile
// and 8 rank indices of the targets; one warp per rank index, 16-byte loads) writing partial sums, and an expand
// launch that first sums its rows' partials once into shared memory, then adds B_s t to its columns of every
// target. kRows 1, the gathered decode form (each row its own slot): the expand takes a row and 512 columns a CTA;
// kRows 8, the segmented form: 8 rows and 128 columns, each slot's weights loaded once per run of rows under it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
#include "kernels/lora/lora_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kChunk = 512;  // `in` elements per shrink CTA (2 16-byte loads a lane; 1024 measured slower)
constexpr int kPacks = kChunk / 256, kValues = kChunk / 32;
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
  uint4 pack[kSixteen ? kPacks : 1];
  float value[kSixteen ? 1 : kValues];

  __device__ __forceinline__ void load(const T* row, int64_t c0, int64_t in, int lane, bool read_only) {
    if constexpr (kSixteen) {
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t c = c0 + k * 256 + lane * 8;
        const uint4* at = reinterpret_cast<const uint4*>(row + c);
        pack[k] = c < in ? (read_only ? __ldg(at) : *at) : make_uint4(0, 0, 0, 0);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kValues; ++k) {
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
    for (int k = 0; k < kPacks; ++k) {
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
    for (int k = 0; k < kValues; ++k) acc = fmaf(x.value[k], a.value[k], acc);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

// Partial t[row][j] over chunk blockIdx.x, for j = blockIdx.z * kShrinkWarps + warp over every target's r_max
// indices: workspace[(chunk * rows + row) * J + j].
// One warp per rank index: kRows 1 (gathered), of one row; kRows 8 (segmented), for the tile's rows.
template <typename T, int kRows>
__global__ void __launch_bounds__(32 * kShrinkWarps) shrink_kernel(const __grid_constant__ LoraCudaArgs p) {
  pdl_trigger();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t J = p.num_targets * p.r_max;
  const int64_t c0 = int64_t{blockIdx.x} * kChunk, row0 = int64_t{blockIdx.y} * kRows;
  const T* x = static_cast<const T*>(p.x);
  float* ws = p.workspace + int64_t{blockIdx.x} * p.rows * J;  // this chunk's partials [rows, J]
  if constexpr (kRows == 1) {
    const int64_t j = int64_t{blockIdx.z} * kShrinkWarps + warp;
    if (j >= J) return;
    const LoraCudaTarget& tg = p.target[j / p.r_max];
    const int slot = p.row_slot[row0];
    const int64_t jj = j % p.r_max;
    if (slot < 0 || jj >= tg.ranks[slot * p.param_stride]) return;
    Frag<T> fa, fx;
    fa.load(static_cast<const T*>(tg.a) + slot * tg.a_slot_stride + jj * p.in, c0, p.in, lane, true);
    pdl_wait();  // x is the previous kernel's output; the workspace its input
    fx.load(x + row0 * p.x_ld, c0, p.in, lane, false);
    const float v = dot(fa, fx);
    if (lane == 0) ws[row0 * J + j] = v;
  } else {
    const int64_t j = int64_t{blockIdx.z} * kShrinkWarps + warp;
    if (j >= J) return;
    const LoraCudaTarget& tg = p.target[j / p.r_max];
    const int64_t jj = j % p.r_max;
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
        if (lane == 0) ws[(row0 + k) * J + j] = v;
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

// One (row, rank index)'s shrink partials (one per chunk of `in`, `stride` apart), 8 loads at a time issued
// together (a chain of dependent L2 loads was most of an expand's time), summed in chunk order: the same sum every
// run.
__device__ __forceinline__ float sum_partials(const float* ws, int64_t splits, int64_t stride) {
  float v = 0.0f;
  for (int64_t s0 = 0; s0 < splits; s0 += 8) {
    float part[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) part[k] = s0 + k < splits ? ws[(s0 + k) * stride] : 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) v += part[k];
  }
  return v;
}

// The gathered expand (decode: each row its own slot): a CTA per row and 512 output columns (4 a thread, 128
// apart: each access coalesced), the row's partial sums once into shared memory. Its time is a chain of latencies
// (slot -> rank -> B before the wait; then y and the partials; then the product), so everything that does not
// depend on the previous kernel is issued before the wait and y's loads with the partials'.
constexpr int kGatherCols = 4;

template <typename T, typename TY>
__global__ void __launch_bounds__(kExpandThreads) expand_gathered_kernel(const __grid_constant__ LoraCudaArgs p) {
  pdl_trigger();
  __shared__ float t[kMaxJ];
  const int64_t J = p.num_targets * p.r_max, row = blockIdx.y;
  const int slot = p.row_slot[row];
  if (slot < 0) return;  // the whole CTA: its row has no adapter
  const float weight = p.row_weight != nullptr ? p.row_weight[row] : 1.0f;
  int ti[kGatherCols], oc[kGatherCols], rank[kGatherCols];
  float pre[kGatherCols][2][8];  // B's first 16 values of each column (zeros past the rank)
#pragma unroll
  for (int k = 0; k < kGatherCols; ++k) {
    ti[k] = 0, rank[k] = 0;
    oc[k] = static_cast<int>(blockIdx.x * kExpandThreads * kGatherCols + k * kExpandThreads + threadIdx.x);
    while (ti[k] + 1 < p.num_targets && oc[k] >= p.target[ti[k]].out) oc[k] -= static_cast<int>(p.target[ti[k]++].out);
    const LoraCudaTarget& tg = p.target[ti[k]];
    if (oc[k] < tg.out) rank[k] = tg.ranks[slot * p.param_stride];
    const T* b_row = static_cast<const T*>(tg.b) + slot * tg.b_slot_stride + int64_t{oc[k]} * p.r_max;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (rank[k] > 8 * c) {
        load8(b_row, 8 * c, rank[k], pre[k][c]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) pre[k][c][e] = 0.0f;
      }
    }
  }
  const bool first_has =
      threadIdx.x < J && threadIdx.x % p.r_max < p.target[threadIdx.x / p.r_max].ranks[slot * p.param_stride];
  pdl_wait();
  float y_old[kGatherCols];  // y is the previous kernel's output: read now, beside the partials
#pragma unroll
  for (int k = 0; k < kGatherCols; ++k) {
    y_old[k] = rank[k] > 0 ? to_f32(static_cast<const TY*>(p.target[ti[k]].y)[row * p.y_ld + oc[k]]) : 0.0f;
  }
  // The row's partial sums.
  const int64_t splits = splits_of(p.in), stride = p.rows * J;
  for (int64_t j = threadIdx.x; j < J; j += kExpandThreads) {
    float v = 0.0f;
    if (j == threadIdx.x ? first_has : j % p.r_max < p.target[j / p.r_max].ranks[slot * p.param_stride]) {
      v = sum_partials(p.workspace + row * J + j, splits, stride);
    }
    t[j] = v;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kGatherCols; ++k) {
    if (rank[k] == 0) continue;
    const LoraCudaTarget& tg = p.target[ti[k]];
    const float* tk = &t[ti[k] * p.r_max];
    float acc = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(pre[k][0][e], tk[e], acc);
    if (rank[k] > 8) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(pre[k][1][e], tk[8 + e], acc);
    }
    const T* b_row = static_cast<const T*>(tg.b) + slot * tg.b_slot_stride + int64_t{oc[k]} * p.r_max;
    for (int j0 = 16; j0 < rank[k]; j0 += 8) {
      float v[8];
      load8(b_row, j0, rank[k], v);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = fmaf(v[e], tk[j0 + e], acc);
    }
    static_cast<TY*>(tg.y)[row * p.y_ld + oc[k]] =
        from_f32<TY>(y_old[k] + acc * tg.scales[slot * p.param_stride] * weight);
  }
}

// The segmented expand (long steps): a CTA per 8-row tile and 128 columns; each slot's B values once per run of
// rows under it.
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
  pdl_wait();
  const int64_t splits = splits_of(p.in), stride = p.rows * J;
  for (int64_t idx = threadIdx.x; idx < n * J; idx += kExpandThreads) {
    const int64_t i = idx / J, j = idx % J;
    const int slot = p.row_slot[row0 + i];
    float v = 0.0f;
    if (slot >= 0 && j % p.r_max < p.target[j / p.r_max].ranks[slot * p.param_stride]) {
      v = sum_partials(p.workspace + (row0 + i) * J + j, splits, stride);
    }
    t[i][j] = v;
  }
  __syncthreads();
  if (!active) return;
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
    const float weight = p.row_weight != nullptr ? p.row_weight[row0 + i] : 1.0f;
    TY* y = static_cast<TY*>(tg.y) + (row0 + i) * p.y_ld + oc;
    *y = from_f32<TY>(to_f32(*y) + acc[i] * tg.scales[slot * p.param_stride] * weight);
  }
}

template <typename T, typename TY, int kRows>
Status launch(const LoraCudaArgs& p, cudaStream_t stream) {
  const int64_t J = p.num_targets * p.r_max, tiles = (p.rows + kRows - 1) / kRows;
  const dim3 shrink_grid(static_cast<unsigned>(splits_of(p.in)), static_cast<unsigned>(tiles),
                         static_cast<unsigned>((J + kShrinkWarps - 1) / kShrinkWarps));
  CUDA_RETURN_IF_ERROR(launch_pdl(shrink_kernel<T, kRows>, shrink_grid, dim3(32 * kShrinkWarps), 0, stream, p));
  int64_t total_out = 0;
  for (int i = 0; i < p.num_targets; ++i) total_out += p.target[i].out;
  if constexpr (kRows == 1) {
    const int64_t per_cta = int64_t{kExpandThreads} * kGatherCols;
    const dim3 grid(static_cast<unsigned>((total_out + per_cta - 1) / per_cta), static_cast<unsigned>(p.rows));
    CUDA_RETURN_IF_ERROR(launch_pdl(expand_gathered_kernel<T, TY>, grid, dim3(kExpandThreads), 0, stream, p));
  } else {
    const dim3 grid(static_cast<unsigned>((total_out + kExpandThreads - 1) / kExpandThreads),
                    static_cast<unsigned>(tiles));
    CUDA_RETURN_IF_ERROR(launch_pdl(expand_kernel<T, TY, kRows>, grid, dim3(kExpandThreads), 0, stream, p));
  }
  return ok_status();
}

template <typename T>
Status launch_for(const LoraCudaArgs& p, cudaStream_t stream) {
  const bool f32_out = p.y_dtype == DType::kF32;
  if (p.rows <= kGatheredMaxRows) {
    return f32_out ? launch<T, float, 1>(p, stream) : launch<T, T, 1>(p, stream);
  }
  return f32_out ? launch<T, float, kSegmentRows>(p, stream) : launch<T, T, kSegmentRows>(p, stream);
}

Status run(const LoraCudaArgs& p, cudaStream_t stream) {
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
        "f32 or the input dtype; 16-bit inputs need in, x_ld and the slot strides multiples of 8 and 16-byte aligned "
        "x, A and B");
  }
  if (p.rows == 0) return ok_status();
  const int64_t tiles = (p.rows + kSegmentRows - 1) / kSegmentRows;
  if ((p.rows <= kGatheredMaxRows ? p.rows : tiles) > 65535) return invalid_argument("lora_apply_cuda: too many rows");
  const int64_t need = lora_cuda_workspace_floats(p.rows, p.in, p.r_max, p.num_targets);
  if (p.workspace == nullptr || p.workspace_floats < need) {
    return invalid_argument("lora_apply_cuda: the workspace holds " + std::to_string(p.workspace_floats) +
                            " floats; this call needs " + std::to_string(need));
  }
  switch (p.dtype) {
    case DType::kBF16: return launch_for<__nv_bfloat16>(p, stream);
    case DType::kF16: return launch_for<__half>(p, stream);
    case DType::kF32: return launch_for<float>(p, stream);
    default: return unimplemented(std::string("lora_apply_cuda in ") + dtype_name(p.dtype));
  }
}

}  // namespace

int64_t lora_cuda_workspace_floats(int64_t rows, int64_t in, int64_t r_max, int num_targets) {
  return splits_of(in) * rows * r_max * num_targets;
}

Status lora_apply_cuda(const LoraCudaArgs& p, cudaStream_t stream) {
  return run(p, stream);
}

}  // namespace mmserve::kernels
