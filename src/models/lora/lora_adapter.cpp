// PEFT LoRA adapters over the Llama family (see lora_adapter.h).
#include "models/lora/lora_adapter.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/dtype.h"
#include "core/safetensors.h"

namespace mmserve::models {
namespace {

constexpr const char* kSavedPrefix = "base_model.model.";

struct Linear {
  LoraTarget target;
  const char* path;  // under the layer
};
constexpr Linear kLinears[kLoraTargets] = {
    {LoraTarget::kQ, "self_attn.q_proj"}, {LoraTarget::kK, "self_attn.k_proj"}, {LoraTarget::kV, "self_attn.v_proj"},
    {LoraTarget::kO, "self_attn.o_proj"}, {LoraTarget::kGate, "mlp.gate_proj"},  {LoraTarget::kUp, "mlp.up_proj"},
    {LoraTarget::kDown, "mlp.down_proj"}};

}  // namespace

std::array<int64_t, 2> lora_target_features(const LlamaConfig& c, LoraTarget t) {
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  switch (t) {
    case LoraTarget::kQ: return {h, q};
    case LoraTarget::kK:
    case LoraTarget::kV: return {h, kv};
    case LoraTarget::kO: return {q, h};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {h, i};
    case LoraTarget::kDown: return {i, h};
  }
  return {0, 0};
}

namespace {

StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot be read (an adapter directory holds adapter_config.json)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

StatusOr<std::vector<float>> to_f32(const TensorInfo& t, const std::string& where) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!convert_to_f32(t.dtype, t.data, out.data(), t.numel())) {
    return unimplemented(where + ": " + t.name + " is " + dtype_name(t.dtype) + " (f32, f16 or bf16)");
  }
  return out;
}

}  // namespace

const char* lora_target_name(LoraTarget t) {
  static const char* names[kLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names[static_cast<int>(t)];
}

int64_t LoraAdapter::bytes() const {
  int64_t total = 0;
  for (const auto& layer : layers) {
    for (const LoraModule& m : layer) total += static_cast<int64_t>((m.a.size() + m.b.size()) * sizeof(float));
  }
  return total;
}

std::vector<std::string> LoraAdapter::target_names() const {
  std::vector<std::string> out;
  for (int t = 0; t < kLoraTargets; ++t) {
    for (const auto& layer : layers) {
      if (layer[t].present()) {
        out.push_back(lora_target_name(static_cast<LoraTarget>(t)));
        break;
      }
    }
  }
  return out;
}

StatusOr<std::shared_ptr<LoraAdapter>> load_lora_adapter(const std::string& dir, const std::string& name,
                                                         const LlamaConfig& config,
                                                         const std::vector<std::string>& prefixes) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(dir) / "adapter_config.json").string();
  ASSIGN_OR_RETURN(const std::string text, read_text(config_path));
  auto adapter = std::make_shared<LoraAdapter>();
  static std::atomic<uint64_t> next_id{1};
  adapter->name = name, adapter->dir = dir, adapter->id = next_id++;
  ASSIGN_OR_RETURN(adapter->config, parse_peft_lora_config(text, config_path));
  const std::string weights_path = (fs::path(dir) / "adapter_model.safetensors").string();
  if (!fs::exists(weights_path)) {
    return not_found(weights_path + ": missing (PEFT's adapter_model.bin pickles are not read; re-save with "
                     "safe_serialization=True)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(weights_path));

  // Every tensor must be one of the decoder's linears' lora_A / lora_B.
  std::map<std::string, std::pair<int64_t, LoraTarget>> modules;  // module name -> (layer, target)
  for (const std::string& prefix : prefixes) {
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      for (const Linear& lin : kLinears) {
        if (config.num_experts > 0 && lin.target >= LoraTarget::kGate) continue;  // Mixtral: no dense MLP
        modules[prefix + "layers." + std::to_string(l) + "." + lin.path] = {l, lin.target};
      }
    }
  }
  std::string used_prefix;  // the first module's; every other must share it
  adapter->layers.resize(static_cast<size_t>(config.num_hidden_layers));
  const PeftLoraConfig& pc = adapter->config;
  for (const auto& [tensor_name, info] : file->tensors()) {
    const std::string where = weights_path + ": " + tensor_name;
    std::string module = tensor_name;
    if (module.rfind(kSavedPrefix, 0) == 0) module = module.substr(std::string(kSavedPrefix).size());
    bool is_a = false;
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
      const std::string s = suffix;
      if (module.size() > s.size() && module.compare(module.size() - s.size(), s.size(), s) == 0) {
        is_a = s == ".lora_A.weight";
        module.resize(module.size() - s.size());
        break;
      }
      if (s == ".lora_B.weight") {
        return invalid_argument(where + ": not a LoRA matrix (PEFT saves <module>.lora_A.weight and .lora_B.weight)");
      }
    }
    const auto it = modules.find(module);
    if (it == modules.end()) {
      return unimplemented(where + ": LoRA on '" + module.substr(0, 120) +
                           "' is not supported (mmserve adapts the decoder's q/k/v/o and gate/up/down projections)");
    }
    if (!pc.targets(module)) {
      return invalid_argument(where + ": '" + module + "' is not among the config's target_modules");
    }
    const auto [layer, target] = it->second;
    const std::string prefix = module.substr(0, module.find("layers."));
    if (used_prefix.empty()) used_prefix = prefix;
    if (prefix != used_prefix) {
      return invalid_argument(where + ": modules under both '" + used_prefix + "' and '" + prefix + "'");
    }
    LoraModule& m = adapter->layers[layer][static_cast<int>(target)];
    const auto [in, out] = lora_target_features(config, target);
    const int64_t rank = pc.rank_for(module);
    const std::vector<int64_t> want = is_a ? std::vector<int64_t>{rank, in} : std::vector<int64_t>{out, rank};
    if (info.shape != want) {
      return invalid_argument(where + ": shape " + std::to_string(info.shape.size() == 2 ? info.shape[0] : -1) + "x" +
                              std::to_string(info.shape.size() == 2 ? info.shape[1] : -1) + ", expected " +
                              std::to_string(want[0]) + "x" + std::to_string(want[1]) +
                              " (rank " + std::to_string(rank) + " by r / rank_pattern)");
    }
    ASSIGN_OR_RETURN(std::vector<float> values, to_f32(info, weights_path));
    (is_a ? m.a : m.b) = std::move(values);
    m.rank = rank, m.in = in, m.out = out;
    m.scale = static_cast<float>(pc.scale_for(module));
  }
  int64_t adapted = 0;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    for (const Linear& lin : kLinears) {
      LoraModule& m = adapter->layers[l][static_cast<int>(lin.target)];
      if (m.rank == 0) continue;
      if (m.a.empty() || m.b.empty()) {
        return invalid_argument(weights_path + ": " + used_prefix + "layers." + std::to_string(l) + "." + lin.path +
                                " has only one of lora_A / lora_B");
      }
      adapter->max_rank = std::max(adapter->max_rank, m.rank);
      ++adapted;
    }
  }
  if (adapted == 0) return invalid_argument(weights_path + ": holds no LoRA matrices");
  return adapter;
}

}  // namespace mmserve::models
