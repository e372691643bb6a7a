// The experts' grouped GEMM on the GPU (moe_cuda.h: moe_grouped_gemm_cuda, moe_tile_map_cuda).
//
// One launch runs every expert: the grid is the upper bound of (n tile, m tile) pairs any routing can need
// (ceil(rows / BM) + experts m tiles), and each CTA reads which expert and which rows it owns from a tile map
// that moe_tile_map_cuda writes on the device from the plan's offsets. CTAs past the routing's real tiles return
// at once. Nothing depends on the host knowing the row counts, so a Mixtral step of any size can be captured in
// a CUDA graph.
//
// The tile: BM x 128 outputs, k in steps of 64, 4 cp.async stages in shared memory (rows of 64 16-bit values,
// their 16-byte chunks XOR-swizzled by the row so ldmatrix reads are conflict-free), mma.sync m16n8k16 with f32
// accumulators. Each warp owns 32 rows (two m16 fragments) and 128 / (warps / (BM / 32)) columns. Rows past the
// expert's end and k past K are zero-filled by cp.async (src-size 0) and never stored. A's rows may be gathered
// (a_rows[r] / a_div: the permute fused into the load).
//
// SwiGLU fused: the B tile's n8 blocks alternate between gate rows j.. j+7 and up rows n + j.. n + j + 7, so
// a thread holds gate and up of the same output column in neighbouring fragments; the epilogue rounds both to
// the 16-bit dtype (as the unfused path's GEMM output would be) and writes silu(gate) * up.
//
// Hopper's wgmma/TMA would run the compute-bound shapes faster; at the MoE shapes that matter (a few to a few
// hundred rows per expert) the layer is bound by streaming each expert's weights once, which this kernel does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda/cuda_status.h"
#include "kernels/attention/mma_ptx.cuh"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/moe/moe_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kBn = 128, kBk = 64, kStages = 4;
constexpr int kChunks = kBk / 8;  // 16-byte chunks per smem row

// 16 bytes global -> shared, or 16 zero bytes when !valid (src-size 0 reads nothing).
__device__ __forceinline__ void cp_async_16_zfill(void* dst_shared, const void* src_global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst_shared)),
               "l"(src_global), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kBk + ((chunk ^ (row & 7)) * 8); }

struct Params {
  const void* a;
  int64_t lda;
  const int32_t* a_rows;
  int64_t a_div;
  const void* w;
  int64_t w_stride;
  const int32_t* offsets;
  const int32_t* tile_map;
  int64_t n, k;
  void* y;
  int64_t ldy;
};

template <typename T, int kBm, int kWarps, bool kSwiglu, typename TOut>
__global__ void __launch_bounds__(kWarps * 32) grouped_gemm_kernel(Params p) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpsM = kBm / 32, kWarpsN = kWarps / kWarpsM;
  constexpr int kWn = kBn / kWarpsN, kNi = kWn / 8;
  static_assert(kWarpsM * kWarpsN == kWarps && kNi % 2 == 0, "tile shape");
  constexpr int kARowsPerPass = kThreads / kChunks;
  constexpr int kAPasses = kBm / kARowsPerPass, kBPasses = kBn / kARowsPerPass;
  static_assert(kAPasses >= 1 && kBm % kARowsPerPass == 0, "A loads");

  // blockIdx.x walks the m tiles (fastest), blockIdx.y the n tiles: an expert's m tiles over the same weight tile
  // run side by side, so only the first of them reads the weights from HBM (the rest hit L2).
  const int expert = p.tile_map[2 * blockIdx.x];
  if (expert < 0) return;  // past the routing's tiles
  const int64_t m0 = p.tile_map[2 * blockIdx.x + 1];
  const int64_t n_tile = blockIdx.y;
  const int64_t m_end = p.offsets[expert + 1];

  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sa = smem;                         // [kStages][kBm][kBk]
  uint16_t* sb = smem + kStages * kBm * kBk;  // [kStages][kBn][kBk]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int chunk = tid % kChunks, row_in_pass = tid / kChunks;
  const T* a = static_cast<const T*>(p.a);
  const T* w = static_cast<const T*>(p.w) + expert * p.w_stride;
  // The rows this thread loads (the same for every k step).
  const T* a_src[kAPasses];
  bool a_ok[kAPasses];
#pragma unroll
  for (int i = 0; i < kAPasses; ++i) {
    const int64_t r = m0 + row_in_pass + i * kARowsPerPass;
    a_ok[i] = r < m_end;
    const int64_t src = a_ok[i] ? (p.a_rows != nullptr ? p.a_rows[r] / p.a_div : r) : 0;
    a_src[i] = a + src * p.lda;
  }
  const T* b_src[kBPasses];
  bool b_ok[kBPasses];
