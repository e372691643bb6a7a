// Layer normalisation over the last dimension, as torch.nn.LayerNorm (biased variance, eps inside sqrt).
//
// Contract: x [rows, cols] f32 (rows may be strided), gamma/beta [cols] f32, y [rows, cols]; y may alias x.
// Statistics are accumulated in double-free f32 two-pass form (mean, then centred variance) for accuracy
// matching torch within 1e-6 relative on typical activations.
// Tests: layer_norm_test.cpp; bench: layer_norm_bench.cpp.
#pragma once

#include "core/tensor.h"

namespace mmserve::kernels {

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y);

}  // namespace mmserve::kernels
