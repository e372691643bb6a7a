// A PEFT LoRA adapter's adapter_config.json (issue 16), as PEFT writes it and as users bring it.
//
// What a LoRA module computes, unmerged (PEFT's lora.Linear.forward): y = base(x) + scale * B(A(x)), A [r, in],
// B [out, r], scale = alpha / r, or alpha / sqrt(r) with `use_rslora`. r and alpha are per module: `rank_pattern`
// and `alpha_pattern` map patterns to values, matched against the module's name in the base model (e.g.
// "model.layers.1.mlp.down_proj") as PEFT's get_pattern_key does: the first key, in the file's order, for which
// the name fully matches `(.*\.)?(KEY)$` (KEY a regular expression); else `r` / `lora_alpha`.
// `target_modules` is a list (a module matches when its name equals an entry or ends with "." + entry) or one
// regular expression (a full match), as PEFT's check_target_module_exists; `exclude_modules` likewise removes
// modules. `fan_in_fan_out` only changes how PEFT merges into Conv1D-style weights, never the unmerged forward,
// so it is accepted. `lora_dropout` and the init options do not act at inference. `target_parameters` (LoRA on raw
// parameters, PEFT's ParamWrapper: Mixtral's fused experts) is a list of names read as given; the model's loader
// decides what it takes (lora_adapter.h), and `target_modules` may then be empty.
//
// Refused at parse, naming the field: a peft_type other than LORA, use_dora, bias other than "none", lora_bias,
// modules_to_save, layer_replication, trainable_token_indices, alora_invocation_tokens, use_qalora; r <= 0; patterns
// that are not regular expressions; rank_pattern or alpha_pattern beside target_parameters (how PEFT matches their
// keys to parameters is not known here). Unknown keys are ignored (PEFT adds options every release; the ones above
// change the forward).
// Tests: tests/unit/models/lora_adapter_test.cpp, lora_experts_test.cpp; fuzz: fuzz/peft_config_fuzz.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mmserve::models {

struct PeftLoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  bool fan_in_fan_out = false;
  std::string base_model;  // base_model_name_or_path, as written (informational)
  std::vector<std::pair<std::string, int64_t>> rank_pattern;  // in the file's order
  std::vector<std::pair<std::string, double>> alpha_pattern;
  std::vector<std::string> target_list;  // target_modules as a list, or
  std::optional<std::string> target_regex;  // ... as one regular expression
  std::vector<std::string> exclude_list;
  std::optional<std::string> exclude_regex;
  std::vector<std::string> target_parameters;  // as written ("experts.gate_up_proj"); empty: none

  // The module's rank and alpha by the patterns, and its scale. Patterns are matched as Python's re (PCRE2, with
  // its work bounded): kInvalidArgument, naming the pattern, for one too costly to match (nested quantifiers).
  StatusOr<int64_t> rank_for(const std::string& module) const;
  StatusOr<double> alpha_for(const std::string& module) const;
  StatusOr<double> scale_for(const std::string& module) const;
  // Whether PEFT would have put LoRA on this module (target_modules minus exclude_modules); errors as above.
  StatusOr<bool> targets(const std::string& module) const;
};

// `where` names the file in errors. kInvalidArgument for malformed JSON, wrong types and bad values;
// kUnimplemented for the options mmserve does not apply (the list above), naming the field.
StatusOr<PeftLoraConfig> parse_peft_lora_config(const std::string& json_text, const std::string& where);

}  // namespace mmserve::models
