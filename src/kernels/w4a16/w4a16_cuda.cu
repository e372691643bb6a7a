// The W4A16 GEMM on the GPU (see w4a16_cuda.h for the contract, w4a16.h and w4a16_layout.h for the packed layout).
//
// m <= 64, mma_kernel: a CTA of 4 warps owns 4 row strips of 16 output rows (64 outputs) and one split's range of
// 256-column chunks. The CTA copies x's [rows, 256] slices of up to stage_chunks() chunks at once into shared memory
// (rows padded to the fragment's 8 tokens with zeros; gathered through perm for act-order), and each warp streams
// its strip's chunks (four 16 x 64 tiles: one 16-byte word group a lane each, with the lane's scales/zeros of each
// tile) through a ring of kStages shared-memory slots with cp.async, three chunks in flight behind the one it
// multiplies; it turns a chunk's words into A fragments of q - zero and runs mma.sync.m16n8k16 against ldmatrix'd B
// fragments of x, 8 tokens an m-tile, into f32 sums per group that are scaled once at the group's end. The weights
// are the A operand (16 rows of W x 16 columns), x the B operand, so one m-tile of 8 tokens covers decode's
// m = 1..8 without wasting 15/16 of the MMA as an x-as-A kernel would. What we follow from Marlin (IST-DASLab/marlin
// marlin_cuda_kernel.cu, vLLM csrc/quantization/gptq_marlin): weights pre-permuted offline so a lane's 16 bytes
// are its fragments, the lop3/magic-number dequantisation, a cp.async multi-stage ring of the weights, split-K over
// SMs with the reduction in the same launch (the last split CTA of a column block sums the f32 partials in split
// order: deterministic, where Marlin's semaphore orders in-place adds). What we do not: Marlin's 4-bit zeros (ours
// are 16-bit) and its scales in the dtype (ours multiply each group's f32 sum).
//
// m > 64: dequant_kernel writes W [n, k] in the dtype to the workspace (columns in packed order), gather_kernel
// permutes x's columns when act-order, and cuBLASLt multiplies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/mma_ptx.cuh"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/common/cuda_pdl.cuh"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/w4a16/w4a16_cuda.h"
#include "kernels/w4a16/w4a16_layout.h"

namespace mmserve::kernels {
namespace {

namespace layout = w4a16_layout;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kChunkTiles = 4;                // 64-column tiles per chunk
constexpr int kChunkCols = kChunkTiles * 64;  // 256
// x's shared rows padded by 16 bytes: the 8 rows one ldmatrix matrix reads start in 8 different 16-byte bank groups.
constexpr int kXStride = kChunkCols + 8;
constexpr int64_t kSplitRowsBudget = 256;  // splits * m at most this (bounds the partials' bytes)

// The 16-bit pair type of T and the magic number base | base that turns a nibble into base + value.
template <typename T>
struct Pair;
template <>
struct Pair<__half> {
  using Type = __half2;
  static constexpr uint32_t kMagic = layout::kMagicF16x2;
};
template <>
struct Pair<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static constexpr uint32_t kMagic = layout::kMagicBf16x2;
};

// (v - zb) * s on both 16-bit halves, v = base + q and zb = base + zero: the difference is exact, the product rounds
// once (round to nearest even), which is the twin's round_dtype((q - zero) * scale).
template <typename T>
__device__ __forceinline__ uint32_t sub_mul(uint32_t v, uint32_t zb, uint32_t s) {
  typename Pair<T>::Type a, b, c;
  memcpy(&a, &v, 4), memcpy(&b, &zb, 4), memcpy(&c, &s, 4);
  const typename Pair<T>::Type r = __hmul2(__hsub2(a, b), c);
  uint32_t u;
  memcpy(&u, &r, 4);
  return u;
}

// A lane's {scale, base + zero} of row g (sz.x) and of row g + 8 (sz.y), each spread over both 16-bit halves.
struct RowScales {
  uint32_t s_lo, z_lo, s_hi, z_hi;
};

__device__ __forceinline__ RowScales spread(uint2 sz) {
  return {__byte_perm(sz.x, 0, 0x1010), __byte_perm(sz.x, 0, 0x3232), __byte_perm(sz.y, 0, 0x1010),
          __byte_perm(sz.y, 0, 0x3232)};
}

// One packed word (a lane's 8 values of one 16-column step) -> the dequantised A fragment registers a0..a3 (a0, a2:
// row g; a1, a3: row g + 8), round_dtype((q - zero) * scale): the prefill path's dequantise kernel.
template <typename T>
__device__ __forceinline__ void dequant(uint32_t word, const RowScales& rs, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = ((word >> (4 * i)) & 0x000f000fu) | Pair<T>::kMagic;  // one lop3 after the shift
    a[i] = sub_mul<T>(v, (i & 1) ? rs.z_hi : rs.z_lo, (i & 1) ? rs.s_hi : rs.s_lo);
  }
}

