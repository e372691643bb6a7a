// Architecture detection and checkpoint summaries (see registry.h).
#include "models/registry.h"

#include <filesystem>

#include "core/json_config.h"
#include "core/safetensors.h"

namespace mmserve::models {

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
  if (architecture == "CLIPModel" || (architecture.empty() && model_type == "clip")) return Family::kClip;
  if (architecture == "WhisperForConditionalGeneration" || (architecture.empty() && model_type == "whisper")) {
    return Family::kWhisper;
  }
  if (architecture.empty() && model_type.empty()) {
    return invalid_argument(path + ": neither \"architectures\" nor \"model_type\" is set");
  }
  return unimplemented(path + ": architecture '" + (architecture.empty() ? model_type : architecture) +
                       "' is not supported (supported: CLIPModel, WhisperForConditionalGeneration)");
}

const char* family_name(Family family) {
  switch (family) {
    case Family::kClip: return "clip";
    case Family::kWhisper: return "whisper";
  }
  return "unknown";
}

Status check_servable(Family family) {
  switch (family) {
    case Family::kClip: return ok_status();
    case Family::kWhisper: return ok_status();
  }
  return internal_error("unknown model family");
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
