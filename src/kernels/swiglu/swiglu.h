// The gated MLP activation of Llama, Mistral and Qwen: y = silu(gate) * up, silu(x) = x * sigmoid(x)
// (HF's `act_fn(gate_proj(x)) * up_proj(x)` with hidden_act "silu").
//
// Contract: gate and up [rows, cols] with row stride in_ld (two column ranges of one fused projection, or two
// buffers), y [rows, cols] with row stride y_ld; f32; y may alias gate (not up) when the strides are equal.
// swiglu(const SwigluArgs&): the dtype-generic contract the CUDA twin (swiglu_cuda.h) shares: gate and up in
// in_dtype (f32, f16 or bf16: the gate_up GEMM's output), y in y_dtype; silu(g) * u = g / (1 + exp(-g)) * u in
// f32, rounded once to y_dtype. For a fused [rows, 2 * I] gate_up output pass gate = the row start, up = gate + I
// (elements), in_ld = 2 * I, cols = I. y may alias gate (not up) when y_dtype == in_dtype and y_ld == in_ld.
// Tests: swiglu_test.cpp (against the formula in double); bench: swiglu_bench.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace mmserve::kernels {

void swiglu(const float* gate, const float* up, int64_t in_ld, int64_t rows, int64_t cols, float* y, int64_t y_ld);

struct SwigluArgs {
  const void* gate = nullptr;  // [rows, cols], row stride in_ld
  const void* up = nullptr;    // [rows, cols], row stride in_ld
  DType in_dtype = DType::kBF16;
  int64_t in_ld = 0;
  int64_t rows = 0, cols = 0;
  void* y = nullptr;  // [rows, cols], row stride y_ld
  DType y_dtype = DType::kBF16;
  int64_t y_ld = 0;
};

// kInvalidArgument / kUnimplemented for a broken shape, dtype, null pointer or alias (shared by both twins).
Status validate_swiglu(const SwigluArgs& args);

// The CPU twin of swiglu_cuda.
Status swiglu(const SwigluArgs& args);

}  // namespace mmserve::kernels
