// Internal to the CPU kernels: the fused GEMM epilogue y[i, :] = act(y[i, :] + bias[:]) in one pass.
//
// linear() (and so patch_embed()) runs it inside its parallel region, each thread on the block of y its own
// sgemm has just written (still in cache), so bias and activation cost no extra pass over memory. Same
// formulas as activation() (activation.h).
// Tests: gemm_test.cpp (every activation, with and without bias, strided y).
#pragma once

#include <cstdint>

#include "kernels/activation/activation.h"

namespace mmserve::kernels {

// y is [rows, cols] with row stride ldy; bias is [cols] or nullptr. Does nothing for (nullptr, kNone).
// Serial: the caller parallelises.
void bias_activation_rows(float* y, int64_t rows, int64_t cols, int64_t ldy, const float* bias, Activation act);

}  // namespace mmserve::kernels
