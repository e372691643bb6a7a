// Architecture detection and checkpoint summaries (see registry.h).
#include "models/registry.h"

#include <filesystem>

#include "core/json_config.h"
#include "core/safetensors.h"

namespace mmserve::models {

namespace {

// One line per architecture: HF's `architectures[0]`, its `model_type` (for configs without architectures).
struct Architecture {
  const char* architecture;
  const char* model_type;
  Family family;
  const char* name;
};
constexpr Architecture kArchitectures[] = {
    {"CLIPModel", "clip", Family::kClip, "clip"},
    {"WhisperForConditionalGeneration", "whisper", Family::kWhisper, "whisper"},
    {"SamModel", "sam", Family::kSam, "sam"},
    {"LlamaForCausalLM", "llama", Family::kLlama, "llama"},
    {"MistralForCausalLM", "mistral", Family::kLlama, "llama"},
    {"Qwen2ForCausalLM", "qwen2", Family::kLlama, "llama"},
    {"Qwen3ForCausalLM", "qwen3", Family::kLlama, "llama"},
    {"MixtralForCausalLM", "mixtral", Family::kLlama, "llama"},
    {"LlavaForConditionalGeneration", "llava", Family::kLlama, "llama"},  // a decoder behind a vision tower
    {"LlavaNextForConditionalGeneration", "llava_next", Family::kLlama, "llama"},  // the same, tiled images
};

}  // namespace

StatusOr<Family> detect_family(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(path));
  if (!json.is_object()) return invalid_argument(path + ": expected a JSON object");
  std::string architecture;
  if (json.contains("architectures") && json["architectures"].is_array() && !json["architectures"].empty() &&
      json["architectures"][0].is_string()) {
    architecture = json["architectures"][0].get<std::string>();
  }
  std::string model_type =
      json.contains("model_type") && json["model_type"].is_string() ? json["model_type"].get<std::string>() : "";
  std::string supported;
  for (const Architecture& a : kArchitectures) {
    if (architecture == a.architecture || (architecture.empty() && model_type == a.model_type)) return a.family;
    supported += std::string(supported.empty() ? "" : ", ") + a.architecture;
  }
  if (architecture.empty() && model_type.empty()) {
    return invalid_argument(path + ": neither \"architectures\" nor \"model_type\" is set");
  }
  return unimplemented(path + ": architecture '" + (architecture.empty() ? model_type : architecture) +
                       "' is not supported (supported: " + supported + ")");
}

const char* family_name(Family family) {
  for (const Architecture& a : kArchitectures) {
    if (a.family == family) return a.name;
  }
  return "unknown";
}

StatusOr<ModelSummary> inspect_model_dir(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(path));
  ModelSummary summary;
  if (json.contains("architectures") && json["architectures"].is_array() && !json["architectures"].empty() &&
      json["architectures"][0].is_string()) {
    summary.architecture = json["architectures"][0].get<std::string>();
  }
  if (json.contains("model_type") && json["model_type"].is_string()) summary.model_type = json["model_type"];
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  summary.shards = static_cast<int64_t>(store->files().size());
  for (const std::string& name : store->names()) {
    const TensorInfo* info = store->find(name);
    summary.tensors += 1;
    summary.parameters += info->numel();
    summary.parameters_by_dtype[dtype_name(info->dtype)] += info->numel();
    summary.bytes_on_disk += static_cast<int64_t>(info->nbytes);
    summary.bytes_in_memory += info->numel() * 4;
  }
  return summary;
}

}  // namespace mmserve::models
