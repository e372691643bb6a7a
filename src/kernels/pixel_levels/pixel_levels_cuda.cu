// expand_pixel_levels on the GPU (see pixel_levels_cuda.h): the table in shared memory, four levels per thread
// (one 32-bit load, one 16-byte store) where the plane's size allows, else one.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/pixel_levels/pixel_levels_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kMaxChannels = 4;

// One block row per (image, channel) plane; threads stride over the plane.
template <bool kVec4>
__global__ void expand_kernel(const uint8_t* __restrict__ levels, int64_t channels, int64_t plane,
                              const float* __restrict__ table, float* __restrict__ out) {
  __shared__ float t[256];
  const int64_t row = blockIdx.y;  // image * channels + channel
  const int64_t c = row % channels;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) t[i] = table[c * 256 + i];
  __syncthreads();
  const uint8_t* in = levels + row * plane;
  float* o = out + row * plane;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec4) {
    for (int64_t q = blockIdx.x * blockDim.x + threadIdx.x; q < plane / 4; q += stride) {
      const uchar4 l = reinterpret_cast<const uchar4*>(in)[q];
      reinterpret_cast<float4*>(o)[q] = make_float4(t[l.x], t[l.y], t[l.z], t[l.w]);
    }
  } else {
    for (int64_t p = blockIdx.x * blockDim.x + threadIdx.x; p < plane; p += stride) o[p] = t[in[p]];
  }
}

}  // namespace

Status expand_pixel_levels_cuda(const uint8_t* levels, int64_t n, int64_t channels, int64_t plane, const float* table,
                                float* out, cudaStream_t stream) {
  if (n < 0 || channels < 1 || channels > kMaxChannels || plane < 0 || n * channels > 65535) {
    return invalid_argument("expand_pixel_levels_cuda: bad shape (n " + std::to_string(n) + ", channels " +
                            std::to_string(channels) + ", plane " + std::to_string(plane) + ")");
  }
  if (n == 0 || plane == 0) return ok_status();
  if (levels == nullptr || table == nullptr || out == nullptr) {
    return invalid_argument("expand_pixel_levels_cuda: null pointer");
  }
  constexpr int kThreads = 256;
  // Rows start 4-aligned when the plane is a multiple of 4 (and the buffers are): then the vector path.
  const bool vec4 = plane % 4 == 0 && reinterpret_cast<uintptr_t>(levels) % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t per_row = vec4 ? plane / 4 : plane;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((per_row + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(n * channels));
  if (vec4) {
    expand_kernel<true><<<grid, kThreads, 0, stream>>>(levels, channels, plane, table, out);
  } else {
    expand_kernel<false><<<grid, kThreads, 0, stream>>>(levels, channels, plane, table, out);
  }
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    return internal_error(std::string("expand_pixel_levels_cuda: ") + cudaGetErrorString(launched));
  }
  return ok_status();
}

}  // namespace mmserve::kernels
