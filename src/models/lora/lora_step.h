// A decoder step's LoRA deltas on the CPU (issue 16): for one linear, each sequence's adapter's delta added to its
// rows of the linear's output, as PEFT's lora.Linear.forward adds it after the base layer (and as its ParamWrapper's
// merged weight gives it, to rounding: x (W + scale B A)^T = x W^T + scale B (A x)); under gate routing a second
// adapter's too, each scaled by its weight. LlamaModel's forward calls it after each adapted linear: over the step's
// token rows (segments: query_start), and over one expert's rows of Mixtral's sparse MLP (segments: each sequence's
// rows among the expert's, which the routing keeps in token order). Tests: tests/unit/models/lora_adapter_test.cpp,
// lora_experts_test.cpp (the decoder under adapters against merged checkpoints).
#pragma once

#include <cstdint>
#include <functional>

#include "models/common/decoder_step.h"
#include "models/lora/lora_adapter.h"

namespace mmserve::models {

// The module of an adapter a linear reads (null or rank 0: the adapter leaves it alone).
using LoraModuleOf = std::function<const LoraModule*(const LoraAdapter&)>;

// For every sequence s of `step` whose adapter has a module there: out[r] += w * scale * B (A in[r]) for the rows r in
// [seg_start[s], seg_start[s + 1]) of `in` and `out` (f32, strided by their ld), w 1 for step.loras (or
// lora_weights[2 s]), then the same for step.loras_second with lora_weights[2 s + 1]. seg_start: [S + 1], ascending.
// Nothing when the step has no adapters. Through kernels::lora_sgmv (the rank values in f32 between the products).
void add_lora_deltas(const DecoderStep& step, const int32_t* seg_start, const LoraModuleOf& module_of, const float* in,
                     int64_t in_ld, float* out, int64_t out_ld);

}  // namespace mmserve::models
