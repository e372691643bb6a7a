// Layer norm on the GPU (the CUDA twin of layer_norm.h), reading the f32 residual stream.
//
// y[r, :] = (x[s(r), :] - mean) / sqrt(var + eps) * weight + bias over `cols`, for r in [0, rows), where
// s(r) = row_index[r] when row_index (device, int32, nullable) is given, else r: the gather lets CLIP pool
// its class/EOS tokens and normalise them in one launch. Its entries must be rows of x (device data, so
// not checked here). x is f32 with row stride x_ld; weight and bias are
// f32 [cols]; y has dtype y_dtype (f32, f16 or bf16: the next GEMM's input type) and row stride y_ld.
// y may alias x only when y_dtype is f32, x_ld == y_ld and row_index is null (in place). Statistics in f32
// with a two-pass (mean, then squared deviations) reduction, as torch does, so rows with a large mean keep
// their precision.
// Tests: layer_norm_cuda_test.cpp; bench: layer_norm_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

struct LayerNormCudaArgs {
  const float* x = nullptr;
  int64_t x_ld = 0;
  const int32_t* row_index = nullptr;  // device, [rows], or nullptr
  const float* weight = nullptr;
  const float* bias = nullptr;
  float eps = 1e-5f;
  int64_t rows = 0, cols = 0;
  void* y = nullptr;
  DType y_dtype = DType::kBF16;
  int64_t y_ld = 0;
};

Status layer_norm_cuda(const LayerNormCudaArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
