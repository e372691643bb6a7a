// The gated MLP activation of Llama, Mistral and Qwen: y = silu(gate) * up, silu(x) = x * sigmoid(x)
// (HF's `act_fn(gate_proj(x)) * up_proj(x)` with hidden_act "silu").
//
// Contract: gate and up [rows, cols] with row stride in_ld (two column ranges of one fused projection, or two
// buffers), y [rows, cols] with row stride y_ld; f32; y may alias gate (not up) when the strides are equal.
// Tests: swiglu_test.cpp (against the formula in double); bench: swiglu_bench.cpp.
#pragma once

#include <cstdint>

namespace mmserve::kernels {

void swiglu(const float* gate, const float* up, int64_t in_ld, int64_t rows, int64_t cols, float* y, int64_t y_ld);

}  // namespace mmserve::kernels
