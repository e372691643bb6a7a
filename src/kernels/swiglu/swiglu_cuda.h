// SwiGLU on the GPU: the CUDA twin of swiglu(const SwigluArgs&) in swiglu.h: y = silu(gate) * up with gate and up
// two column ranges of one fused gate_up GEMM output (gate = row start, up = gate + I, in_ld = 2 * I) or two
// buffers; f32, f16 or bf16 in and out, silu in f32 with expf (not the __expf intrinsic). Device pointers;
// launches only (no allocation, no sync), so it can be captured into a CUDA graph.
// Tests: swiglu_cuda_test.cpp; bench: swiglu_cuda_bench.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/swiglu/swiglu.h"

namespace mmserve::kernels {

Status swiglu_cuda(const SwigluArgs& args, cudaStream_t stream);

}  // namespace mmserve::kernels
