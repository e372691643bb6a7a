// PEFT LoRA adapters over the Llama family (see lora_adapter.h).
#include "models/lora/lora_adapter.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "models/common/weight_table.h"
#include "models/lora/peft_lora_file.h"

namespace mmserve::models {
namespace {

// Mixtral's experts under the layer, as PEFT's ParamWrapper saves them: the outer wrapper's pair, and the inner one's
// when two parameters are adapted (nested).
constexpr const char* kExpertModules[] = {"mlp.experts", "mlp.experts.base_layer"};

struct Linear {
  LoraTarget target;
  const char* path;  // under the layer
};
constexpr Linear kLinears[kLoraTargets] = {{LoraTarget::kQ, "self_attn.q_proj"}, {LoraTarget::kK, "self_attn.k_proj"},
                                           {LoraTarget::kV, "self_attn.v_proj"}, {LoraTarget::kO, "self_attn.o_proj"},
                                           {LoraTarget::kGate, "mlp.gate_proj"}, {LoraTarget::kUp, "mlp.up_proj"},
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

const char* lora_expert_param_name(LoraExpertParam p) {
  return p == LoraExpertParam::kGateUp ? "experts.gate_up_proj" : "experts.down_proj";
}

std::array<int64_t, 2> lora_expert_features(const LlamaConfig& c, LoraExpertParam p) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  return p == LoraExpertParam::kGateUp ? std::array<int64_t, 2>{h, 2 * i} : std::array<int64_t, 2>{i, h};
}

namespace {

// A stored matrix and the module vector it becomes.
struct Conversion {
  const TensorInfo* tensor;
  std::vector<float>* out;
};

// Fills each `out` with its tensor in f32 (the dtypes were checked). The f32 copy is twice the file and is touched
// here for the first time, so writing it once matters: each vector is built by appending chunks converted in an
// L1-sized buffer, never zero-filled first (std::vector's sized constructor would write every byte twice, each
// write faulting its page in). Large adapters spread the tensors over a few threads, as the page faults and the
// conversion both scale with cores: a rank-16 adapter on every linear of Llama-3-8B is 168 MB of f32
// (docs/perf/lora_cpu.md, bench/lora_cpu_bench.cpp).
constexpr int64_t kConvertChunk = 4096;  // floats: 16 KB, in L1

// run(0 .. items - 1) over lora_load_threads(bytes) threads, this one among them.
void run_parallel(size_t items, size_t bytes, const std::function<void(size_t)>& run) {
  const size_t threads = std::min<size_t>(static_cast<size_t>(lora_load_threads(bytes)), items);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < items;) run(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

void convert_all(const std::vector<Conversion>& work) {
  auto convert = [](const Conversion& c) {
    const int64_t n = c.tensor->numel();
    const size_t element = dtype_size(c.tensor->dtype);
    float buffer[kConvertChunk];
    c.out->clear();
    c.out->reserve(static_cast<size_t>(n));
    for (int64_t at = 0; at < n; at += kConvertChunk) {
      const int64_t count = std::min(kConvertChunk, n - at);
      convert_to_f32(c.tensor->dtype, c.tensor->data + static_cast<size_t>(at) * element, buffer, count);
      c.out->insert(c.out->end(), buffer, buffer + count);
    }
  };
  size_t bytes = 0;
  for (const Conversion& c : work) bytes += static_cast<size_t>(c.tensor->numel()) * sizeof(float);
  run_parallel(work.size(), bytes, [&](size_t i) { convert(work[i]); });
}

// One fused experts pair as PEFT's ParamWrapper saves it (A [E r, in], B [out, E r], checked) split into `experts`
// modules in f32: A_e = rows [e r, (e + 1) r) of A, B_e[:, j] = B[:, j E + e]. Each B_e is built by appending, row by
// row (convert_all's reason).
struct ExpertSplit {
  const TensorInfo* a;
  const TensorInfo* b;
  std::vector<LoraModule>* out;  // sized to the experts, ranks and shapes set
};

void split_experts(const ExpertSplit& s) {
  const int64_t experts = static_cast<int64_t>(s.out->size()), rank = (*s.out)[0].rank, in = s.a->shape[1];
  const int64_t rows = s.b->shape[0], width = experts * rank;
  const size_t a_element = dtype_size(s.a->dtype), b_element = dtype_size(s.b->dtype);
  for (int64_t e = 0; e < experts; ++e) {
    LoraModule& m = (*s.out)[e];
    m.a.resize(static_cast<size_t>(rank * in));
    convert_to_f32(s.a->dtype, s.a->data + static_cast<size_t>(e * rank * in) * a_element, m.a.data(), rank * in);
    m.b.clear();
    m.b.reserve(static_cast<size_t>(rows * rank));
  }
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t o = 0; o < rows; ++o) {
    convert_to_f32(s.b->dtype, s.b->data + static_cast<size_t>(o * width) * b_element, row.data(), width);
    for (int64_t e = 0; e < experts; ++e) {
      std::vector<float>& b = (*s.out)[e].b;
      for (int64_t j = 0; j < rank; ++j) b.push_back(row[j * experts + e]);
    }
  }
}

}  // namespace

int lora_load_threads(size_t bytes) {
  constexpr size_t kBytesPerThread = 16 << 20;
  return static_cast<int>(
      std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), 8, bytes / kBytesPerThread + 1}));
}

