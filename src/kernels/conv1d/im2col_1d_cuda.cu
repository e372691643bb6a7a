// im2col for a 1-D convolution on the GPU (contract in im2col_1d.h, design in im2col_1d_cuda.h).
// Tests: im2col_1d_cuda_test.cpp; bench: im2col_1d_cuda_bench.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda/cuda_status.h"
#include "kernels/common/cuda_convert.cuh"
#include "kernels/conv1d/im2col_1d_cuda.h"

namespace mmserve::kernels {
namespace {

constexpr int kThreads = 256;

struct Im2colParams {
  int64_t channels, frames, out_frames, kernel, stride, padding, in_ld, out_ld;
  int cols;  // channels * kernel
  int channels_last;
};

// grid = (batch * out_frames rows, column blocks of kThreads): one thread per output element, 32-bit index
// arithmetic inside a row (64-bit division per element made the first version several times slower).
template <typename TI, typename TO>
__global__ void im2col_1d_kernel(const TI* in, TO* out, const Im2colParams p) {
  const int col = blockIdx.y * kThreads + threadIdx.x;
  if (col >= p.cols) return;
  const int64_t row = blockIdx.x;
  const int64_t b = row / p.out_frames, t = row - b * p.out_frames;
  const int kernel = static_cast<int>(p.kernel);
  const int c = col / kernel, k = col - c * kernel;
  const int64_t f = t * p.stride + k - p.padding;
  float value = 0.0f;
  if (f >= 0 && f < p.frames) {
    value = to_f32(p.channels_last ? in[(b * p.frames + f) * p.in_ld + c] : in[(b * p.channels + c) * p.frames + f]);
  }
  out[row * p.out_ld + col] = from_f32<TO>(value);
}

template <typename TI, typename TO>
Status launch(const Im2col1dArgs& a, const Im2colParams& p, cudaStream_t stream) {
  const int64_t rows = a.batch * p.out_frames;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((p.cols + kThreads - 1) / kThreads));
  im2col_1d_kernel<TI, TO><<<grid, kThreads, 0, stream>>>(static_cast<const TI*>(a.input), static_cast<TO*>(a.out), p);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return ok_status();
}

template <typename TI>
Status launch_out(const Im2col1dArgs& a, const Im2colParams& p, cudaStream_t stream) {
  switch (a.out_dtype) {
    case DType::kF32: return launch<TI, float>(a, p, stream);
    case DType::kF16: return launch<TI, __half>(a, p, stream);
    default: return launch<TI, __nv_bfloat16>(a, p, stream);
  }
}

}  // namespace

Status im2col_1d_cuda(const Im2col1dArgs& a, cudaStream_t stream) {
  RETURN_IF_ERROR(im2col_1d_validate(a));
  Im2colParams p{};
  p.out_frames = im2col_1d_out_frames(a.frames, a.kernel, a.stride, a.padding);
  if (a.batch == 0 || a.channels == 0 || p.out_frames == 0) return ok_status();
  p.channels = a.channels;
  p.frames = a.frames;
  p.kernel = a.kernel;
  p.stride = a.stride;
  p.padding = a.padding;
  p.in_ld = a.in_ld;
  p.out_ld = a.out_ld;
  if (a.channels * a.kernel > (int64_t{1} << 30) || a.batch * p.out_frames > (int64_t{1} << 31) - 1) {
    return unimplemented("im2col_1d_cuda: channels * kernel must be < 2^30 and batch * out_frames < 2^31");
  }
  p.cols = static_cast<int>(a.channels * a.kernel);
  p.channels_last = a.channels_last ? 1 : 0;
  switch (a.in_dtype) {
    case DType::kF32: return launch_out<float>(a, p, stream);
    case DType::kF16: return launch_out<__half>(a, p, stream);
    default: return launch_out<__nv_bfloat16>(a, p, stream);
  }
}

}  // namespace mmserve::kernels