// v - zb on both 16-bit halves: q - zero, exact (two integers offset by the same base, below 2^8 / 2^11).
template <typename T>
__device__ __forceinline__ uint32_t sub_zero(uint32_t v, uint32_t zb) {
  typename Pair<T>::Type a, b;
  memcpy(&a, &v, 4), memcpy(&b, &zb, 4);
  const typename Pair<T>::Type r = __hsub2(a, b);
  uint32_t u;
  memcpy(&u, &r, 4);
  return u;
}

// The mma kernel's A fragments: q - zero, exact, in the dtype (three instructions a register: shift, lop3, sub);
// the scale is applied to the f32 sums of each group instead (flush_group), which saves the fourth, a multiply
// per register, and the rounding of every weight to the dtype.
template <typename T>
__device__ __forceinline__ void unscaled(uint32_t word, uint32_t z_lo, uint32_t z_hi, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = ((word >> (4 * i)) & 0x000f000fu) | Pair<T>::kMagic;
    a[i] = sub_zero<T>(v, (i & 1) ? z_hi : z_lo);
  }
}

// The scale of the lane's row g (low 16 bits of sz.x) and of row g + 8 (of sz.y), as f32.
template <typename T>
__device__ __forceinline__ float2 scales_of(uint2 sz);
template <>
__device__ __forceinline__ float2 scales_of<__nv_bfloat16>(uint2 sz) {
  return make_float2(__uint_as_float(sz.x << 16), __uint_as_float(sz.y << 16));
}
template <>
__device__ __forceinline__ float2 scales_of<__half>(uint2 sz) {
  return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(sz.x & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<unsigned short>(sz.y & 0xffffu))));
}

// A group's sums (C fragments: c0, c1 row g; c2, c3 row g + 8) scaled into the accumulators, then zeroed.
template <int kMTiles>
__device__ __forceinline__ void flush_group(float2 s, float (&group)[kMTiles][4], float (&acc)[kMTiles][4]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    acc[mt][0] = fmaf(s.x, group[mt][0], acc[mt][0]), acc[mt][1] = fmaf(s.x, group[mt][1], acc[mt][1]);
    acc[mt][2] = fmaf(s.y, group[mt][2], acc[mt][2]), acc[mt][3] = fmaf(s.y, group[mt][3], acc[mt][3]);
    group[mt][0] = group[mt][1] = group[mt][2] = group[mt][3] = 0.0f;
  }
}

// Where and how the result goes (W4A16Output with y).
struct OutParams {
  void* y = nullptr;
  const void* bias = nullptr;  // in y's dtype
  bool f32 = false, accumulate = false;
};

// y[row][col] = v + bias[col] (+ y[row][col]), in T or f32.
template <typename T>
__device__ __forceinline__ void write_output(const OutParams& o, int64_t n, int64_t row, int64_t col, float v) {
  const int64_t i = row * n + col;
  if (o.f32) {
    float* y = static_cast<float*>(o.y);
    if (o.bias != nullptr) v += static_cast<const float*>(o.bias)[col];
    y[i] = o.accumulate ? y[i] + v : v;
  } else {
    T* y = static_cast<T*>(o.y);
    if (o.bias != nullptr) v += to_f32(static_cast<const T*>(o.bias)[col]);
    y[i] = from_f32<T>(o.accumulate ? to_f32(y[i]) + v : v);
  }
}

struct MmaParams {
  const void* x = nullptr;
  const int32_t* perm = nullptr;
  int64_t m = 0, n = 0, k = 0, group_size = 0;
  uint32_t group_magic = 0;  // layout::group_of()'s multiplier (0 at group size 32)
  const uint4* q = nullptr;
  const uint2* sz = nullptr;
  OutParams out;
  float* partial = nullptr;      // [splits][m][n] when splits > 1
  uint32_t* counters = nullptr;  // [CTAs along n] arrivals, zero between calls (the workspace's first bytes)
  int64_t chunks_per_split = 0;
  int splits = 1;
};

// What a warp holds of one chunk while it multiplies it: its strip's four tiles (one 16-byte word group a lane each)
// and, per tile, the lane's scales/zeros entry of the tile's group; kG32 (a group size that is an odd multiple of 32:
// 32, 96, 160..., where a 64-column tile's two halves may lie in different groups): of each 32-column half's group.
template <bool kG32>
struct ChunkRegs {
  uint4 w[kChunkTiles];
  uint2 sz[kChunkTiles][kG32 ? 2 : 1];
};

