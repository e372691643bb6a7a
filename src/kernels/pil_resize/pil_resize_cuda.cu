// pil_resize on the GPU (see pil_resize_cuda.h): per chunk of up to kImagesPerLaunch images, the horizontal pass
// into the temporaries, then the placement kernel (vertical pass, crop, zero padding, CHW planes).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/pil_resize/pil_resize_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kPrecisionBits = 22;  // Resample.c's PRECISION_BITS for 8-bit samples
constexpr int kImagesPerLaunch = 64;
constexpr int kHorizontalThreads = 256;
constexpr int kPlaceThreads = 128;

// Everything a launch reads besides the images and tables, by value (a __grid_constant__ parameter: read in place
// from the constant bank, uniform per CTA, so no upload and no copy per thread).
struct LaunchArgs {
  const uint8_t* src;
  const int32_t* tables;
  uint8_t* scratch;
  uint8_t* out;  // the chunk's first image
  int out_width;
  int out_height;
  PilResizeImage images[kImagesPerLaunch];
};
// CUDA 12.1+ takes up to 32764 bytes of kernel parameters (sm_70 and later).
static_assert(sizeof(LaunchArgs) <= 32764, "kernel parameters too large");

__device__ __forceinline__ uint8_t clip8(int32_t acc) {
  return static_cast<uint8_t>(min(max(acc >> kPrecisionBits, 0), 255));  // arithmetic shift, as PIL's
}

// PIL's horizontal pass at window column wx of one source row (HWC).
__device__ __forceinline__ uchar3 horizontal_value(const uint8_t* __restrict__ row, const int32_t* __restrict__ tables,
                                                   const PilResizeAxis& x, int wx) {
  const int32_t first = __ldg(tables + x.xmin + wx), taps = __ldg(tables + x.taps + wx);
  const int32_t* k = tables + x.coeffs + static_cast<int64_t>(wx) * x.ksize;
  const uint8_t* p = row + static_cast<int64_t>(first) * 3;
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int t = 0; t < taps; ++t, p += 3) {
    const int32_t kt = __ldg(k + t);
    s0 += __ldg(p) * kt;
    s1 += __ldg(p + 1) * kt;
    s2 += __ldg(p + 2) * kt;
  }
  return make_uchar3(clip8(s0), clip8(s1), clip8(s2));
}

// One CTA per (row of the temporary, image); images without a temporary (one pass or none) exit at once.
__global__ void __launch_bounds__(kHorizontalThreads) horizontal_kernel(const __grid_constant__ LaunchArgs p) {
  const PilResizeImage& im = p.images[blockIdx.y];
  const PilResizeAxis &x = im.x, &y = im.y;
  const int r = static_cast<int>(blockIdx.x);
  if (!x.resample || !y.resample || x.count == 0 || y.count == 0 || r >= y.src_count) return;
  const uint8_t* row = p.src + im.src_offset + static_cast<int64_t>(y.src_start + r) * im.src_width * 3;
  uint8_t* temp = p.scratch + im.scratch_offset + static_cast<int64_t>(r) * x.count * 3;
  for (int wx = threadIdx.x; wx < x.count; wx += blockDim.x) {
    const uchar3 v = horizontal_value(row, p.tables, x, wx);
    temp[3 * wx] = v.x;
    temp[3 * wx + 1] = v.y;
    temp[3 * wx + 2] = v.z;
  }
}

