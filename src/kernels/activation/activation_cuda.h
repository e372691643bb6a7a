// Element-wise activations on the GPU, in place (the CUDA twin of activation.h): every Activation
// (quick_gelu x * sigmoid(1.702 x), gelu in erf form, gelu_tanh; kNone is a no-op). Computed in f32 whatever
// the storage dtype (f32, f16, bf16). Vectorised 16-byte loads when `x` is 16-byte aligned and count allows.
// Tests: activation_cuda_test.cpp; bench: activation_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/activation/activation.h"

namespace mmserve::kernels {

Status activation_cuda(Activation activation, void* x, DType dtype, int64_t count, cudaStream_t stream);

}  // namespace mmserve::kernels