// The weight ring: each warp streams its strip through kStages chunk slots of shared memory with cp.async, kStages - 1
// chunks in flight behind the one it multiplies. Registers could not do that: the loads of chunks c + 1, c + 2 into
// registers were waited for together with chunk c's (so every chunk cost a full DRAM round trip: at M = 1 the time
// did not depend on the instruction count, 3x fewer changed it by 1-4%, nor much on the split count; measured on the
// H100, 2026-12-07), while cp.async.wait_group waits for exactly the oldest group. A lane copies and later reads back
// only its own bytes, so no barrier is needed between the copy and the read.
constexpr int kStages = 4;
template <bool kG32>
struct Slot {
  static constexpr int kHalves = kG32 ? 2 : 1;
  static constexpr int kWeightBytes = kChunkTiles * 32 * 16;          // [tile][lane] 16 bytes
  static constexpr int kScaleBytes = kChunkTiles * kHalves * 32 * 8;  // [tile][half][lane] 8 bytes
  static constexpr int kBytes = kWeightBytes + kScaleBytes;
  static constexpr int kWarpBytes = kStages * kBytes;
};

// Chunk c's weights and scales into `slot` (one cp.async group when committed). wq / sz_strip: the lane's word group
// of the strip's tile 0 and its sz entry of group 0 (a warp without a strip reads the last strip's, never used);
// group_stride: sz entries per group. Tiles past the last one (a chunk cut short) re-read the last tile (never used):
// no branch around the copies.
template <bool kG32>
__device__ __forceinline__ void copy_chunk(const uint4* __restrict__ wq, const uint2* __restrict__ sz_strip,
                                           uint32_t group_stride, uint32_t magic, int c, int col_tiles, int lane,
                                           uint8_t* slot) {
#pragma unroll
  for (int j = 0; j < kChunkTiles; ++j) {
    const int kt = min(c * kChunkTiles + j, col_tiles - 1);
    cp_async_16(slot + (j * 32 + lane) * 16, wq + kt * 32);
#pragma unroll
    for (int h = 0; h < Slot<kG32>::kHalves; ++h) {
      const uint32_t group = layout::group_of(static_cast<uint32_t>(kt * 64 + 32 * h), magic);
      cp_async_8(slot + Slot<kG32>::kWeightBytes + ((j * Slot<kG32>::kHalves + h) * 32 + lane) * 8,
                 sz_strip + group * group_stride);
    }
  }
}

// The lane's bytes of a slot back into registers (after cp_async_wait).
template <bool kG32>
__device__ __forceinline__ void read_chunk(const uint8_t* slot, int lane, ChunkRegs<kG32>& r) {
#pragma unroll
  for (int j = 0; j < kChunkTiles; ++j) {
    r.w[j] = *reinterpret_cast<const uint4*>(slot + (j * 32 + lane) * 16);
#pragma unroll
    for (int h = 0; h < Slot<kG32>::kHalves; ++h) {
      r.sz[j][h] = *reinterpret_cast<const uint2*>(slot + Slot<kG32>::kWeightBytes +
                                                   ((j * Slot<kG32>::kHalves + h) * 32 + lane) * 8);
    }
  }
}

// x[:, k0 .. k0 + 256) (or fewer at the end) -> xs [kRows][kXStride], rows past m zero; gathered by perm if given.
template <int kRows>
__device__ __forceinline__ void load_x(const uint16_t* x, const int32_t* perm, int64_t m, int64_t k, int64_t k0,
                                       uint16_t* xs) {
  const int64_t width = min(int64_t{kChunkCols}, k - k0);
  if (perm == nullptr) {
    constexpr int kVecs = kChunkCols / 8;
    for (int idx = threadIdx.x; idx < kRows * kVecs; idx += kThreads) {
      const int r = idx / kVecs, v = idx % kVecs;
      if (v * 8 >= width) continue;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (r < m) value = *reinterpret_cast<const uint4*>(x + r * k + k0 + v * 8);
      *reinterpret_cast<uint4*>(xs + r * kXStride + v * 8) = value;
    }
  } else {
    for (int idx = threadIdx.x; idx < kRows * kChunkCols; idx += kThreads) {
      const int r = idx / kChunkCols, cc = idx % kChunkCols;
      if (cc >= width) continue;
      xs[r * kXStride + cc] = r < m ? x[r * k + perm[k0 + cc]] : uint16_t{0};
    }
  }
}