#pragma unroll
  for (int i = 0; i < kBPasses; ++i) {
    const int rt = row_in_pass + i * kARowsPerPass;  // row of the B tile
    int64_t row;
    if constexpr (kSwiglu) {
      const int64_t col = n_tile * (kBn / 2) + (rt / 16) * 8 + rt % 8;  // the output column
      b_ok[i] = col < p.n;
      row = (rt / 8) % 2 == 0 ? col : p.n + col;  // even n8 blocks gate, odd blocks up
    } else {
      row = n_tile * kBn + rt;
      b_ok[i] = row < p.n;
    }
    b_src[i] = w + (b_ok[i] ? row : 0) * p.k;
  }

  auto load_stage = [&](int stage, int kt) {
    const int64_t col = int64_t{kt} * kBk + chunk * 8;
    const bool k_ok = col < p.k;
    uint16_t* sa_s = sa + stage * kBm * kBk;
    uint16_t* sb_s = sb + stage * kBn * kBk;
#pragma unroll
    for (int i = 0; i < kAPasses; ++i) {
      const int r = row_in_pass + i * kARowsPerPass;
      const bool ok = a_ok[i] && k_ok;
      cp_async_16_zfill(sa_s + swizzle(r, chunk), ok ? a_src[i] + col : a_src[i], ok);
    }
#pragma unroll
    for (int i = 0; i < kBPasses; ++i) {
      const int r = row_in_pass + i * kARowsPerPass;
      const bool ok = b_ok[i] && k_ok;
      cp_async_16_zfill(sb_s + swizzle(r, chunk), ok ? b_src[i] + col : b_src[i], ok);
    }
  };

  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;
  float acc[2][kNi][4] = {};
  const int k_tiles = static_cast<int>((p.k + kBk - 1) / kBk);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
    __syncthreads();  // stage kt has landed for every thread; stage kt - 1 is free
    if (kt + kStages - 1 < k_tiles) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    const uint16_t* sa_s = sa + (kt % kStages) * kBm * kBk;
    const uint16_t* sb_s = sb + (kt % kStages) * kBn * kBk;
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int r = warp_m * 32 + mi * 16 + (lane % 16);
        ldmatrix_x4(af[mi], sa_s + swizzle(r, kk * 2 + lane / 16));
      }
#pragma unroll
      for (int nj = 0; nj < kNi / 2; ++nj) {
        uint32_t bf[4];
        const int r = warp_n * kWn + nj * 16 + (lane / 16) * 8 + (lane % 8);
        ldmatrix_x4(bf, sb_s + swizzle(r, kk * 2 + (lane / 8) % 2));
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_16816<T>(acc[mi][2 * nj], af[mi], bf[0], bf[1]);
          mma_16816<T>(acc[mi][2 * nj + 1], af[mi], bf[2], bf[3]);
        }
      }
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");

  // Epilogue: c[0], c[1] at (row g, cols 2t, 2t + 1) of the fragment, c[2], c[3] at row g + 8.
  TOut* y = static_cast<TOut*>(p.y);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = m0 + warp_m * 32 + mi * 16 + g + half * 8;
      if (row >= m_end) continue;
      TOut* yr = y + row * p.ldy;
      if constexpr (kSwiglu) {
#pragma unroll
        for (int nj = 0; nj < kNi / 2; ++nj) {
          const int64_t col = n_tile * (kBn / 2) + ((warp_n * kWn + nj * 16) / 16) * 8 + 2 * t;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (col + j >= p.n) continue;
            const float gv = to_f32(from_f32<T>(acc[mi][2 * nj][half * 2 + j]));
            const float uv = to_f32(from_f32<T>(acc[mi][2 * nj + 1][half * 2 + j]));
            yr[col + j] = from_f32<TOut>(gv / (1.0f + expf(-gv)) * uv);
          }
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          const int64_t col = n_tile * kBn + warp_n * kWn + ni * 8 + 2 * t;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (col + j < p.n) yr[col + j] = from_f32<TOut>(acc[mi][ni][half * 2 + j]);
          }
        }
      }
    }
  }
}

// One block, thread e for expert e: the experts' tile counts, their prefix (thread 0; E <= 256), then each
// expert's tiles, and -1 for the grid's tiles past the last.
__global__ void tile_map_kernel(const int32_t* offsets, int experts, int block_m, int max_tiles, int32_t* map) {
  __shared__ int32_t first[kMoeCudaMaxExperts + 1];
  const int e = threadIdx.x;
  if (e < experts) first[e + 1] = (offsets[e + 1] - offsets[e] + block_m - 1) / block_m;
  __syncthreads();
  if (e == 0) {
    first[0] = 0;
    for (int x = 0; x < experts; ++x) first[x + 1] += first[x];
  }
  __syncthreads();
  if (e < experts) {
    for (int tile = first[e]; tile < first[e + 1]; ++tile) {
      map[2 * tile] = e;
      map[2 * tile + 1] = offsets[e] + (tile - first[e]) * block_m;
    }
  }
  for (int tile = first[experts] + e; tile < max_tiles; tile += blockDim.x) map[2 * tile] = -1;
}

