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
// - FP8 (quant_method "fp8", "compressed-tensors"): kUnimplemented "FP8 checkpoints: not yet" (issue 17 item 3).
// Any other quant_method is kUnimplemented naming it; a wrong type or value is kInvalidArgument naming the field.
// Unknown keys are ignored (damp_percent, true_sequential, do_fuse, ... do not change the stored tensors).
// Tests: tests/unit/models/quant_format_test.cpp; fuzz: fuzz/quant_config_fuzz.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mmserve::models {

enum class QuantMethod { kNone, kAwq, kGptq };

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  int64_t bits = 4;
  int64_t group_size = 128;  // -1: one group spanning in_features
  bool zero_point = true;    // AWQ (informational: qzeros are always read)
  bool desc_act = false;     // GPTQ: act-order (g_idx permuted)
  bool sym = true;           // GPTQ
  bool gptq_v2 = false;      // GPTQ checkpoint_format "gptq_v2": qzeros store the zero itself, not zero - 1
  std::vector<std::string> modules_to_not_convert;

  bool quantized() const { return method != QuantMethod::kNone; }
  // The group size for a linear with `k` inputs (-1 is k).
  int64_t group_size_for(int64_t k) const { return group_size == -1 ? k : group_size; }
  // "awq gemm", "gptq v1" or "gptq v2" (for messages).
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

// The quantization_config object `mmserve quantize` writes for `config` (AWQ: version gemm, zero_point true; GPTQ:
// desc_act, sym and checkpoint_format as set).
nlohmann::json quant_config_to_json(const QuantConfig& config);

}  // namespace mmserve::models