// One 32-column half of a 16 x 64 tile (chunk slot j, half h: words 2h and 2h + 1, zeros of the half's group) times
// x's [32, kRows] slice into the group's sums.
template <typename T, int kMTiles>
__device__ __forceinline__ void compute_half(const uint4& wv, uint2 sz, int j, int half, const uint16_t* xs, int lane,
                                             float (&group)[kMTiles][4]) {
  const uint32_t z_lo = __byte_perm(sz.x, 0, 0x3232), z_hi = __byte_perm(sz.y, 0, 0x3232);
  const uint32_t w0 = half == 0 ? wv.x : wv.z, w1 = half == 0 ? wv.y : wv.w;
  uint32_t a0[4], a1[4];
  unscaled<T>(w0, z_lo, z_hi, a0);
  unscaled<T>(w1, z_lo, z_hi, a1);
  // B fragments of the two 16-column steps, one m-tile at a time (4 registers live, not 4 per m-tile): matrix
  // q = lane / 8 is columns 8q .. 8q + 7 of this 32-column half, rows (tokens) lane % 8 of the m-tile; b[0], b[1] =
  // (b0, b1) of the first step, b[2], b[3] of the second (mma_ptx.cuh: ldmatrix_x4).
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    uint32_t b[4];
    ldmatrix_x4(b, xs + (mt * 8 + lane % 8) * kXStride + j * 64 + half * 32 + 8 * (lane / 8));
    mma_16816<T>(group[mt], a0, b[0], b[1]);
    mma_16816<T>(group[mt], a1, b[2], b[3]);
  }
}

// Chunks of x held in shared memory at once: as many as fit in 24 KB (5 at 8 rows, 1 at 32 and 64), so that at
// decode's few rows a CTA loads most ranges of x behind one barrier pair; with the weight ring (48 KB at group sizes
// that are multiples of 64) three CTAs fit an SM up to m = 32.
constexpr int stage_chunks(int m_tiles) {
  return 24576 / (8 * m_tiles * kXStride * 2) > 0 ? 24576 / (8 * m_tiles * kXStride * 2) : 1;
}

template <int kMTiles, bool kG32>
constexpr int mma_smem_bytes() {
  return stage_chunks(kMTiles) * 8 * kMTiles * kXStride * 2 + kWarps * Slot<kG32>::kWarpBytes;
}

