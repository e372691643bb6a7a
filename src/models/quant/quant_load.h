// Loading a W4A16 checkpoint on the CPU path (issue 17): a decoder's weight table with each quantised linear's
// `<module>.weight` replaced by its format's qweight / qzeros / scales [/ g_idx], and those linears dequantised to
// f32 (dequantize in int4_checkpoint.h) into the model's F32Weights under the `.weight` name the forward binds.
// The CPU forward of a quantised checkpoint is therefore the f32 forward of the dequantised model.
//
// Quantised linears: the decoder blocks' q/k/v/o_proj, gate/up/down_proj and Mixtral's experts' w1/w2/w3
// ("<...>.layers.N.<...>.<name>.weight", 2-D), as AutoAWQ and GPTQ quantise them, less modules_to_not_convert;
// never embed_tokens, norms, lm_head or Mixtral's router (block_sparse_moe.gate).
//
// FP8 checkpoints (method kFp8, models/quant/fp8_checkpoint.h): the linears are those above, plus lm_head and
// Mixtral's router for compressed-tensors (every nn.Linear, as its "Linear" target takes them; vLLM's Fp8Config and
// transformers' FineGrainedFP8 never quantise those two), less what fp8_converts_module rules out; each keeps its
// `.weight` name (stored F8_E4M3) beside `.weight_scale` (or `.weight_scale_inv`, block-wise) and, static,
// `.input_scale`, which check_weights tolerates (the reader checks them per linear). Inputs quantised on Mixtral's
// experts or router are kUnimplemented (the CPU MoE has no per-expert input hook yet); weight-only FP8 works there.
// Tests: tests/unit/models/quant_format_test.cpp, quant_fp8_test.cpp, tests/conformance/quant_hf_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "models/common/weight_table.h"
#include "models/quant/fp8_checkpoint.h"
#include "models/quant/quant_config.h"

namespace mmserve::models {

// Whether the tensor `name` (a spec of a decoder's table, "...layers.3.mlp.down_proj.weight") is one that W4A16
// checkpoints quantise, before modules_to_not_convert.
bool is_quantizable_linear(const std::string& name, size_t rank);

struct QuantizedLinear {
  std::string prefix;  // "model.layers.0.self_attn.q_proj"
  int64_t n = 0, k = 0;
};

struct QuantizedWeightPlan {
  std::vector<WeightSpec> stored;  // what the checkpoint must hold (check_weights)
  std::vector<WeightSpec> floats;  // what F32Weights::load copies (everything but the quantised linears)
  std::vector<QuantizedLinear> linears;
  std::vector<std::string> tolerated_suffixes;  // FP8's scale names (for WeightCheckOptions)
};

// The plan for `specs` under `config` (method kNone: stored = floats = specs). kInvalidArgument naming the linear
// when its sizes do not fit the format (check_int4_dims).
StatusOr<QuantizedWeightPlan> plan_quantized_weights(const QuantConfig& config, const std::vector<WeightSpec>& specs);

// Reads, checks and dequantises each of plan.linears from `store` into `weights` as `<prefix>.weight` [n, k]; for
// FP8, fills `inputs` (when non-null) with each linear's input quantisation.
Status dequantize_linears(const WeightStore& store, const QuantConfig& config, const QuantizedWeightPlan& plan,
                          F32Weights& weights, Fp8Inputs* inputs = nullptr);

}  // namespace mmserve::models
