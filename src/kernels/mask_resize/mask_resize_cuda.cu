// SAM's mask post-processing on the GPU (see mask_resize_cuda.h). One thread per output pixel of one mask: the
// pixel blends two rows of the second resize's width pass, each of which blends two columns of the crop, each
// of which blends two rows of the first resize's width pass, each of which blends two logits: 16 logit loads,
// every intermediate computed with the CPU twin's operations in the CPU twin's order (__fmul_rn / __fadd_rn
// cannot be contracted into FMAs), so each output equals the CPU's. The logits (256 KiB per mask) stay in L2.
#include "kernels/mask_resize/mask_resize_cuda.h"

#include <string>

namespace mmserve::kernels {
namespace {

struct Tap {
  int i0, i1;
  float w0, w1;
};

// mask_resize_cpu.cpp's linear_taps for one output index (in == out: torch's copy).
__device__ __forceinline__ Tap linear_tap(int in, int out, int dst) {
  if (in == out) return {dst, dst, 1.0f, 0.0f};
  const float scale = __fdiv_rn(static_cast<float>(in), static_cast<float>(out));
  float src = __fsub_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(dst), 0.5f)), 0.5f);
  if (src < 0.0f) src = 0.0f;
  const int i = min(static_cast<int>(floorf(src)), in - 1);
  const float lambda = fminf(fmaxf(__fsub_rn(src, static_cast<float>(i)), 0.0f), 1.0f);
  return {i, i + (i < in - 1 ? 1 : 0), __fsub_rn(1.0f, lambda), lambda};
}

__device__ __forceinline__ float blend(float a, float w0, float b, float w1) {
  return __fadd_rn(__fmul_rn(a, w0), __fmul_rn(b, w1));
}

// The first resize's width pass at (input row, crop column c).
__device__ __forceinline__ float rows1_at(const float* mask, const MaskResizeShape& s, int row, const Tap& x1) {
  const float* r = mask + static_cast<size_t>(row) * s.in_w;
  return blend(__ldg(r + x1.i0), x1.w0, __ldg(r + x1.i1), x1.w1);
}

// The crop at (crop row r, crop column c): the first resize's height pass.
__device__ __forceinline__ float cropped_at(const float* mask, const MaskResizeShape& s, int r, int c) {
  const Tap y1 = linear_tap(s.in_h, s.pad_h, r);
  const Tap x1 = linear_tap(s.in_w, s.pad_w, c);
  return blend(rows1_at(mask, s, y1.i0, x1), y1.w0, rows1_at(mask, s, y1.i1, x1), y1.w1);
}

// The second resize's width pass at (crop row r, output column x).
__device__ __forceinline__ float rows2_at(const float* mask, const MaskResizeShape& s, int r, const Tap& x2) {
  return blend(cropped_at(mask, s, r, x2.i0), x2.w0, cropped_at(mask, s, r, x2.i1), x2.w1);
}

__global__ void mask_resize_threshold_kernel(const float* __restrict__ logits, MaskResizeShape s, float threshold,
                                             uint8_t* __restrict__ out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y;
  const int m = blockIdx.z;
  if (x >= s.out_w) return;
  const float* mask = logits + static_cast<size_t>(m) * s.in_h * s.in_w;
  const Tap y2 = linear_tap(s.crop_h, s.out_h, y);
  const Tap x2 = linear_tap(s.crop_w, s.out_w, x);
  const float v = blend(rows2_at(mask, s, y2.i0, x2), y2.w0, rows2_at(mask, s, y2.i1, x2), y2.w1);
  out[(static_cast<size_t>(m) * s.out_h + y) * s.out_w + x] = v > threshold ? 1 : 0;
}

}  // namespace

Status mask_resize_threshold_cuda(const float* logits, const MaskResizeShape& s, float threshold, uint8_t* out,
                                  cudaStream_t stream) {
  if (logits == nullptr || out == nullptr) return invalid_argument("mask_resize_threshold_cuda: null pointer");
  if (!mask_resize_shape_valid(s) || s.out_h > 65535 || s.k > 65535) {
    return invalid_argument("mask_resize_threshold_cuda: invalid shape (k " + std::to_string(s.k) + ", in " +
                            std::to_string(s.in_h) + "x" + std::to_string(s.in_w) + ", pad " + std::to_string(s.pad_h) +
                            "x" + std::to_string(s.pad_w) + ", crop " + std::to_string(s.crop_h) + "x" +
                            std::to_string(s.crop_w) + ", out " + std::to_string(s.out_h) + "x" +
                            std::to_string(s.out_w) + ")");
  }
  constexpr int kThreads = 128;
  const dim3 grid((s.out_w + kThreads - 1) / kThreads, s.out_h, s.k);
  mask_resize_threshold_kernel<<<grid, kThreads, 0, stream>>>(logits, s, threshold, out);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    return internal_error(std::string("mask_resize_threshold_cuda: ") + cudaGetErrorString(launched));
  }
  return ok_status();
}

}  // namespace mmserve::kernels