template <typename T, int kMTiles, bool kG32>
__global__ void __launch_bounds__(kThreads, kMTiles <= 4 ? 3 : 2) mma_kernel(const __grid_constant__ MmaParams p) {
  pdl_trigger();
  constexpr int kRows = 8 * kMTiles, kStage = stage_chunks(kMTiles);
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem);  // kStage chunk slots of [kRows][kXStride]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + kStage * kRows * kXStride * 2 + warp * Slot<kG32>::kWarpBytes;  // this warp's slots
  const int row_tiles = static_cast<int>(p.n / 16), col_tiles = static_cast<int>(p.k / 64);
  const int nt = static_cast<int>(blockIdx.x) * kWarps + warp;  // this warp's 16-row strip
  const bool active = nt < row_tiles;
  const int chunks = (col_tiles + kChunkTiles - 1) / kChunkTiles;
  const int c_begin = static_cast<int>(blockIdx.y * p.chunks_per_split);
  const int c_end = min(chunks, c_begin + static_cast<int>(p.chunks_per_split));
  const int nt_read = min(nt, row_tiles - 1);  // a warp without a strip reads (never uses) the last one's
  const uint4* __restrict__ wq = p.q + static_cast<int64_t>(nt_read) * col_tiles * 32 + lane;
  const uint2* __restrict__ sz_strip = p.sz + nt_read * 8 + g;
  const uint32_t group_stride = static_cast<uint32_t>(row_tiles * 8);

  // The first kStages - 1 chunks are requested before the wait (weights are immutable); one group each, empty past
  // the range, so that group i is always chunk c_begin + i.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (c_begin + i < c_end)
      copy_chunk<kG32>(wq, sz_strip, group_stride, p.group_magic, c_begin + i, col_tiles, lane,
                       ring + i * Slot<kG32>::kBytes);
    cp_async_commit();
  }
  // acc: the scaled sum so far; group: the current group's unscaled sums of (q - zero) * x, scaled into acc at the
  // group's end (flush_group). left: 32-column halves until the current group ends (the range may start inside one).
  float acc[kMTiles][4], group[kMTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
    group[mt][0] = group[mt][1] = group[mt][2] = group[mt][3] = 0.0f;
  }
  const int halves_per_group = static_cast<int>(p.group_size / 32);
  int left = halves_per_group - static_cast<int>((int64_t{c_begin} * kChunkCols) % p.group_size) / 32;
  uint2 last_sz = make_uint2(0, 0);  // the last half's entry: its scales close a range that ends inside a group
  pdl_wait();                        // x is the previous kernel's output; y / the partials may be read by it

  const uint16_t* x = static_cast<const uint16_t*>(p.x);
  int stage_begin = c_begin, stage_end = c_begin;  // chunks [stage_begin, stage_end) of x are in xs
  for (int c = c_begin; c < c_end; ++c) {
    const int i = c - c_begin;
    if (c == stage_end) {  // the same c for every warp of the CTA: the barriers are uniform
      __syncthreads();     // every warp is done with the previous stage's xs
      stage_begin = c, stage_end = min(c_end, c + kStage);
      for (int s = c; s < stage_end; ++s)
        load_x<kRows>(x, p.perm, p.m, p.k, int64_t{s} * kChunkCols, xs + (s - c) * kRows * kXStride);
      __syncthreads();
    }
    cp_async_wait<kStages - 2>();  // group i (chunk c) is in; the kStages - 2 after it may still be in flight
    ChunkRegs<kG32> cur;
    read_chunk<kG32>(ring + (i % kStages) * Slot<kG32>::kBytes, lane, cur);
    // Chunk c + kStages - 1 into the slot chunk c - 1 used (read back in the previous iteration).
    if (c + kStages - 1 < c_end)
      copy_chunk<kG32>(wq, sz_strip, group_stride, p.group_magic, c + kStages - 1, col_tiles, lane,
                       ring + ((i + kStages - 1) % kStages) * Slot<kG32>::kBytes);
    cp_async_commit();
    if (!active) continue;
    const uint16_t* xc = xs + (c - stage_begin) * kRows * kXStride;
#pragma unroll
    for (int j = 0; j < kChunkTiles; ++j) {
      if (c * kChunkTiles + j >= col_tiles) break;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint2 sz = cur.sz[j][kG32 ? half : 0];
        compute_half<T, kMTiles>(cur.w[j], sz, j, half, xc, lane, group);
        last_sz = sz;
        if (--left == 0) {
          flush_group<kMTiles>(scales_of<T>(sz), group, acc);
          left = halves_per_group;
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the kernel (the trailing groups are empty)
  if (left != halves_per_group) flush_group<kMTiles>(scales_of<T>(last_sz), group, acc);  // a group cut by the range

  // C fragment: c0 = (row g, token 2t), c1 = (g, 2t + 1), c2 = (g + 8, 2t), c3 = (g + 8, 2t + 1).
  const int64_t col_lo = int64_t{nt} * 16 + g;
  if (active) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = mt * 8 + 2 * t + (e & 1), col = col_lo + (e < 2 ? 0 : 8);
        if (row >= p.m) continue;
        if (p.splits == 1) {
          write_output<T>(p.out, p.n, row, col, acc[mt][e]);
        } else {
          p.partial[(int64_t{blockIdx.y} * p.m + row) * p.n + col] = acc[mt][e];
        }
      }
    }
  }
  if (p.splits == 1) return;

  // Split-K: the last of the column block's split CTAs to finish sums every split's partials of the block's 64
  // columns in split order (the same result every run, whichever CTA comes last) and writes y, instead of a
  // second launch (the threadFenceReduction pattern of the CUDA samples). The last arrival also puts the counter
  // back to zero: every arrival of this call is in, and the next call on this workspace is stream-ordered after.
  __shared__ bool last;
  __threadfence();  // this CTA's partials are visible device-wide before its arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t arrived = atomicAdd(p.counters + blockIdx.x, 1u);
    last = arrived == static_cast<uint32_t>(p.splits - 1);
    if (last) p.counters[blockIdx.x] = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t col0 = int64_t{blockIdx.x} * kWarps * 16, cols = min(int64_t{kWarps * 16}, p.n - col0);
  const int64_t count = p.m * p.n;
  for (int64_t i = threadIdx.x; i < p.m * cols; i += kThreads) {
    const int64_t row = i / cols, col = col0 + i % cols;
    float v = 0.0f;
    for (int s = 0; s < p.splits; ++s) v += __ldcg(p.partial + s * count + row * p.n + col);  // L2: other SMs wrote
    write_output<T>(p.out, p.n, row, col, v);
  }
}

