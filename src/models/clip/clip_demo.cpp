// Writes the demo CLIP directory (see clip_demo.h). Weights: N(0, 0.02) for matrices and embeddings, ones and
// zeros for layer norms, from a splitmix64 + Box-Muller generator so the bytes are identical on every platform.
#include "models/clip/clip_demo.h"
#include "models/common/demo_random.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "models/clip/clip.h"

extern "C" const char mmserve_clip_vocab_begin[], mmserve_clip_vocab_end[];
extern "C" const char mmserve_clip_merges_begin[], mmserve_clip_merges_end[];

namespace mmserve::models {
namespace {

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) return internal_error("cannot write " + path.string());
  return ok_status();
}

nlohmann::json demo_config(const std::string& architecture) {
  if (architecture == "vit-b32") {
    return {
        {"architectures", {"CLIPModel"}},
        {"model_type", "clip"},
        {"projection_dim", 512},
        {"logit_scale_init_value", 2.6592},
        {"torch_dtype", "float16"},
        {"text_config",
         {{"vocab_size", 49408},
          {"hidden_size", 512},
          {"intermediate_size", 2048},
          {"num_hidden_layers", 12},
          {"num_attention_heads", 8},
          {"max_position_embeddings", 77},
          {"hidden_act", "quick_gelu"},
          {"eos_token_id", 2},
          {"bos_token_id", 0},
          {"pad_token_id", 1}}},
        {"vision_config",
         {{"hidden_size", 768},
          {"intermediate_size", 3072},
          {"num_hidden_layers", 12},
          {"num_attention_heads", 12},
          {"image_size", 224},
          {"patch_size", 32},
          {"hidden_act", "quick_gelu"}}},
    };
  }
  return {
      {"architectures", {"CLIPModel"}},
      {"model_type", "clip"},
      {"projection_dim", 128},
      {"logit_scale_init_value", 2.6592},
      {"torch_dtype", "float16"},
      {"text_config",
       {{"vocab_size", 49408},
        {"hidden_size", 128},
        {"intermediate_size", 512},
        {"num_hidden_layers", 4},
        {"num_attention_heads", 4},
        {"max_position_embeddings", 77},
        {"hidden_act", "quick_gelu"},
        {"layer_norm_eps", 1e-5},
        {"bos_token_id", 49406},
        {"eos_token_id", 49407},
        {"pad_token_id", 49407}}},
      {"vision_config",
       {{"hidden_size", 192},
        {"intermediate_size", 768},
        {"num_hidden_layers", 4},
        {"num_attention_heads", 6},
        {"image_size", 224},
        {"patch_size", 32},
        {"num_channels", 3},
        {"hidden_act", "quick_gelu"},
        {"layer_norm_eps", 1e-5}}},
  };
}

}  // namespace

Status write_demo_clip(const std::string& dir, const DemoModelOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !options.overwrite) {
    return failed_precondition(dir + " exists and is not empty (use --overwrite)");
  }
  fs::create_directories(dir, ec);
  if (ec) return internal_error("cannot create " + dir + ": " + ec.message());

  if (options.architecture != "small" && options.architecture != "vit-b32") {
    return invalid_argument("unknown demo architecture '" + options.architecture + "' (small or vit-b32)");
  }
  const nlohmann::json config_json = demo_config(options.architecture);
  ASSIGN_OR_RETURN(ClipConfig config, parse_clip_config(config_json, "demo config"));
  RETURN_IF_ERROR(write_text(fs::path(dir) / "config.json", config_json.dump(2) + "\n"));

  NormalGenerator gen(options.seed);
  std::vector<std::vector<uint16_t>> storage;
  std::vector<TensorToWrite> tensors;
  for (const WeightSpec& spec : clip_weight_specs(config)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    std::vector<uint16_t> values(static_cast<size_t>(n));
    const bool is_norm = spec.name.find("norm") != std::string::npos || spec.name.find("layrnorm") != std::string::npos;
    for (int64_t i = 0; i < n; ++i) {
      float v = 0.02f * gen.next();
      if (spec.name == "logit_scale")
        v = 2.6592f;
      else if (is_norm)
        v = spec.name.ends_with(".weight") ? 1.0f : 0.0f;
      else if (spec.name.ends_with(".bias"))
        v = 0.0f;
      values[static_cast<size_t>(i)] = f32_to_f16(v);
    }
    storage.push_back(std::move(values));
    tensors.push_back({spec.name, DType::kF16, spec.shape, storage.back().data()});
  }
  RETURN_IF_ERROR(write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}}));

  RETURN_IF_ERROR(
      write_text(fs::path(dir) / "vocab.json", std::string(mmserve_clip_vocab_begin, mmserve_clip_vocab_end)));
  RETURN_IF_ERROR(
      write_text(fs::path(dir) / "merges.txt", std::string(mmserve_clip_merges_begin, mmserve_clip_merges_end)));
  const nlohmann::json tokenizer_config = {{"tokenizer_class", "CLIPTokenizer"}, {"model_max_length", 77},
                                           {"bos_token", "<|startoftext|>"},     {"eos_token", "<|endoftext|>"},
                                           {"pad_token", "<|endoftext|>"},       {"unk_token", "<|endoftext|>"}};
  RETURN_IF_ERROR(write_text(fs::path(dir) / "tokenizer_config.json", tokenizer_config.dump(2) + "\n"));
  const nlohmann::json special = {{"bos_token", "<|startoftext|>"},
                                  {"eos_token", "<|endoftext|>"},
                                  {"pad_token", "<|endoftext|>"},
                                  {"unk_token", "<|endoftext|>"}};
  RETURN_IF_ERROR(write_text(fs::path(dir) / "special_tokens_map.json", special.dump(2) + "\n"));
  const nlohmann::json preprocessor = {{"image_processor_type", "CLIPImageProcessor"},
                                       {"do_resize", true},
                                       {"size", {{"shortest_edge", 224}}},
                                       {"resample", 3},
                                       {"do_center_crop", true},
                                       {"crop_size", {{"height", 224}, {"width", 224}}},
                                       {"do_rescale", true},
                                       {"rescale_factor", 1.0 / 255.0},
                                       {"do_normalize", true},
                                       {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
                                       {"image_std", {0.26862954, 0.26130258, 0.27577711}},
                                       {"do_convert_rgb", true}};
  RETURN_IF_ERROR(write_text(fs::path(dir) / "preprocessor_config.json", preprocessor.dump(2) + "\n"));
  return write_text(fs::path(dir) / "README.md",
                    "# mmserve demo CLIP\n\nWritten by `mmserve demo-model`: a small CLIPModel (ViT 224/32, 4+4 "
                    "layers) with deterministic RANDOM weights and the real CLIP tokenizer. Its embeddings carry no "
                    "meaning. Point `--model` at a real HF CLIP directory (e.g. openai/clip-vit-base-patch32) for "
                    "real embeddings; the code path is the same.\n");
}

}  // namespace mmserve::models
