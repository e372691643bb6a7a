// A PEFT LoRA directory for a family's linears (see peft_lora_file.h).
#include "models/lora/peft_lora_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "models/common/weight_table.h"

namespace mmserve::models {

int64_t PeftLoraFile::bytes() const {
  int64_t total = 0;
  for (const auto& [name, m] : modules) total += static_cast<int64_t>((m.a.size() + m.b.size()) * sizeof(float));
  return total;
}

StatusOr<PeftDir> open_peft_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  PeftDir out;
  out.config_path = (fs::path(dir) / "adapter_config.json").string();
  std::ifstream in(out.config_path, std::ios::binary);
  if (!in) return not_found(out.config_path + ": cannot be read (an adapter directory holds adapter_config.json)");
  std::ostringstream text;
  text << in.rdbuf();
  ASSIGN_OR_RETURN(out.config, parse_peft_lora_config(text.str(), out.config_path));
  out.weights_path = (fs::path(dir) / "adapter_model.safetensors").string();
  if (!fs::exists(out.weights_path)) {
    return not_found(out.weights_path +
                     ": missing (PEFT's adapter_model.bin pickles are not read; re-save with "
                     "safe_serialization=True)");
  }
  ASSIGN_OR_RETURN(out.file, SafetensorsFile::open(out.weights_path));
  return out;
}

std::optional<LoraTensorName> parse_lora_tensor_name(const std::string& tensor_name) {
  LoraTensorName out;
  out.module = tensor_name;
  const std::string saved_prefix = "base_model.model.";
  if (out.module.rfind(saved_prefix, 0) == 0) out.module = out.module.substr(saved_prefix.size());
  for (const std::string suffix : {".lora_A.weight", ".lora_B.weight"}) {
    const std::string& m = out.module;
    if (m.size() > suffix.size() && m.compare(m.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.is_a = suffix == ".lora_A.weight";
      out.module.resize(m.size() - suffix.size());
      return out;
    }
  }
  return std::nullopt;
}

StatusOr<PeftLoraFile> read_peft_lora_dir(const std::string& dir, const PeftModuleLookup& lookup,
                                          const std::string& supported) {
  PeftLoraFile out;
  out.dir = dir;
  ASSIGN_OR_RETURN(PeftDir opened, open_peft_dir(dir));
  out.config = std::move(opened.config);
  const std::string& config_path = opened.config_path;
  const std::string& weights_path = opened.weights_path;
  if (!out.config.target_parameters.empty()) {
    return unimplemented(config_path + ": target_parameters (LoRA on raw parameters) is not supported for this model " +
                         "(mmserve adapts " + supported + ")");
  }
  const PeftLoraConfig& pc = out.config;
  std::vector<std::pair<const TensorInfo*, std::vector<float>*>> work;  // every check first, then the conversions
  for (const auto& [tensor_name, info] : opened.file->tensors()) {
    const std::string where = weights_path + ": " + tensor_name;
    const std::optional<LoraTensorName> parsed = parse_lora_tensor_name(tensor_name);
    if (!parsed) return invalid_argument(where + ": not a LoRA matrix (PEFT saves <module>.lora_A.weight and .lora_B.weight)");
    const std::string& module = parsed->module;
    const bool is_a = parsed->is_a;
    const std::optional<PeftModuleShape> shape = lookup(module);
    if (!shape) {
      return unimplemented(where + ": LoRA on '" + module.substr(0, 120) + "' is not supported (mmserve adapts " +
                           supported + ")");
    }
    StatusOr<bool> targeted = pc.targets(module);
    if (!targeted.ok()) return invalid_argument(where + ": " + std::string(targeted.status().message()));
    if (!*targeted) return invalid_argument(where + ": '" + module + "' is not among the config's target_modules");
    StatusOr<int64_t> rank = pc.rank_for(module);
    if (!rank.ok()) return invalid_argument(where + ": " + std::string(rank.status().message()));
    const std::vector<int64_t> want = is_a ? std::vector<int64_t>{*rank, shape->in}
                                           : std::vector<int64_t>{shape->out, *rank};
    if (info.shape != want) {
      return invalid_argument(where + ": shape " + shape_to_string(info.shape) + ", expected " + shape_to_string(want) +
                              " (rank " + std::to_string(*rank) + " by r / rank_pattern)");
    }
    if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16) {
      return unimplemented(where + " is " + dtype_name(info.dtype) + " (f32, f16 or bf16)");
    }
    StatusOr<double> scale = pc.scale_for(module);
    if (!scale.ok()) return invalid_argument(where + ": " + std::string(scale.status().message()));
    LoraModule& m = out.modules[module];
    std::vector<float>& values = is_a ? m.a : m.b;
    if (!values.empty()) {  // saved with and without base_model.model.
      return invalid_argument(where + ": a second " + (is_a ? "lora_A" : "lora_B") + " for '" + module + "'");
    }
    m.rank = *rank, m.in = shape->in, m.out = shape->out, m.scale = static_cast<float>(*scale);
    values.resize(static_cast<size_t>(info.numel()));  // sized now so the duplicate check above sees it
    work.emplace_back(&info, &values);
  }
  for (const auto& [name, m] : out.modules) {
    if (m.a.empty() || m.b.empty()) {
      return invalid_argument(weights_path + ": " + name + " has only one of lora_A / lora_B");
    }
    out.max_rank = std::max(out.max_rank, m.rank);
  }
  if (out.modules.empty()) return invalid_argument(weights_path + ": holds no LoRA matrices");
  for (const auto& [info, values] : work) {
    if (!convert_to_f32(info->dtype, info->data, values->data(), info->numel())) {
      return internal_error(weights_path + ": " + info->name + ": conversion failed");
    }
  }
  return out;
}

}  // namespace mmserve::models
