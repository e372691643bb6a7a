// Which architectures mmserve knows, and what a model directory holds (for `mmserve inspect`).
//
// The registry maps HF `architectures` names (config.json) to the model families known here, one table line per
// architecture (registry.cpp): CLIPModel, WhisperForConditionalGeneration, SamModel, and the Llama family
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM: models/llama; and
// LlavaForConditionalGeneration, models/llava, a decoder behind a vision tower). What serves a family (its
// executor and input preparation) is engine/families.h. inspect_model_dir() reads only the config and the
// safetensors headers, never the weights, so it is instant even for large checkpoints.
// Tests: tests/unit/models/registry_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"

namespace mmserve::models {

enum class Family { kClip, kWhisper, kSam, kLlama };

// Reads config.json's "architectures" (or "model_type") and returns the family; kUnimplemented names the
// architecture when it is not known.
StatusOr<Family> detect_family(const std::string& model_dir);

// "clip", "whisper", "sam", "llama" (the Llama family of decoders: Llama, Mistral, Qwen2, Qwen3).
const char* family_name(Family family);

struct ModelSummary {
  std::string architecture;
  std::string model_type;
  std::map<std::string, int64_t> parameters_by_dtype;  // "bf16" -> count
  int64_t parameters = 0;
  int64_t bytes_on_disk = 0;    // tensor bytes in the safetensors files
  int64_t bytes_in_memory = 0;  // what the CPU path holds (f32 copies)
  int64_t tensors = 0;
  int64_t shards = 0;
};

StatusOr<ModelSummary> inspect_model_dir(const std::string& model_dir);

}  // namespace mmserve::models
