// im2col for a 1-D convolution, so that the convolution becomes one GEMM: Whisper's two encoder
// convolutions (kernel 3, padding 1, stride 1 then 2). Contract shared by the CPU twin and the CUDA version
// (conv1d/im2col_1d_cuda.h).
//
//   out_frames = (frames + 2 * padding - kernel) / stride + 1
//   out[b * out_frames + t, c * kernel + k] = x[b, c, t * stride + k - padding]   (0 outside [0, frames))
// so out [batch * out_frames, channels * kernel] (row stride out_ld) times the conv weight [out_ch, in_ch,
// kernel] read as [out_ch, in_ch * kernel] (transposed) is the convolution in [batch * out_frames, out_ch]
// rows. The input layout:
//   channels_last == false: x[b, c, f] at (b * channels + c) * frames + f (the mel spectrogram, conv1's input)
//   channels_last == true:  x[b, c, f] at (b * frames + f) * in_ld + c (conv1's output kept as frame rows)
// Input f32/f16/bf16 (in_dtype), output f32/f16/bf16 (out_dtype: the GEMM's), rounded to nearest even.
// Tests: im2col_1d_test.cpp (twin vs a naive loop and vs a direct convolution), im2col_1d_cuda_test.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

struct Im2col1dArgs {
  const void* input = nullptr;
  DType in_dtype = DType::kF32;
  bool channels_last = false;
  int64_t in_ld = 0;  // channels_last only: elements between frame rows (>= channels)
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  int64_t out_ld = 0;  // elements between out rows (>= channels * kernel)
  int64_t batch = 0, channels = 0, frames = 0;
  int64_t kernel = 3, stride = 1, padding = 1;
};

// (frames + 2 * padding - kernel) / stride + 1, or 0 when the window does not fit.
int64_t im2col_1d_out_frames(int64_t frames, int64_t kernel, int64_t stride, int64_t padding);

Status im2col_1d_validate(const Im2col1dArgs& args);
// The CPU twin (host pointers).
Status im2col_1d_cpu(const Im2col1dArgs& args);

}  // namespace mmserve::kernels