const char* lora_target_name(LoraTarget t) {
  static const char* names[kLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};
  return names[static_cast<int>(t)];
}

int64_t LoraAdapter::bytes() const {
  int64_t total = slot_image != nullptr ? static_cast<int64_t>(slot_image->bytes) : 0;
  for (const auto& layer : layers) {
    for (const LoraModule& m : layer) total += static_cast<int64_t>((m.a.size() + m.b.size()) * sizeof(float));
  }
  for (const LoraModule& m : projector) total += static_cast<int64_t>((m.a.size() + m.b.size()) * sizeof(float));
  for (const auto& layer : experts) {
    for (const std::vector<LoraModule>& modules : layer) {
      for (const LoraModule& m : modules) total += static_cast<int64_t>((m.a.size() + m.b.size()) * sizeof(float));
    }
  }
  return total;
}

bool LoraAdapter::adapts_experts() const {
  for (const auto& layer : experts) {
    for (const std::vector<LoraModule>& modules : layer) {
      if (!modules.empty()) return true;
    }
  }
  return false;
}

bool LoraAdapter::holds_f32() const {
  for (const auto& layer : layers) {
    for (const LoraModule& m : layer) {
      if (m.present()) return !m.a.empty() && !m.b.empty();  // a load keeps every module's or none
    }
  }
  return true;  // nothing to hold
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
  for (int p = 0; p < kLoraExpertParams; ++p) {
    for (const auto& layer : experts) {
      if (!layer[p].empty()) {
        out.push_back(lora_expert_param_name(static_cast<LoraExpertParam>(p)));
        break;
      }
    }
  }
  for (int k = 0; k < 2; ++k) {
    if (projector[k].present()) out.push_back("multi_modal_projector.linear_" + std::to_string(k + 1));
  }
  return out;
}

