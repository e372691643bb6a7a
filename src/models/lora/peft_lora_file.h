// A PEFT LoRA directory read for a model that names its adaptable linears (issue 16): adapter_config.json
// (peft_config.h) plus adapter_model.safetensors, every tensor `base_model.model.<module>.lora_A.weight` [r, in] or
// `.lora_B.weight` [out, r] of a module the model knows, each module targeted by the config, of the rank r /
// rank_pattern give it, with both matrices; read into f32 with the module's scale.
//
// The family says which modules it adapts and their shapes through `lookup` (CLIP's towers: models/clip/clip_lora.h);
// a tensor of any other module, or a config with target_parameters, is kUnimplemented naming it and `supported` (what
// the family adapts), anything else malformed kInvalidArgument naming the file and tensor, all before any matrix is
// converted.
// Tests: tests/unit/models/clip_lora_test.cpp (and the families' conformance tests against PEFT).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/safetensors.h"
#include "core/status.h"
#include "models/lora/lora_adapter.h"
#include "models/lora/peft_config.h"

namespace mmserve::models {

// An adapter directory opened: adapter_config.json parsed and adapter_model.safetensors mapped (kNotFound naming the
// file for a missing one, the config's own errors, the file's). The paths are kept for messages.
struct PeftDir {
  std::string config_path, weights_path;
  PeftLoraConfig config;
  std::unique_ptr<SafetensorsFile> file;
};
StatusOr<PeftDir> open_peft_dir(const std::string& dir);

// A saved tensor's module and matrix: "base_model.model.<module>.lora_A.weight" (or without the prefix) -> {module,
// true}; nullopt for a name that is not a LoRA matrix.
struct LoraTensorName {
  std::string module;
  bool is_a = false;
};
std::optional<LoraTensorName> parse_lora_tensor_name(const std::string& tensor_name);

struct PeftModuleShape {
  int64_t in = 0, out = 0;
};
// The shape of the linear `module` (its name in the base model, "vision_model.encoder.layers.0.self_attn.q_proj"),
// or nullopt when the family does not adapt it.
using PeftModuleLookup = std::function<std::optional<PeftModuleShape>(const std::string& module)>;

struct PeftLoraFile {
  std::string dir;
  PeftLoraConfig config;
  std::map<std::string, LoraModule> modules;  // by module name, each with both matrices
  int64_t max_rank = 0;
  int64_t bytes() const;  // of the f32 matrices
};

StatusOr<PeftLoraFile> read_peft_lora_dir(const std::string& dir, const PeftModuleLookup& lookup,
                                          const std::string& supported);

}  // namespace mmserve::models
