// write_demo_sam (see sam_demo.h): the config in HF's SamConfig layout, every tensor of sam_weight_specs() (the
// same table the loader checks), norms at 1 / 0 and everything else N(0, 0.05) from the platform-independent
// generator. Tests: tests/unit/engine/sam_executor_test.cpp.
#include "models/sam/sam_demo.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "core/safetensors.h"
#include "models/common/demo_random.h"
#include "models/sam/sam.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

nlohmann::json demo_config() {
  return {
      {"architectures", {"SamModel"}},
      {"model_type", "sam"},
      {"vision_config",
       {{"hidden_size", 64},
        {"output_channels", 32},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 2},
        {"num_channels", 3},
        {"image_size", 256},
        {"patch_size", 16},
        {"hidden_act", "gelu"},
        {"layer_norm_eps", 1e-6},
        {"qkv_bias", true},
        {"mlp_dim", 128},
        {"use_abs_pos", true},
        {"use_rel_pos", true},
        {"window_size", 7},
        {"global_attn_indexes", {1}},
        {"num_pos_feats", 16}}},
      {"prompt_encoder_config",
       {{"hidden_size", 32},
        {"image_size", 256},
        {"patch_size", 16},
        {"mask_input_channels", 16},
        {"num_point_embeddings", 4},
        {"hidden_act", "gelu"},
        {"layer_norm_eps", 1e-6}}},
      {"mask_decoder_config",
       {{"hidden_size", 32},
        {"hidden_act", "relu"},
        {"mlp_dim", 64},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 2},
        {"attention_downsample_rate", 2},
        {"num_multimask_outputs", 3},
        {"iou_head_depth", 3},
        {"iou_head_hidden_dim", 32},
        {"layer_norm_eps", 1e-6}}},
  };
}

nlohmann::json demo_preprocessor() {
  return {{"do_resize", true},
          {"do_rescale", true},
          {"do_normalize", true},
          {"do_pad", true},
          {"do_convert_rgb", true},
          {"size", {{"longest_edge", 256}}},
          {"pad_size", {{"height", 256}, {"width", 256}}},
          {"image_mean", {0.485, 0.456, 0.406}},
          {"image_std", {0.229, 0.224, 0.225}},
          {"rescale_factor", 1.0 / 255.0},
          {"resample", 2},
          {"image_processor_type", "SamImageProcessor"}};
}

Status write_json(const fs::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) return internal_error("cannot write " + path.string());
  return ok_status();
}

}  // namespace

Status write_demo_sam(const std::string& dir, bool overwrite, uint64_t seed) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !overwrite) {
    return failed_precondition(dir + " exists and is not empty (use --overwrite)");
  }
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument("cannot create " + dir + ": " + ec.message());
  const nlohmann::json config = demo_config();
  ASSIGN_OR_RETURN(SamConfig parsed, parse_sam_config(config, "demo SAM config"));
  NormalGenerator random(seed);
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  for (const WeightSpec& spec : sam_weight_specs(parsed)) {
    // Optional specs are alternatives (the Fourier matrix under HF's two tied names): write the first name only.
    if (spec.optional && spec.name.find("prompt_encoder.shared_embedding") != std::string::npos) continue;
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    const bool norm = spec.name.find("norm") != std::string::npos;
    const bool bias = spec.name.size() > 5 && spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0;
    for (float& v : values) v = norm ? (bias ? 0.0f : 1.0f) : 0.05f * random.next();
    storage.push_back(std::move(values));
    tensors.push_back({spec.name, DType::kF32, spec.shape, storage.back().data()});
  }
  RETURN_IF_ERROR(write_json(fs::path(dir) / "config.json", config));
  RETURN_IF_ERROR(write_json(fs::path(dir) / "preprocessor_config.json", demo_preprocessor()));
  return write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

}  // namespace mmserve::models