// One thread a (tile, lane): its 4 words -> 32 values of W [n][k] (packed column order), two adjacent columns a
// 32-bit store.
template <typename T>
__global__ void __launch_bounds__(256) dequant_kernel(const uint4* q, const uint2* sz, int64_t row_tiles,
                                                      int64_t col_tiles, int64_t group_size, int64_t k, uint32_t* out) {
  const int64_t idx = int64_t{blockIdx.x} * 256 + threadIdx.x;
  if (idx >= row_tiles * col_tiles * 32) return;
  const int lane = static_cast<int>(idx % 32);
  const int64_t tile = idx / 32, kt = tile % col_tiles, nt = tile / col_tiles;
  const uint4 wv = q[idx];  // layout::word_index(nt, kt, col_tiles, lane, 0) / 4 == idx
  const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int64_t col_s = kt * 64 + 16 * s;
    uint32_t a[4];
    dequant<T>(words[s], spread(sz[(col_s / group_size) * row_tiles * 8 + nt * 8 + lane / 4]), a);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = nt * 16 + layout::fragment_row(lane, i), col = col_s + layout::fragment_col(lane, i, 0);
      out[(row * k + col) / 2] = a[i];
    }
  }
}

__global__ void __launch_bounds__(256)
    gather_kernel(const uint16_t* x, const int32_t* perm, int64_t m, int64_t k, uint16_t* out) {
  const int64_t i = int64_t{blockIdx.x} * 256 + threadIdx.x;
  if (i >= m * k) return;
  out[i] = x[(i / k) * k + perm[i % k]];
}

// The current device's SM count, cached per device (asked once, before any capture that needs it).
int sm_count() {
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  if (device >= 0 && device < kDevices && cached[device].load(std::memory_order_relaxed) > 0) {
    return cached[device].load(std::memory_order_relaxed);
  }
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) return 132;
  if (device >= 0 && device < kDevices) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

int64_t chunks_of(int64_t k) {
  return (k / 64 + kChunkTiles - 1) / kChunkTiles;
}

// The most splits a call of m rows may take.
int64_t split_cap(int64_t m, int64_t k, int split_k) {
  const int64_t cap = split_k > 0 ? std::min<int64_t>(split_k, kW4A16MaxSplits)
                                  : std::min<int64_t>(kW4A16MaxSplits, std::max<int64_t>(1, kSplitRowsBudget / m));
  return std::min(cap, chunks_of(k));
}

struct SplitPlan {
  int64_t splits = 1, chunks_per_split = 1;
};

// Enough CTAs for ~4 per SM (each holds 4 warps' weight loads in flight), within split_cap; every split non-empty.
SplitPlan plan_splits(int64_t m, int64_t n, int64_t k, int split_k) {
  const int64_t chunks = chunks_of(k), ctas_n = (n / 16 + kWarps - 1) / kWarps;
  int64_t want = split_k > 0 ? split_k : (4 * sm_count() + ctas_n - 1) / ctas_n;
  want = std::clamp<int64_t>(want, 1, split_cap(m, k, split_k));
  if (ctas_n > kW4A16Counters) want = 1;  // wider than the counters cover (n > 262144): enough CTAs anyway
  SplitPlan plan;
  plan.chunks_per_split = (chunks + want - 1) / want;
  plan.splits = (chunks + plan.chunks_per_split - 1) / plan.chunks_per_split;
  return plan;
}

size_t aligned(size_t bytes) {
  return DeviceArena::aligned(bytes);
}

// One instantiation: its dynamic shared memory (above the 48 KB default) allowed once per device, then the launch.
// The first call of a shape runs eagerly before any capture (the decoder's and the tests' warm-up), so the attribute
// call never happens inside a graph capture.
template <typename T, int kMTiles, bool kG32>
Status launch_mma(const MmaParams& p, dim3 grid, cudaStream_t stream) {
  constexpr int kBytes = mma_smem_bytes<kMTiles, kG32>();
  static std::atomic<uint64_t> allowed{0};  // bit d: set on device d
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (allowed.load(std::memory_order_acquire) & bit) == 0) {
    CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(mma_kernel<T, kMTiles, kG32>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    allowed.fetch_or(bit, std::memory_order_release);
  }
  CUDA_RETURN_IF_ERROR(launch_pdl(mma_kernel<T, kMTiles, kG32>, grid, dim3(kThreads), kBytes, stream, p));
  return ok_status();
}

template <typename T, int kMTiles>
Status launch_mma_tiles(const MmaParams& p, dim3 grid, cudaStream_t stream) {
  // A tile's halves may straddle two groups at odd multiples of 32 (before 2026-12-07 only 32 was handled).
  return p.group_size % 64 != 0 ? launch_mma<T, kMTiles, true>(p, grid, stream)
                                : launch_mma<T, kMTiles, false>(p, grid, stream);
}

