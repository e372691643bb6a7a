// FP8 quantisation on the GPU (issue 17), the CUDA twins of fp8.h's fp8_quantize, for the activations that feed
// CublasLtGemm::run_fp8 (gemm_cuda.h) and for weights quantised at load:
//
//   fp8_quantize_cuda:         static scale (one device float, e.g. a checkpoint's input_scale): q = enc(x / *scale).
//   fp8_quantize_rows_cuda:    dynamic per-token: scales[r] = fp8_scale_for_amax(max_c |x[r, c]|), then
//                              q[r, :] = enc(x[r, :] / scales[r]); one block per row.
//   fp8_quantize_tensor_cuda:  dynamic per-tensor: *scale = fp8_scale_for_amax(max |x|) over the whole matrix, then
//                              q = enc(x / *scale): an amax pass (atomicMax on the float's bits into `amax`, which it
//                              zeroes first on the stream: no host work, so it can sit in a CUDA graph) and a
//                              quantise pass.
// x is [rows, cols] with row stride ld_x in `dtype` (bf16, f16 or f32), q is [rows, cols] codes with stride ld_q.
// Division and encoding are IEEE f32 division and cvt.rn.satfinite (round to nearest even, saturating), which is what
// the CPU twin does: the codes are equal bit for bit (NaN inputs give a NaN code; its sign is not specified).
// Tests: fp8_cuda_test.cpp (codes against fp8_quantize; scaled GEMMs against fp8_gemm); bench: fp8_cuda_bench.cpp
// (FP8 GEMM against bf16 at Llama-3-8B shapes, quantisation's bandwidth).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/fp8/fp8.h"

namespace mmserve::kernels {

struct Fp8QuantizeCudaArgs {
  const void* x = nullptr;
  DType dtype = DType::kBF16;
  int64_t rows = 0, cols = 0, ld_x = 0;
  Fp8Format format = Fp8Format::kE4M3;
  uint8_t* q = nullptr;
  int64_t ld_q = 0;
};

// `scale`: one device float, read on the device.
Status fp8_quantize_cuda(const Fp8QuantizeCudaArgs& args, const float* scale, cudaStream_t stream);
// `scales`: [rows] device floats, written.
Status fp8_quantize_rows_cuda(const Fp8QuantizeCudaArgs& args, float* scales, cudaStream_t stream);
// `scale`: one device float, written; `amax`: one device uint32 of workspace.
Status fp8_quantize_tensor_cuda(const Fp8QuantizeCudaArgs& args, float* scale, uint32_t* amax, cudaStream_t stream);

}  // namespace mmserve::kernels