StatusOr<std::shared_ptr<LoraAdapter>> load_lora_adapter(const std::string& dir, const std::string& name,
                                                         const LlamaConfig& config,
                                                         const std::vector<std::string>& prefixes,
                                                         const LoraImagePacker& pack,
                                                         const LoraProjectorShape* projector) {
  ASSIGN_OR_RETURN(PeftDir opened, open_peft_dir(dir));
  auto adapter = std::make_shared<LoraAdapter>();
  static std::atomic<uint64_t> next_id{1};
  adapter->name = name, adapter->dir = dir, adapter->id = next_id++;
  adapter->config = std::move(opened.config);
  const std::string& config_path = opened.config_path;
  const std::string& weights_path = opened.weights_path;
  const std::unique_ptr<SafetensorsFile>& file = opened.file;
  const PeftLoraConfig& pc = adapter->config;
  const std::string experts_supported = "mmserve adapts Mixtral's experts.gate_up_proj and experts.down_proj";
  if (!pc.target_parameters.empty() && config.num_experts == 0) {
    return unimplemented(config_path +
                         ": target_parameters (LoRA on raw parameters) is not supported for this model (" +
                         experts_supported + ")");
  }
  for (const std::string& parameter : pc.target_parameters) {
    if (parameter != lora_expert_param_name(LoraExpertParam::kGateUp) &&
        parameter != lora_expert_param_name(LoraExpertParam::kDown)) {
      return unimplemented(config_path + ": target_parameters '" + parameter.substr(0, 120) + "' is not supported (" +
                           experts_supported + ")");
    }
  }

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
  // Mixtral's experts: module name -> (layer, nesting); a pair's parameter is known by its shapes (below).
  std::map<std::string, std::pair<int64_t, int>> expert_modules;
  for (const std::string& prefix : prefixes) {
    for (int64_t l = 0; l < config.num_hidden_layers && config.num_experts > 0; ++l) {
      for (int depth = 0; depth < 2; ++depth) {
        expert_modules[prefix + "layers." + std::to_string(l) + "." + kExpertModules[depth]] = {l, depth};
      }
    }
  }
  std::vector<std::array<LoraFileModule, 2>> expert_saved(static_cast<size_t>(config.num_hidden_layers));
  // LLaVA's projector linears: module name -> (index, {in, out}).
  std::map<std::string, std::pair<int, std::array<int64_t, 2>>> projector_modules;
  if (projector != nullptr) {
    for (const std::string& prefix : projector->prefixes) {
      projector_modules[prefix + "linear_1"] = {0, {projector->in, projector->hidden}};
      projector_modules[prefix + "linear_2"] = {1, {projector->hidden, projector->hidden}};
    }
  }
  const TensorInfo* projector_saved[2][2] = {};  // [linear][A, B]
  std::string used_prefix;  // the first module's; every other must share it
  auto same_prefix = [&](const std::string& module, const std::string& where) -> Status {
    const std::string prefix = module.substr(0, module.find("layers."));
    if (used_prefix.empty()) used_prefix = prefix;
    if (prefix != used_prefix) {
      return invalid_argument(where + ": modules under both '" + used_prefix + "' and '" + prefix + "'");
    }
    return ok_status();
  };
  adapter->layers.resize(static_cast<size_t>(config.num_hidden_layers));
  // Every check first, then the conversion or the pack (the bulk of the time) at once, from these views.
  LoraFileModules stored(static_cast<size_t>(config.num_hidden_layers));
  for (const auto& [tensor_name, info] : file->tensors()) {
    const std::string where = weights_path + ": " + tensor_name;
    const std::optional<LoraTensorName> parsed = parse_lora_tensor_name(tensor_name);
    if (!parsed) {
      return invalid_argument(where + ": not a LoRA matrix (PEFT saves <module>.lora_A.weight and .lora_B.weight)");
    }
    const std::string& module = parsed->module;
    const bool is_a = parsed->is_a;
    if (const auto p = projector_modules.find(module); p != projector_modules.end()) {
      const auto [index, features] = p->second;
      StatusOr<bool> targeted = pc.targets(module);
      if (!targeted.ok()) return invalid_argument(where + ": " + std::string(targeted.status().message()));
      if (!*targeted) return invalid_argument(where + ": '" + module + "' is not among the config's target_modules");
      StatusOr<int64_t> rank = pc.rank_for(module);
      StatusOr<double> scale = pc.scale_for(module);
      if (!rank.ok()) return invalid_argument(where + ": " + std::string(rank.status().message()));
      if (!scale.ok()) return invalid_argument(where + ": " + std::string(scale.status().message()));
      const std::vector<int64_t> want =
          is_a ? std::vector<int64_t>{*rank, features[0]} : std::vector<int64_t>{features[1], *rank};
      if (info.shape != want || (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16)) {
        return invalid_argument(where + ": " + dtype_name(info.dtype) + " " + std::to_string(info.shape.size()) +
                                "-d, expected an f32/f16/bf16 [" + std::to_string(want[0]) + ", " +
                                std::to_string(want[1]) + "] (rank " + std::to_string(*rank) + " by r / rank_pattern)");
      }
      const TensorInfo*& matrix = projector_saved[index][is_a ? 0 : 1];
      if (matrix != nullptr) return invalid_argument(where + ": a second matrix for '" + module + "'");
      matrix = &info;
      LoraModule& m = adapter->projector[index];
      m.rank = *rank, m.in = features[0], m.out = features[1], m.scale = static_cast<float>(*scale);
      continue;
    }
    if (const auto x = expert_modules.find(module); x != expert_modules.end()) {
      RETURN_IF_ERROR(same_prefix(module, where));
      if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16) {
        return unimplemented(where + " is " + dtype_name(info.dtype) + " (f32, f16 or bf16)");
      }
      if (info.shape.size() != 2) {
        return invalid_argument(where + ": shape " + shape_to_string(info.shape) + ", not 2-d");
      }
      const auto [layer, depth] = x->second;
      const TensorInfo*& matrix = is_a ? expert_saved[layer][depth].a : expert_saved[layer][depth].b;
      if (matrix != nullptr) {
        return invalid_argument(where + ": a second " + (is_a ? "lora_A" : "lora_B") + " for '" + module + "'");
      }
      matrix = &info;
      continue;
    }
    const auto it = modules.find(module);
    if (it == modules.end()) {
      return unimplemented(where + ": LoRA on '" + module.substr(0, 120) +
                           "' is not supported (mmserve adapts the decoder's q/k/v/o and gate/up/down projections)");
    }
    StatusOr<bool> targeted = pc.targets(module);
    if (!targeted.ok()) return invalid_argument(where + ": " + std::string(targeted.status().message()));
    if (!*targeted) {
      return invalid_argument(where + ": '" + module + "' is not among the config's target_modules");
    }
    const auto [layer, target] = it->second;
    RETURN_IF_ERROR(same_prefix(module, where));
    LoraModule& m = adapter->layers[layer][static_cast<int>(target)];
    const auto [in, out] = lora_target_features(config, target);
    StatusOr<int64_t> ranked = pc.rank_for(module);
    if (!ranked.ok()) return invalid_argument(where + ": " + std::string(ranked.status().message()));
    const int64_t rank = *ranked;
    const std::vector<int64_t> want = is_a ? std::vector<int64_t>{rank, in} : std::vector<int64_t>{out, rank};
    if (info.shape != want) {
      return invalid_argument(where + ": shape " + std::to_string(info.shape.size() == 2 ? info.shape[0] : -1) + "x" +
                              std::to_string(info.shape.size() == 2 ? info.shape[1] : -1) + ", expected " +
                              std::to_string(want[0]) + "x" + std::to_string(want[1]) + " (rank " +
                              std::to_string(rank) + " by r / rank_pattern)");
    }
    if (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16) {
      return unimplemented(weights_path + ": " + info.name + " is " + dtype_name(info.dtype) + " (f32, f16 or bf16)");
    }
    LoraFileModule& saved = stored[layer][static_cast<int>(target)];
    const TensorInfo*& matrix = is_a ? saved.a : saved.b;
    if (matrix != nullptr) {  // saved with and without base_model.model.
      return invalid_argument(where + ": a second " + (is_a ? "lora_A" : "lora_B") + " for '" + module + "'");
    }
    matrix = &info;
    m.rank = rank, m.in = in, m.out = out;
    StatusOr<double> scale = pc.scale_for(module);
    if (!scale.ok()) return invalid_argument(where + ": " + std::string(scale.status().message()));
    m.scale = static_cast<float>(*scale);
  }
  int64_t adapted = 0;
  std::vector<Conversion> work;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    for (const Linear& lin : kLinears) {
      LoraModule& m = adapter->layers[l][static_cast<int>(lin.target)];
      if (m.rank == 0) continue;
      const LoraFileModule& saved = stored[l][static_cast<int>(lin.target)];
      if (saved.a == nullptr || saved.b == nullptr) {
        return invalid_argument(weights_path + ": " + used_prefix + "layers." + std::to_string(l) + "." + lin.path +
                                " has only one of lora_A / lora_B");
      }
      adapter->max_rank = std::max(adapter->max_rank, m.rank);
      ++adapted;
      work.push_back({saved.a, &m.a});
      work.push_back({saved.b, &m.b});
    }
  }
  // Mixtral's experts: each pair's parameter by its shapes (gate_up's and down's can never both fit one pair).
  std::vector<ExpertSplit> expert_work;  // f32 on every device: only the CPU forward applies them
  size_t expert_bytes = 0;
  if (config.num_experts > 0) adapter->experts.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    for (int depth = 0; depth < 2; ++depth) {
      const LoraFileModule& saved = expert_saved[l][depth];
      if (saved.a == nullptr && saved.b == nullptr) continue;
      const std::string module = used_prefix + "layers." + std::to_string(l) + "." + kExpertModules[depth];
      if (saved.a == nullptr || saved.b == nullptr) {
        return invalid_argument(weights_path + ": " + module + " has only one of lora_A / lora_B");
      }
      const int64_t width = config.num_experts * pc.r;
      std::optional<LoraExpertParam> param;
      for (const LoraExpertParam p : {LoraExpertParam::kGateUp, LoraExpertParam::kDown}) {
        const auto [in, out] = lora_expert_features(config, p);
        if (saved.a->shape == std::vector<int64_t>{width, in} && saved.b->shape == std::vector<int64_t>{out, width}) {
          param = p;
        }
      }
      if (!param) {
        const int64_t h = config.hidden_size, i = config.intermediate_size;
        return invalid_argument(weights_path + ": " + saved.a->name + " " + shape_to_string(saved.a->shape) + " with " +
                                saved.b->name + " " + shape_to_string(saved.b->shape) +
                                " is neither experts.gate_up_proj's pair (lora_A " + shape_to_string({width, h}) +
                                ", lora_B " + shape_to_string({2 * i, width}) + ") nor experts.down_proj's (" +
                                shape_to_string({width, i}) + ", " + shape_to_string({h, width}) + ") at " +
                                std::to_string(config.num_experts) + " experts of rank " + std::to_string(pc.r));
      }
      const std::string parameter = lora_expert_param_name(*param);
      const auto& listed = pc.target_parameters;
      if (std::find(listed.begin(), listed.end(), parameter) == listed.end()) {
        return invalid_argument(weights_path + ": " + saved.a->name + " adapts '" + parameter +
                                "', which is not among the config's target_parameters");
      }
      std::vector<LoraModule>& modules = adapter->experts[l][static_cast<int>(*param)];
      if (!modules.empty()) {
        return invalid_argument(weights_path + ": " + module + ": a second pair for '" + parameter + "'");
      }
      StatusOr<double> scale = pc.scale_for(used_prefix + "layers." + std::to_string(l) + ".mlp." + parameter);
      if (!scale.ok()) return invalid_argument(weights_path + ": " + std::string(scale.status().message()));
      const auto [in, out] = lora_expert_features(config, *param);
      LoraModule m;
      m.rank = pc.r, m.in = in, m.out = out, m.scale = static_cast<float>(*scale);
      modules.assign(static_cast<size_t>(config.num_experts), m);
      adapter->max_rank = std::max(adapter->max_rank, pc.r);
      ++adapted;
      expert_work.push_back({saved.a, saved.b, &modules});
      expert_bytes += static_cast<size_t>(saved.a->numel() + saved.b->numel()) * sizeof(float);
    }
  }
  std::vector<Conversion> projector_work;  // f32 on every device: the host's image path reads them
  for (int k = 0; k < 2; ++k) {
    LoraModule& m = adapter->projector[k];
    if (!m.present()) continue;
    if (projector_saved[k][0] == nullptr || projector_saved[k][1] == nullptr) {
      return invalid_argument(weights_path + ": the projector's linear_" + std::to_string(k + 1) +
                              " has only one of lora_A / lora_B");
    }
    adapter->max_rank = std::max(adapter->max_rank, m.rank);
    ++adapted;
    projector_work.push_back({projector_saved[k][0], &m.a});
    projector_work.push_back({projector_saved[k][1], &m.b});
  }
  if (adapted == 0) return invalid_argument(weights_path + ": holds no LoRA matrices");
  if (pack && adapter->adapts_experts()) {
    return unimplemented(weights_path + ": LoRA on Mixtral's experts runs on the CPU path only (adapter '" + name +
                         "' adapts them; this model runs on a GPU)");
  }
  convert_all(projector_work);
  run_parallel(expert_work.size(), expert_bytes, [&](size_t k) { split_experts(expert_work[k]); });
  if (pack) {
    ASSIGN_OR_RETURN(adapter->slot_image, pack(*adapter, stored));  // `file` is mapped until this returns
  } else {
    convert_all(work);
  }
  return adapter;
}

}  // namespace mmserve::models