template <typename T, int kBm, int kWarps, bool kSwiglu, typename TOut>
Status launch(const MoeGroupedGemmArgs& args, cudaStream_t stream) {
  const size_t smem = sizeof(uint16_t) * kStages * (kBm + kBn) * kBk;
  auto kernel = grouped_gemm_kernel<T, kBm, kWarps, kSwiglu, TOut>;
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  Params p{args.a,       args.lda, args.a_rows, args.a_div, args.w, args.w_stride, args.offsets, args.tile_map,
           args.n,       args.k,   args.y,      args.ldy};
  const int64_t cols = kSwiglu ? (args.n + kBn / 2 - 1) / (kBn / 2) : (args.n + kBn - 1) / kBn;
  const dim3 grid(static_cast<unsigned>(moe_grouped_gemm_tiles(args.rows, args.experts, args.block_m)),
                  static_cast<unsigned>(cols));
  kernel<<<grid, kWarps * 32, smem, stream>>>(p);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

template <typename T, bool kSwiglu, typename TOut>
Status launch_block(const MoeGroupedGemmArgs& args, cudaStream_t stream) {
  switch (args.block_m) {
    case 32: return launch<T, 32, 4, kSwiglu, TOut>(args, stream);
    case 64: return launch<T, 64, 4, kSwiglu, TOut>(args, stream);
    default: return launch<T, 128, 8, kSwiglu, TOut>(args, stream);
  }
}

template <typename T>
Status launch_typed(const MoeGroupedGemmArgs& args, cudaStream_t stream) {
  if (args.y_dtype == DType::kF32) {
    return args.swiglu ? launch_block<T, true, float>(args, stream) : launch_block<T, false, float>(args, stream);
  }
  return args.swiglu ? launch_block<T, true, T>(args, stream) : launch_block<T, false, T>(args, stream);
}

bool valid_block_m(int64_t block_m) { return block_m == 32 || block_m == 64 || block_m == 128; }

}  // namespace

int64_t moe_grouped_gemm_block_m(int64_t rows, int64_t experts) {
  // Most experts in one m tile: routing is uneven (an expert often gets 1.5x the average), and a second tile of an
  // expert costs a second pass over its weight tile through L2, while the padding rows' MMAs are nearly free in
  // this memory-bound regime.
  const int64_t per_expert = experts > 0 ? (rows + experts - 1) / experts : rows;
  return per_expert <= 20 ? 32 : per_expert <= 44 ? 64 : 128;
}

int64_t moe_grouped_gemm_tiles(int64_t rows, int64_t experts, int64_t block_m) {
  return (rows + block_m - 1) / block_m + experts;
}

Status moe_tile_map_cuda(const int32_t* offsets, int64_t rows, int64_t experts, int64_t block_m, int32_t* tile_map,
                         cudaStream_t stream) {
  if (experts <= 0 || experts > kMoeCudaMaxExperts || !valid_block_m(block_m) || rows < 0 ||
      moe_grouped_gemm_tiles(rows, experts, block_m) > 65535) {
    return invalid_argument("moe_tile_map_cuda: 1..256 experts, block_m 32, 64 or 128, at most 65535 tiles");
  }
  const int max_tiles = static_cast<int>(moe_grouped_gemm_tiles(rows, experts, block_m));
  tile_map_kernel<<<1, kMoeCudaMaxExperts, 0, stream>>>(offsets, static_cast<int>(experts),
                                                       static_cast<int>(block_m), max_tiles, tile_map);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

Status moe_grouped_gemm_cuda(const MoeGroupedGemmArgs& args, cudaStream_t stream) {
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  if (args.n <= 0 || args.k <= 0 || args.n > 65535 * int64_t{kBn / 2} || args.k % 8 != 0 || args.lda % 8 != 0 || args.w_stride % 8 != 0 ||
      args.rows < 0 || args.experts <= 0 || args.experts > kMoeCudaMaxExperts || !valid_block_m(args.block_m) ||
      (args.a_rows != nullptr && args.a_div <= 0) || misaligned(args.a) || misaligned(args.w) ||
      (args.y_dtype != DType::kF32 && args.y_dtype != args.dtype) ||
      moe_grouped_gemm_tiles(args.rows, args.experts, args.block_m) > 65535) {
    return invalid_argument(
        "moe_grouped_gemm_cuda: k, lda and w_stride multiples of 8, a and w 16-byte aligned, 1..256 experts, "
        "block_m 32, 64 or 128, y in f32 or the input dtype");
  }
  if (args.rows == 0) return ok_status();
  if (args.dtype == DType::kBF16) return launch_typed<__nv_bfloat16>(args, stream);
  if (args.dtype == DType::kF16) return launch_typed<__half>(args, stream);
  return unimplemented(std::string("moe_grouped_gemm_cuda in ") + dtype_name(args.dtype) + " (bf16 or f16)");
}

}  // namespace mmserve::kernels