template <typename T>
Status run_mma(const MmaParams& p, int64_t ctas_n, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ctas_n), static_cast<unsigned>(p.splits));
  const int64_t m_tiles = (p.m + 7) / 8;
  if (m_tiles <= 1) {
    RETURN_IF_ERROR((launch_mma_tiles<T, 1>(p, grid, stream)));
  } else if (m_tiles <= 2) {
    RETURN_IF_ERROR((launch_mma_tiles<T, 2>(p, grid, stream)));
  } else if (m_tiles <= 4) {
    RETURN_IF_ERROR((launch_mma_tiles<T, 4>(p, grid, stream)));
  } else {
    RETURN_IF_ERROR((launch_mma_tiles<T, 8>(p, grid, stream)));
  }
  return ok_status();
}

Status check_device_weight(const W4A16Device& w) {
  if (w.q == nullptr || w.sz == nullptr || w.n <= 0 || w.k <= 0 || w.n % 16 != 0 || w.k % 64 != 0 ||
      w.group_size <= 0 || w.group_size % 32 != 0 || w.k % w.group_size != 0 || w.groups != w.k / w.group_size ||
      w.k >= layout::kMaxGroupedCols ||  // layout::group_of()'s exact range
      (w.dtype != DType::kBF16 && w.dtype != DType::kF16)) {
    return invalid_argument("w4a16: not a packed weight (n=" + std::to_string(w.n) + " k=" + std::to_string(w.k) +
                            " group_size=" + std::to_string(w.group_size) + ")");
  }
  return ok_status();
}

template <typename T>
Status dequantize(const W4A16Device& w, void* out, cudaStream_t stream) {
  const int64_t threads = (w.n / 16) * (w.k / 64) * 32;
  dequant_kernel<T><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(w.q), reinterpret_cast<const uint2*>(w.sz), w.n / 16, w.k / 64, w.group_size, w.k,
      static_cast<uint32_t*>(out));
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

}  // namespace

size_t w4a16_device_bytes(const W4A16Packed& w) {
  return aligned(w.q.size() * 4) + aligned(w.sz.size() * 2) + aligned(w.perm.size() * 4);
}

StatusOr<W4A16Device> w4a16_upload_into(const W4A16Packed& w, DeviceArena& arena) {
  const int64_t row_tiles = w.n / 16, col_tiles = w.k / 64;
  if (w.n <= 0 || w.k <= 0 || w.group_size <= 0 || static_cast<int64_t>(w.q.size()) != row_tiles * col_tiles * 128 ||
      static_cast<int64_t>(w.sz.size()) != w.groups * row_tiles * 32 ||
      (!w.perm.empty() && static_cast<int64_t>(w.perm.size()) != w.k)) {
    return invalid_argument("w4a16_upload: the packed arrays do not match its shape (use w4a16_pack)");
  }
  W4A16Device d;
  d.n = w.n, d.k = w.k, d.group_size = w.group_size, d.groups = w.groups, d.dtype = w.dtype;
  ASSIGN_OR_RETURN(uint32_t * q, arena.allocate_array<uint32_t>(static_cast<int64_t>(w.q.size())));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(q, w.q.data(), w.q.size() * 4, cudaMemcpyHostToDevice));
  ASSIGN_OR_RETURN(uint16_t * sz, arena.allocate_array<uint16_t>(static_cast<int64_t>(w.sz.size())));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(sz, w.sz.data(), w.sz.size() * 2, cudaMemcpyHostToDevice));
  d.q = q, d.sz = sz;
  if (!w.perm.empty()) {
    ASSIGN_OR_RETURN(int32_t * perm, arena.allocate_array<int32_t>(static_cast<int64_t>(w.perm.size())));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(perm, w.perm.data(), w.perm.size() * 4, cudaMemcpyHostToDevice));
    d.perm = perm;
  }
  return d;
}

StatusOr<std::unique_ptr<W4A16Buffers>> w4a16_upload(const W4A16Packed& w) {
  auto buffers = std::make_unique<W4A16Buffers>();
  RETURN_IF_ERROR(buffers->arena.init(w4a16_device_bytes(w)));
  ASSIGN_OR_RETURN(buffers->view, w4a16_upload_into(w, buffers->arena));
  return buffers;
}

