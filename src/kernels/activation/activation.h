// Pointwise activations used by the encoders: quick_gelu (original CLIP) and exact erf GELU (HF "gelu").
//
// Contract: f32, contiguous, any shape; in place allowed (y may alias x). Formulas match PyTorch/HF:
//   quick_gelu(x) = x * sigmoid(1.702 * x)
//   gelu(x)       = 0.5 * x * (1 + erf(x / sqrt(2)))
//   gelu_tanh(x)  = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))   ("gelu_new", "gelu_pytorch_tanh")
// Tests: activation_test.cpp; bench: activation_bench.cpp.
#pragma once

#include <optional>
#include <string_view>

#include "core/tensor.h"

namespace mmserve::kernels {

enum class Activation { kNone, kQuickGelu, kGelu, kGeluTanh };

// Maps HF's `hidden_act` strings ("quick_gelu", "gelu", "gelu_new", "gelu_pytorch_tanh") to an Activation.
std::optional<Activation> activation_from_hf_name(std::string_view name);
const char* activation_name(Activation act);

// y = act(x), element-wise.
void activation(const Tensor& x, Tensor& y, Activation act);
// The scalar formula (also used by fused epilogues and as the reference in tests).
float activation_scalar(float x, Activation act);

}  // namespace mmserve::kernels