// The window's pixel (wx, wy): the vertical pass over what the horizontal step gives for a source row (the
// temporary when both passes run, else the taps computed here, else the source pixel).
__device__ __forceinline__ uchar3 window_value(const LaunchArgs& p, const PilResizeImage& im, int wx, int wy) {
  const PilResizeAxis &x = im.x, &y = im.y;
  const uint8_t* src = p.src + im.src_offset;
  const int64_t stride = static_cast<int64_t>(im.src_width) * 3;
  const bool temporary = x.resample && y.resample;
  const auto row_value = [&](int r) -> uchar3 {
    if (temporary) {
      const uint8_t* t = p.scratch + im.scratch_offset + (static_cast<int64_t>(r - y.src_start) * x.count + wx) * 3;
      return make_uchar3(__ldg(t), __ldg(t + 1), __ldg(t + 2));
    }
    const uint8_t* row = src + r * stride;
    if (x.resample) return horizontal_value(row, p.tables, x, wx);
    const uint8_t* s = row + static_cast<int64_t>(x.src_start + wx) * 3;
    return make_uchar3(__ldg(s), __ldg(s + 1), __ldg(s + 2));
  };
  if (!y.resample) return row_value(y.src_start + wy);
  const int32_t first = __ldg(p.tables + y.xmin + wy), taps = __ldg(p.tables + y.taps + wy);
  const int32_t* k = p.tables + y.coeffs + static_cast<int64_t>(wy) * y.ksize;
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int t = 0; t < taps; ++t) {
    const int32_t kt = __ldg(k + t);
    const uchar3 v = row_value(first + t);
    s0 += v.x * kt;
    s1 += v.y * kt;
    s2 += v.z * kt;
  }
  return make_uchar3(clip8(s0), clip8(s1), clip8(s2));
}

// One thread per output pixel (x along threads, a CTA row per output row, z the image): three plane writes,
// every output byte written (0 outside the window), so the output needs no memset.
__global__ void __launch_bounds__(kPlaceThreads) place_kernel(const __grid_constant__ LaunchArgs p) {
  const int ox = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (ox >= p.out_width) return;
  const int oy = static_cast<int>(blockIdx.y);
  const PilResizeImage& im = p.images[blockIdx.z];
  const int wx = ox - im.x.dst, wy = oy - im.y.dst;
  uchar3 v = make_uchar3(0, 0, 0);
  if (wx >= 0 && wx < im.x.count && wy >= 0 && wy < im.y.count) v = window_value(p, im, wx, wy);
  const int64_t plane = static_cast<int64_t>(p.out_width) * p.out_height;
  uint8_t* o = p.out + blockIdx.z * 3 * plane + static_cast<int64_t>(oy) * p.out_width + ox;
  o[0] = v.x;
  o[plane] = v.y;
  o[2 * plane] = v.z;
}

}  // namespace

Status pil_resize_cuda(const PilResizeBatch& b, cudaStream_t stream) {
  RETURN_IF_ERROR(pil_resize_validate(b));
  const int64_t image_bytes = int64_t{3} * b.out_width * b.out_height;
  for (int first = 0; first < b.n; first += kImagesPerLaunch) {
    const int count = std::min(kImagesPerLaunch, b.n - first);
    LaunchArgs args{};
    args.src = b.src;
    args.tables = b.tables;
    args.scratch = b.scratch;
    args.out = b.out + first * image_bytes;
    args.out_width = b.out_width;
    args.out_height = b.out_height;
    std::memcpy(args.images, b.images + first, sizeof(PilResizeImage) * count);
    int rows = 0;  // the most rows of a temporary in this chunk
    for (int i = 0; i < count; ++i) {
      if (pil_resize_scratch_bytes(args.images[i]) > 0) rows = std::max(rows, args.images[i].y.src_count);
    }
    if (rows > 0) {
      horizontal_kernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(count)), kHorizontalThreads, 0,
                          stream>>>(args);
    }
    const dim3 grid(static_cast<unsigned>((b.out_width + kPlaceThreads - 1) / kPlaceThreads),
                    static_cast<unsigned>(b.out_height), static_cast<unsigned>(count));
    place_kernel<<<grid, kPlaceThreads, 0, stream>>>(args);
  }
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return internal_error(std::string("pil_resize_cuda: ") + cudaGetErrorString(launched));
  return ok_status();
}

}  // namespace mmserve::kernels
