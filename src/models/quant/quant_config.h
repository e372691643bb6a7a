// config.json's `quantization_config` (issue 17): which W4A16 checkpoint format a model directory holds, typed and
// checked, so that the loader (quant_load.h) and the readers (int4_checkpoint.h) never look at JSON.
//
// Read as users have them from the hub:
// - AWQ (AutoAWQ, and transformers' AwqConfig): quant_method "awq", version "gemm" (any case), bits or w_bit 4,
//   group_size or q_group_size (-1: one group over K), zero_point, modules_to_not_convert; backend "autoawq" (the
//   default). version gemv / gemv_fast / marlin / exllama / ipex and backend "llm-awq" pack differently: kUnimplemented
//   naming the field. zero_point is recorded but, as vLLM's AWQ layer does, the readers use the stored qzeros
//   whatever it says (AutoAWQ's WQLinear_GEMM.from_linear asserts zeros, so a GEMM checkpoint always has them).
// - GPTQ (AutoGPTQ, gptqmodel, optimum): quant_method "gptq", bits 4, group_size (-1 allowed), desc_act, sym,
//   checkpoint_format (or gptqmodel's older `format`) "gptq" (v1, the default: stored zero = zero - 1) or "gptq_v2"
//   (stored zero exact); is_marlin_format true, other formats, pack_dtype other than int32, lm_head true, a non-empty
//   `dynamic` or a non-null modules_in_block_to_quantize: kUnimplemented naming the field.
// - FP8, E4M3 weights with per-tensor or per-channel scales, linear inputs unquantised, static per tensor, dynamic
//   per tensor or dynamic per token (models/quant/fp8_checkpoint.h reads the tensors):
//   * compressed-tensors (llm-compressor's output; vLLM's CompressedTensorsW8A8Fp8 / W8A16Fp8 read it): quant_method
//     "compressed-tensors", format "float-quantized" or "naive-quantized" (also per group), config_groups of one
//     scheme (several groups only when their schemes agree; a group may be a preset's name, FP8 or FP8_DYNAMIC,
//     mapped to its targets), weights {num_bits 8, type float, strategy tensor|channel, symmetric, dynamic false},
//     input_activations null (weight-only) or {num_bits 8, type float, strategy tensor (dynamic or not) | token
//     (dynamic) | group (dynamic, group_size)}, weights strategy block with block_structure [rows, cols] (FP8_BLOCK:
//     weight_scale per block), targets ("Linear": every linear; a module name; "re:" + a regex matched at the name's
//     start, as compressed-tensors' _is_equal_or_regex_match), ignore (the same forms). Other formats (pack-quantized,
//     ...), int types, group / tensor_group weight strategies, static group inputs, asymmetric or dynamic weights,
//     output_activations and a kv_cache_scheme: kUnimplemented naming the field; a static token strategy is
//     kInvalidArgument (as compressed-tensors' QuantizationArgs validator).
//   * AutoFP8 / vLLM's Fp8Config: quant_method "fp8", activation_scheme "static" (input_scale per linear) or "dynamic"
//     (the default; per-tensor scales computed from each input, as AutoFP8's FP8DynamicLinear), ignored_layers (or
//     transformers' modules_to_not_convert: exact names or "re:" patterns); lm_head and Mixtral's router are never FP8
//     here (vLLM's Fp8Config quantises LinearBase layers only, transformers' FineGrainedFP8 skips lm_head).
//     weight_block_size [rows, cols] (transformers' FineGrainedFP8Config, DeepSeek-V3 / Qwen3 FP8 checkpoints):
//     weight_scale_inv per block, inputs dynamic per token and group of `cols` (static is kUnimplemented, as vLLM).
//     kv_cache_scheme: kUnimplemented naming the field.
// Any other quant_method is kUnimplemented naming it; a wrong type or value is kInvalidArgument naming the field.
// Unknown keys are ignored (damp_percent, true_sequential, do_fuse, ... do not change the stored tensors).
// Tests: tests/unit/models/quant_format_test.cpp; fuzz: fuzz/quant_config_fuzz.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::models {

