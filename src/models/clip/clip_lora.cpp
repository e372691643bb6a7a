// LoRA adapters on CLIP's towers (see clip_lora.h).
#include "models/clip/clip_lora.h"

#include <regex>
#include <set>

#include "kernels/gemm/gemm.h"

namespace mmserve::models {
namespace {

// The linear a PEFT module name of a CLIPModel names, or nullopt.
std::optional<PeftModuleShape> clip_linear(const ClipConfig& c, const std::string& module) {
  if (module == "visual_projection") return PeftModuleShape{c.vision.hidden_size, c.projection_dim};
  if (module == "text_projection") return PeftModuleShape{c.text.hidden_size, c.projection_dim};
  // No user bytes reach this pattern's backtracking: it is ours and linear.
  static const std::regex layer(R"((vision|text)_model\.encoder\.layers\.(\d{1,4})\.(self_attn\.(q|k|v|out)_proj|mlp\.fc[12]))");
  std::smatch m;
  if (module.size() > 96 || !std::regex_match(module, m, layer)) return std::nullopt;
  const bool vision = m[1] == "vision";
  const int64_t index = std::stoll(m[2]);
  const int64_t layers = vision ? c.vision.num_hidden_layers : c.text.num_hidden_layers;
  if (index >= layers) return std::nullopt;
  const int64_t hidden = vision ? c.vision.hidden_size : c.text.hidden_size;
  const int64_t inner = vision ? c.vision.intermediate_size : c.text.intermediate_size;
  if (m[3] == "mlp.fc1") return PeftModuleShape{hidden, inner};
  if (m[3] == "mlp.fc2") return PeftModuleShape{inner, hidden};
  return PeftModuleShape{hidden, hidden};
}

}  // namespace

std::string ClipLora::modality() const {
  return vision && text ? "image+text" : vision ? "image" : "text";
}

std::vector<std::string> ClipLora::target_names() const {
  std::set<std::string> names;
  for (const auto& [module, m] : file.modules) names.insert(module.substr(module.rfind('.') + 1));
  return {names.begin(), names.end()};
}

StatusOr<std::shared_ptr<const ClipLora>> load_clip_lora(const std::string& dir, const std::string& name,
                                                         const ClipConfig& config) {
  auto lora = std::make_shared<ClipLora>();
  lora->name = name;
  ASSIGN_OR_RETURN(lora->file,
                   read_peft_lora_dir(
                       dir, [&config](const std::string& module) { return clip_linear(config, module); },
                       "CLIP's q/k/v/out_proj, fc1 and fc2 of either tower's layers, visual_projection and "
                       "text_projection"));
  for (const auto& [module, m] : lora->file.modules) {
    const bool vision = module.rfind("vision_model.", 0) == 0 || module == "visual_projection";
    (vision ? lora->vision : lora->text) = true;
  }
  return std::shared_ptr<const ClipLora>(std::move(lora));
}

Status merge_clip_lora(const ClipLora& lora, F32Weights& weights) {
  for (const auto& [module, m] : lora.file.modules) {
    const std::string name = module + ".weight";
    if (!weights.has(name)) return internal_error("CLIP has no weight '" + name + "' to merge an adapter into");
    Tensor w = weights.get(name);
    if (w.dims() != 2 || w.size(0) != m.out || w.size(1) != m.in) {
      return internal_error("'" + name + "' is " + w.shape_string() + ", the adapter's module is [" +
                            std::to_string(m.out) + ", " + std::to_string(m.in) + "]");
    }
    // W [out, in] += scale * B [out, r] @ A [r, in], in f32 as PEFT's merge (get_delta_weight) computes it.
    kernels::gemm(false, false, m.out, m.in, m.rank, m.scale, m.b.data(), m.rank, m.a.data(), m.in, 1.0f,
                  w.data_as<float>(), m.in);
  }
  return ok_status();
}

}  // namespace mmserve::models
