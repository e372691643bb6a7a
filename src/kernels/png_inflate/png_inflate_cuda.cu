// inflate_png_rows on the GPU (see png_inflate_cuda.h), in two kernels over png_inflate_core.h and png_unfilter_core.h:
//   inflate: one warp per image, its workspace (decode tables, the batch of literals and matches; ~41 KiB) in dynamic
//            shared memory, as many warps to a block as one SM's shared memory holds (5 on Hopper): a launch's
//            images are packed onto few SMs, which leaves the rest whole for the encoder's GEMMs running beside it
//            (one warp a block spread the images one or two to every SM, and each SM so taken had no room left for
//            a GEMM tile: the decode and the encoder took turns at the GPU). The warp builds the tables; a Huffman
//            block's symbols are decoded either by
//            lane 0 alone (kSerial: the warp then writes each batch's literals in coalesced runs and copies each match
//            with 32 lanes) or by all 32 lanes at once (kSpeculative, the default: png_inflate_spec_core.h, each lane
//            a part of a window of the bit stream, resynchronised); the warp sums the Adler-32. Stored blocks are
//            copied by the whole warp.
//   rows:    one block of kRowThreads per image, reading the inflate's status: thread t unfilters rows t, t + T, ...
//            a chunk of pixels per step, one step behind the row above, and writes RGB.
// A warp decodes at ~20-30 MB/s (latency-bound), so a call's time is its slowest image's; more images per call, up to
// the SMs' room, cost little more.
#include <algorithm>
#include <climits>
#include <string>

#include "kernels/png_inflate/png_inflate_cuda.h"
#include "kernels/png_inflate/png_unfilter_core.h"