enum class QuantMethod { kNone, kAwq, kGptq, kFp8 };

// FP8: how a linear's weight is scaled (weight_scale [1] or [out, 1]) and how its input is quantised.
enum class Fp8WeightScale { kTensor, kChannel, kBlock };  // kBlock: weight_scale_inv per fp8_block block
enum class Fp8InputScale {
  kNone,           // weight-only (W8A16): the input as is
  kStatic,         // one input_scale per linear, from calibration
  kDynamicTensor,  // amax of the whole input / 448, per forward
  kDynamicToken,   // amax of each input row / 448
  kDynamicGroup,   // amax of each row's group of fp8_input_group columns / 448 (block-wise checkpoints)
};
const char* fp8_input_scale_name(Fp8InputScale s);  // "none", "static", "dynamic (per tensor)", ...

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  int64_t bits = 4;
  int64_t group_size = 128;  // -1: one group spanning in_features
  bool zero_point = true;    // AWQ (informational: qzeros are always read)
  bool desc_act = false;     // GPTQ: act-order (g_idx permuted)
  bool sym = true;           // GPTQ
  bool gptq_v2 = false;      // GPTQ checkpoint_format "gptq_v2": qzeros store the zero itself, not zero - 1
  std::vector<std::string> modules_to_not_convert;
  // FP8 (method kFp8).
  bool compressed_tensors = false;  // quant_method "compressed-tensors" (else AutoFP8's "fp8")
  Fp8WeightScale fp8_weights = Fp8WeightScale::kTensor;
  Fp8InputScale fp8_inputs = Fp8InputScale::kNone;
  std::vector<std::string> fp8_targets = {"Linear"};  // compressed-tensors targets
  std::vector<std::string> fp8_ignore;                // ignore / ignored_layers
  std::vector<int64_t> fp8_block;                     // kBlock: [rows, cols] (weight_block_size, block_structure)
  int64_t fp8_input_group = 0;                        // kDynamicGroup: columns per group (block cols, group_size)

  bool quantized() const { return method != QuantMethod::kNone; }
  // The group size for a linear with `k` inputs (-1 is k).
  int64_t group_size_for(int64_t k) const { return group_size == -1 ? k : group_size; }
  // "awq gemm", "gptq v1", "gptq v2", "fp8 compressed-tensors" or "fp8" (for messages).
  std::string format_name() const;
};

// The quantization_config of a parsed config.json (`config` is its root object; `label` names the file in errors).
// A config without the key (or with null) gives method kNone.
StatusOr<QuantConfig> parse_quant_config(const nlohmann::json& config, const std::string& label);

// Whether `module` (a module's full name, "model.layers.0.mlp.down_proj") is quantised under modules_to_not_convert.
// An entry excludes the module it names and everything under it, matched at dots: the name equals it, starts with it
// + ".", ends with "." + it, or contains "." + it + "." (AutoAWQ tests `key in name`, transformers 5 a prefix or a
// suffix; for the entries checkpoints carry, "lm_head", "gate", "model.layers.0.mlp", these agree).
bool quant_converts_module(const QuantConfig& config, const std::string& module);

// Whether the linear `module` ("model.layers.0.mlp.up_proj", "lm_head") is FP8 under `config` (method kFp8): some
// target matches it ("Linear" matches every linear) and no ignore entry does. Entries are exact names or "re:" +
// a regular expression matched from the start of the name (Python's re.match, through PCRE2 with bounded work; for
// quant_method fp8 a plain entry also matches at dots as quant_converts_module, transformers' modules_to_not_convert);
// kInvalidArgument for a pattern that does not compile or takes too long.
StatusOr<bool> fp8_converts_module(const QuantConfig& config, const std::string& module);

// The quantization_config object `mmserve quantize` writes for `config` (AWQ: version gemm, zero_point true; GPTQ:
// desc_act, sym and checkpoint_format as set); for kFp8 the compressed-tensors config `mmserve calibrate` writes
// (format float-quantized, one group targeting "Linear", the ignore list).
nlohmann::json quant_config_to_json(const QuantConfig& config);

}  // namespace mmserve::models