size_t w4a16_workspace_bytes(int64_t m, const W4A16Device& w, int split_k) {
  if (m <= 0) return 0;
  if (m <= kW4A16MmaMaxRows) {
    const int64_t cap = split_cap(m, w.k, split_k);
    return cap <= 1 ? 0 : kW4A16WorkspaceZeroBytes + aligned(static_cast<size_t>(cap * m * w.n) * 4);
  }
  // The counters' bytes stay reserved (and untouched) here too: one workspace serves both paths.
  return kW4A16WorkspaceZeroBytes + aligned(static_cast<size_t>(w.n * w.k) * 2) +
         (w.perm ? aligned(static_cast<size_t>(m * w.k) * 2) : 0);
}

Status w4a16_dequantize_cuda(const W4A16Device& w, void* out, cudaStream_t stream) {
  RETURN_IF_ERROR(check_device_weight(w));
  if (out == nullptr || reinterpret_cast<uintptr_t>(out) % 4 != 0) {
    return invalid_argument("w4a16_dequantize_cuda: the output must be 4-byte aligned");
  }
  return w.dtype == DType::kF16 ? dequantize<__half>(w, out, stream) : dequantize<__nv_bfloat16>(w, out, stream);
}

Status w4a16_gemm_cuda(const void* x, DType dtype, int64_t m, const W4A16Device& w, void* y, void* workspace,
                       size_t workspace_bytes, CublasLtGemm* gemm, cudaStream_t stream, const W4A16Output& out,
                       int split_k) {
  RETURN_IF_ERROR(check_device_weight(w));
  if (dtype != w.dtype) {
    return invalid_argument(std::string("w4a16_gemm_cuda: x is ") + dtype_name(dtype) +
                            " but the weight was packed for " + dtype_name(w.dtype));
  }
  if (m < 0) return invalid_argument("w4a16_gemm_cuda: m < 0");
  if (m == 0) return ok_status();
  if (x == nullptr || y == nullptr || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 4 != 0) {
    return invalid_argument("w4a16_gemm_cuda: x must be 16-byte aligned and y 4-byte aligned, neither null");
  }
  const size_t need = w4a16_workspace_bytes(m, w, split_k);
  if (workspace_bytes < need ||
      (need > 0 && (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0))) {
    return invalid_argument("w4a16_gemm_cuda: the workspace holds " + std::to_string(workspace_bytes) +
                            " bytes (16-byte aligned); m=" + std::to_string(m) + " needs " + std::to_string(need));
  }
  if (m <= kW4A16MmaMaxRows) {
    const SplitPlan plan = plan_splits(m, w.n, w.k, split_k);
    MmaParams p;
    p.x = x, p.perm = w.perm, p.m = m, p.n = w.n, p.k = w.k, p.group_size = w.group_size;
    p.group_magic = layout::group_magic(w.group_size);
    p.q = reinterpret_cast<const uint4*>(w.q), p.sz = reinterpret_cast<const uint2*>(w.sz);
    p.out.y = y, p.out.bias = out.bias, p.out.f32 = out.f32, p.out.accumulate = out.accumulate;
    p.counters = static_cast<uint32_t*>(workspace);
    p.partial = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + kW4A16WorkspaceZeroBytes);
    p.chunks_per_split = plan.chunks_per_split;
    p.splits = static_cast<int>(plan.splits);
    const int64_t ctas_n = (w.n / 16 + kWarps - 1) / kWarps;
    return dtype == DType::kF16 ? run_mma<__half>(p, ctas_n, stream) : run_mma<__nv_bfloat16>(p, ctas_n, stream);
  }
  if (gemm == nullptr) return invalid_argument("w4a16_gemm_cuda: m > 64 takes cuBLASLt; pass a CublasLtGemm");
  uint8_t* ws = static_cast<uint8_t*>(workspace) + kW4A16WorkspaceZeroBytes;
  RETURN_IF_ERROR(w4a16_dequantize_cuda(w, ws, stream));
  const void* a = x;
  if (w.perm != nullptr) {
    uint16_t* gathered = reinterpret_cast<uint16_t*>(ws + aligned(static_cast<size_t>(w.n * w.k) * 2));
    gather_kernel<<<static_cast<unsigned>((m * w.k + 255) / 256), 256, 0, stream>>>(static_cast<const uint16_t*>(x),
                                                                                    w.perm, m, w.k, gathered);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    a = gathered;
  }
  GemmCudaArgs args;
  args.m = m, args.n = w.n, args.k = w.k, args.a = a, args.lda = w.k, args.w = ws, args.ldw = w.k;
  args.in_dtype = dtype, args.d = y, args.ldd = w.n, args.out_dtype = out.f32 ? DType::kF32 : dtype;
  args.bias = out.bias, args.beta = out.accumulate ? 1.0f : 0.0f;
  return gemm->run(args, stream);
}

}  // namespace mmserve::kernels