namespace mmserve::kernels {
namespace {

using png_inflate::InflateWorkspace;

constexpr int kRowThreads = 64;
constexpr int kMaxInflateWarps = 8;  // per block: the inflate kernel's launch bounds
// Each warp's workspace at a 16-byte boundary of the block's dynamic shared memory.
constexpr size_t kWorkspaceStride = (sizeof(InflateWorkspace) + 15) / 16 * 16;

// The teams of the core headers. __host__ __device__ only so that the templates compile for both sides; they run
// on the device alone.
struct WarpTeam {
  __host__ __device__ uint32_t lane() const {
#if defined(__CUDA_ARCH__)
    return threadIdx.x & 31;
#else
    return 0;
#endif
  }
  __host__ __device__ uint32_t size() const {
    return 32;
  }
  __host__ __device__ bool leader() const {
    return lane() == 0;
  }
  __host__ __device__ void sync() const {
#if defined(__CUDA_ARCH__)
    __syncwarp();
#endif
  }
  __host__ __device__ uint32_t reduce_sum(uint32_t v) const {
#if defined(__CUDA_ARCH__)
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
#endif
    return v;
  }
  // The speculative decoder's per-lane step: lane i of the window is thread i.
  template <class F>
  __host__ __device__ void for_lanes(F&& f) const {
    f(lane());
  }
};
static_assert(png_inflate::kSpecLanes == 32, "the speculative window's lanes are the warp's");

struct BlockTeam {
  __host__ __device__ uint32_t lane() const {
#if defined(__CUDA_ARCH__)
    return threadIdx.x;
#else
    return 0;
#endif
  }
  __host__ __device__ uint32_t size() const {
#if defined(__CUDA_ARCH__)
    return blockDim.x;
#else
    return 1;
#endif
  }
  __host__ __device__ bool sync_or(bool p) const {
#if defined(__CUDA_ARCH__)
    return __syncthreads_or(p) != 0;
#else
    return p;
#endif
  }
};

// Warp w of block b inflates image b * (blockDim.x / 32) + w. The warps share nothing but the block's residency
// (no block-wide sync), so a warp past the batch's end just leaves.
template <PngHuffmanDecoder kDecoder>
__global__ void __launch_bounds__(32 * kMaxInflateWarps, 1)
    inflate_kernel(const uint8_t* __restrict__ streams, uint64_t streams_bytes,
                   const PngInflateImage* __restrict__ images, int64_t n, uint8_t* scratch, uint64_t scratch_bytes,
                   uint64_t out_bytes, int32_t* __restrict__ status) {
  extern __shared__ __align__(16) uint8_t smem[];
  const uint32_t warp = threadIdx.x / 32;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (index >= n) return;
  InflateWorkspace& ws = *reinterpret_cast<InflateWorkspace*>(smem + warp * kWorkspaceStride);
  const PngInflateImage image = images[index];
  const uint64_t filtered = png_inflate::checked_filtered_bytes(image, streams_bytes, scratch_bytes, out_bytes);
  PngInflateStatus result = PngInflateStatus::kBadImage;
  if (filtered != 0) {
    WarpTeam team;
    result = png_inflate::inflate_zlib(team, ws, streams + image.stream_offset, image.stream_bytes,
                                       scratch + image.scratch_offset, static_cast<uint32_t>(filtered), kDecoder);
  }
  if (threadIdx.x % 32 == 0) status[index] = static_cast<int32_t>(result);
}

__global__ void __launch_bounds__(kRowThreads)
    rows_kernel(const PngInflateImage* __restrict__ images, uint8_t* __restrict__ scratch, uint8_t* __restrict__ out,
                int32_t* __restrict__ status) {
  if (status[blockIdx.x] != 0) return;  // the inflate failed (or the descriptor was bad): nothing to unfilter
  const PngInflateImage image = images[blockIdx.x];
  BlockTeam team;
  const bool ok = png_inflate::unfilter_rows_any(team, scratch + image.scratch_offset, image.width, image.height,
                                                 image.channels, out + image.out_offset);
  if (!ok && threadIdx.x == 0) status[blockIdx.x] = static_cast<int32_t>(PngInflateStatus::kBadFilter);
}

}  // namespace

Status inflate_png_rows_cuda(const uint8_t* streams, uint64_t streams_bytes, const PngInflateImage* images, int64_t n,
                             uint8_t* scratch, uint64_t scratch_bytes, uint8_t* out, uint64_t out_bytes,
                             int32_t* status, cudaStream_t stream, PngHuffmanDecoder decoder) {
  if (n < 0 || n > INT_MAX) return invalid_argument("inflate_png_rows_cuda: bad batch size " + std::to_string(n));
  if (n == 0) return ok_status();
  if (streams == nullptr || images == nullptr || scratch == nullptr || out == nullptr || status == nullptr) {
    return invalid_argument("inflate_png_rows_cuda: null pointer");
  }
  if (reinterpret_cast<uintptr_t>(streams) % 8 != 0) {
    return invalid_argument("inflate_png_rows_cuda: streams must be 8-byte aligned");
  }
  const auto kernel = decoder == PngHuffmanDecoder::kSpeculative ? inflate_kernel<PngHuffmanDecoder::kSpeculative>
                                                                 : inflate_kernel<PngHuffmanDecoder::kSerial>;
  // Warps per block: as many workspaces as a block's shared memory takes (the device's opt-in limit), at most the
  // batch's images.
  int device = 0, optin = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const int64_t fit = std::max<int64_t>(1, std::min<int64_t>(kMaxInflateWarps, optin / kWorkspaceStride));
  const int64_t warps = std::min(fit, n);
  const size_t shared = static_cast<size_t>(warps) * kWorkspaceStride;
  if (error == cudaSuccess) error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  if (error == cudaSuccess) {
    error = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  if (error == cudaSuccess) {
    const auto blocks = static_cast<unsigned>((n + warps - 1) / warps);
    kernel<<<blocks, static_cast<unsigned>(32 * warps), shared, stream>>>(streams, streams_bytes, images, n, scratch,
                                                                          scratch_bytes, out_bytes, status);
    rows_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(images, scratch, out, status);
    error = cudaGetLastError();
  }
  if (error != cudaSuccess) return internal_error(std::string("inflate_png_rows_cuda: ") + cudaGetErrorString(error));
  return ok_status();
}

}  // namespace mmserve::kernels
