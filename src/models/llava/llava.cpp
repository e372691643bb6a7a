// LlavaModel (see llava.h): config reading, the checkpoint layouts, and the forward of HF's modeling_llava.py
// (get_image_features, then the language model over the merged embeddings).
#include "models/llava/llava.h"

#include <algorithm>
#include <cstring>

#include "core/json_config.h"
#include "core/safetensors.h"
#include "kernels/gemm/gemm.h"
#include "models/quant/quant_config.h"

namespace mmserve::models {
namespace {

// The first prefix under which `probe` exists in the store ("" if none).
std::string find_prefix(const WeightStore& store, const std::vector<std::string>& prefixes, const std::string& probe) {
  for (const std::string& p : prefixes) {
    if (store.find(p + probe) != nullptr) return p;
  }
  return "";
}

// image_grid_pinpoints: a non-empty list of [height, width], each a positive multiple of the tower's image size.
Status parse_grid_pinpoints(const nlohmann::json& json, const std::string& label, LlavaConfig& c) {
  const std::string key = label + ".image_grid_pinpoints";
  if (!json.contains("image_grid_pinpoints") || !json["image_grid_pinpoints"].is_array() ||
      json["image_grid_pinpoints"].empty()) {
    return invalid_argument(key + ": a LLaVA-NeXT config needs a non-empty list of [height, width] pairs");
  }
  const int64_t s = c.vision.image_size;
  for (const nlohmann::json& pair : json["image_grid_pinpoints"]) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer()) {
      return invalid_argument(key + ": expected [height, width] integer pairs, got " + pair.dump());
    }
    const int64_t h = pair[0].get<int64_t>(), w = pair[1].get<int64_t>();
    if (h <= 0 || w <= 0 || h % s != 0 || w % s != 0 || h / s * (w / s) > 64) {
      return invalid_argument(key + ": " + pair.dump() + " must be positive multiples of the vision tower's image "
                              "size " + std::to_string(s) + ", at most 64 tiles");
    }
    c.grid_pinpoints.push_back({h, w});
  }
  return ok_status();
}

}  // namespace

StatusOr<LlavaConfig> parse_llava_config(const nlohmann::json& json, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject o, JsonObject::wrap(json, label));
  LlavaConfig c;
  if (!json.contains("vision_config") || !json.contains("text_config")) {
    return invalid_argument(label + ": a LLaVA config needs vision_config and text_config");
  }
  // Quantised checkpoints (AWQ / GPTQ / FP8 of the language model) would fail the weight check on names; say why.
  for (const nlohmann::json* j : {&json, &json["text_config"]}) {
    ASSIGN_OR_RETURN(const QuantConfig quant, parse_quant_config(*j, label));
    if (quant.quantized()) {
      return unimplemented(label + ": a quantised LLaVA checkpoint (" + quant.format_name() +
                           "): LLaVA does not read quantised checkpoints yet (issue 17; the Llama family does)");
    }
  }
  const nlohmann::json& vision = json["vision_config"];
  if (vision.is_object() && vision.contains("model_type") && vision["model_type"] != "clip_vision_model") {
    return unimplemented(label + ".vision_config.model_type: '" + vision["model_type"].dump() +
                         "' is not supported (clip_vision_model)");
  }
  ASSIGN_OR_RETURN(c.vision, parse_clip_vision_config(vision, label + ".vision_config"));
  ASSIGN_OR_RETURN(c.text, parse_llama_config(json["text_config"], label + ".text_config"));
  // transformers 4.x calls it image_token_index, 5.x image_token_id (and reads both).
  ASSIGN_OR_RETURN(c.image_token_index, o.get_int_or("image_token_index", c.image_token_index));
  if (o.has("image_token_id")) {
    ASSIGN_OR_RETURN(c.image_token_index, o.get_int("image_token_id"));
  }
  if (c.image_token_index < 0 || c.image_token_index >= c.text.vocab_size) {
    return invalid_argument(label + ": image_token_index " + std::to_string(c.image_token_index) +
                            " is outside the text model's vocabulary (" + std::to_string(c.text.vocab_size) + ")");
  }
  const int64_t hidden_states = c.vision.num_hidden_layers + 1;
  if (json.contains("vision_feature_layer")) {
    const nlohmann::json& layer = json["vision_feature_layer"];
    c.feature_layers.clear();
    if (layer.is_number_integer()) c.feature_layers.push_back(layer.get<int64_t>());
    if (layer.is_array()) {
      for (const nlohmann::json& l : layer) {
        if (!l.is_number_integer()) return invalid_argument(label + ".vision_feature_layer must hold integers");
        c.feature_layers.push_back(l.get<int64_t>());
      }
    }
    if (c.feature_layers.empty()) {
      return invalid_argument(label + ".vision_feature_layer must be an integer or a non-empty list of integers");
    }
  }
  for (int64_t& l : c.feature_layers) {
    if (l < -hidden_states || l >= hidden_states) {
      return invalid_argument(label + ".vision_feature_layer " + std::to_string(l) + " is outside the tower's " +
                              std::to_string(hidden_states) + " hidden states");
    }
    if (l < 0) l += hidden_states;  // kept as the non-negative index from here on
  }
  ASSIGN_OR_RETURN(std::string strategy, o.get_string_or("vision_feature_select_strategy", "default"));
  if (strategy != "default" && strategy != "full") {
    return unimplemented(label + ".vision_feature_select_strategy: '" + strategy +
                         "' is not supported (default, full)");
  }
  c.drop_cls = strategy == "default";
  ASSIGN_OR_RETURN(std::string act, o.get_string_or("projector_hidden_act", "gelu"));
  auto a = kernels::activation_from_hf_name(act);
  if (!a) return unimplemented(label + ".projector_hidden_act: unsupported activation '" + act + "'");
  c.projector_act = *a;
  ASSIGN_OR_RETURN(c.projector_bias, o.get_bool_or("multimodal_projector_bias", true));
  ASSIGN_OR_RETURN(std::string model_type, o.get_string_or("model_type", "llava"));
  if (model_type == "llava_next") {
    RETURN_IF_ERROR(parse_grid_pinpoints(json, label, c));
    if (!c.drop_cls) {
      return unimplemented(label + ": vision_feature_select_strategy \"full\" under LLaVA-NeXT (HF's packing of the "
                           "tiles needs their patch rows alone; use \"default\")");
    }
  } else if (model_type != "llava") {
    return unimplemented(label + ".model_type: '" + model_type + "' is not supported (llava, llava_next)");
  }
  if (o.has("image_seq_length")) {
    ASSIGN_OR_RETURN(int64_t seq, o.get_int("image_seq_length"));
    if (seq != c.tokens_per_image()) {
      return invalid_argument(label + ".image_seq_length is " + std::to_string(seq) + " but the tower gives " +
                              std::to_string(c.tokens_per_image()) + " features per image");
    }
  }
  return c;
}

StatusOr<LlavaLayout> detect_llava_layout(const WeightStore& store, const std::string& model_dir) {
  LlavaLayout layout;
  layout.text.model = find_prefix(store, {"language_model.model.", "model.language_model."}, "embed_tokens.weight");
  layout.text.lm_head =
      store.find("language_model.lm_head.weight") != nullptr ? "language_model.lm_head.weight" : "lm_head.weight";
  layout.vision = find_prefix(
      store, {"vision_tower.vision_model.", "vision_tower.", "model.vision_tower.vision_model.", "model.vision_tower."},
      "embeddings.class_embedding");
  layout.projector = find_prefix(store, {"multi_modal_projector.", "model.multi_modal_projector."}, "linear_1.weight");
  layout.newline = store.find("model.image_newline") != nullptr ? "model.image_newline" : "image_newline";
  if (layout.text.model.empty() || layout.vision.empty() || layout.projector.empty()) {
    return invalid_argument(model_dir + ": not a LLaVA checkpoint (no " +
                            std::string(layout.text.model.empty() ? "language_model embed_tokens"
                                        : layout.vision.empty()   ? "vision_tower embeddings"
                                                                  : "multi_modal_projector") +
                            " tensor under any known name)");
  }
  return layout;
}

std::vector<WeightSpec> llava_vision_specs(const LlavaConfig& c, const LlavaLayout& layout) {
  std::vector<WeightSpec> specs = clip_vision_weight_specs(c.vision, layout.vision, /*post_layernorm_optional=*/true);
  const int64_t in = c.vision.hidden_size * static_cast<int64_t>(c.feature_layers.size()), h = c.text.hidden_size;
  const std::string& p = layout.projector;
  specs.push_back({p + "linear_1.weight", {h, in}});
  specs.push_back({p + "linear_2.weight", {h, h}});
  if (c.projector_bias) {
    specs.push_back({p + "linear_1.bias", {h}});
    specs.push_back({p + "linear_2.bias", {h}});
  }
  if (c.is_next()) specs.push_back({layout.newline, {h}});
  return specs;
}

std::vector<WeightSpec> llava_weight_specs(const LlavaConfig& c, const LlavaLayout& layout) {
  std::vector<WeightSpec> specs = llava_vision_specs(c, layout);
  for (WeightSpec& s : llama_weight_specs(c.text, layout.text)) specs.push_back(std::move(s));
  return specs;
}

StatusOr<std::unique_ptr<LlavaModel>> LlavaModel::load(const std::string& model_dir) {
  const std::string config_path = model_dir + "/config.json";
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  std::unique_ptr<LlavaModel> model(new LlavaModel());
  ASSIGN_OR_RETURN(model->config_, parse_llava_config(json, config_path));
  const LlavaConfig& c = model->config_;
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));

  ASSIGN_OR_RETURN(LlavaLayout layout, detect_llava_layout(*store, model_dir));
  const std::vector<WeightSpec> specs = llava_weight_specs(c, layout);
  const std::string& vision = layout.vision;
  const std::string& projector = layout.projector;
  WeightCheckOptions check;
  check.ignored_suffixes = {"rotary_emb.inv_freq", "position_ids"};
  RETURN_IF_ERROR(check_weights(*store, specs, check).with_context(model_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<F32Weights> weights, F32Weights::load(*store, specs));
  model->weights_ = std::move(weights);
  model->vision_ = ClipVisionTower::bind(c.vision, *model->weights_, vision);
  model->linear1_w_ = model->weights_->get(projector + "linear_1.weight");
  model->linear2_w_ = model->weights_->get(projector + "linear_2.weight");
  if (c.projector_bias) {
    model->linear1_b_ = model->weights_->get(projector + "linear_1.bias");
    model->linear2_b_ = model->weights_->get(projector + "linear_2.bias");
  }
  if (c.is_next()) {
    const Tensor newline = model->weights_->get(layout.newline);
    model->image_newline_.assign(newline.data_as<float>(), newline.data_as<float>() + c.text.hidden_size);
  }
  model->text_ = LlamaModel::from_weights(c.text, model->weights_, layout.text);
  return model;
}

namespace {

// y [rows, out] += scale * (x [rows, in] A^T) B^T: a LoRA module's unmerged delta (PEFT's lora.Linear), the rank's
// values kept in f32 between the two products.
void add_lora_delta(const float* x, int64_t rows, const LoraModule& m, float* y) {
  std::vector<float> t(static_cast<size_t>(rows * m.rank));
  kernels::gemm(false, true, rows, m.rank, m.in, 1.0f, x, m.in, m.a.data(), m.in, 0.0f, t.data(), m.rank);
  kernels::gemm(false, true, rows, m.out, m.rank, m.scale, t.data(), m.rank, m.b.data(), m.rank, 1.0f, y, m.out);
}

}  // namespace

Status LlavaModel::encode_images(const Tensor& pixels, Tensor& features, Arena& arena,
                                 const std::array<LoraModule, 2>* projector_lora) const {
  const LlavaConfig& c = config_;
  const int64_t images = pixels.dims() == 4 ? pixels.size(0) : 0, t = c.tokens_per_image(), h = c.text.hidden_size,
                vh = c.vision.hidden_size, seq = vision_.seq_len();
  const int64_t layers = static_cast<int64_t>(c.feature_layers.size()), in = vh * layers;
  if (features.dims() != 3 || features.size(0) != images || features.size(1) != t || features.size(2) != h ||
      features.dtype() != DType::kF32) {
    return invalid_argument("image features must be f32 [" + std::to_string(images) + ", " + std::to_string(t) + ", " +
                            std::to_string(h) + "], got " + features.shape_string());
  }
  if (images == 0) return ok_status();
  // The selected hidden states, side by side per token: [images * t, vh * layers] (HF's torch.cat(dim=-1) of the
  // layers in the listed order, each with CLS dropped under "default").
  std::vector<float> selected(static_cast<size_t>(images * t * in));
  const int64_t deepest = *std::max_element(c.feature_layers.begin(), c.feature_layers.end());
  auto keep = [&](int64_t index, const Tensor& x) {
    for (int64_t j = 0; j < layers; ++j) {
      if (c.feature_layers[j] != index) continue;
      for (int64_t b = 0; b < images; ++b) {
        for (int64_t r = 0; r < t; ++r) {
          const float* src = x.data_as<float>() + (b * seq + r + (c.drop_cls ? 1 : 0)) * vh;
          std::memcpy(selected.data() + ((b * t + r) * in + j * vh), src, vh * sizeof(float));
        }
      }
    }
  };
  arena.reset();
  if (arena.capacity() < vision_.workspace_bytes(images)) arena.reserve(vision_.workspace_bytes(images));
  ASSIGN_OR_RETURN(Tensor last, vision_.forward(pixels, deepest, arena, keep));
  (void)last;
  // The projector: linear_2(act(linear_1(x))).
  std::vector<float> mid(static_cast<size_t>(images * t * h));
  Tensor sel_t(selected.data(), DType::kF32, {images * t, in}), mid_t(mid.data(), DType::kF32, {images * t, h});
  Tensor out_t(features.data_as<float>(), DType::kF32, {images * t, h});
  const LoraModule* lora1 = projector_lora && (*projector_lora)[0].present() ? &(*projector_lora)[0] : nullptr;
  const LoraModule* lora2 = projector_lora && (*projector_lora)[1].present() ? &(*projector_lora)[1] : nullptr;
  if (lora1 != nullptr) {  // the delta joins linear_1's output before the activation
    kernels::linear(sel_t, linear1_w_, c.projector_bias ? &linear1_b_ : nullptr, mid_t);
    add_lora_delta(selected.data(), images * t, *lora1, mid.data());
    kernels::activation(mid_t, mid_t, c.projector_act);
  } else {
    kernels::linear(sel_t, linear1_w_, c.projector_bias ? &linear1_b_ : nullptr, mid_t, c.projector_act);
  }
  kernels::linear(mid_t, linear2_w_, c.projector_bias ? &linear2_b_ : nullptr, out_t);
  if (lora2 != nullptr) add_lora_delta(mid.data(), images * t, *lora2, features.data_as<float>());
  return ok_status();
}

Status LlavaModel::forward(const int32_t* tokens, int64_t n, const Tensor& features, int64_t first_feature,
                           LlamaKvCache& cache, float* last_logits, float* all_logits) const {
  const int64_t h = config_.text.hidden_size;
  const int64_t rows = features.numel() / h;
  LlamaForwardExtras extras;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] == config_.image_token_index) extras.embed_rows.push_back(static_cast<int32_t>(i));
  }
  if (first_feature < 0 || first_feature + static_cast<int64_t>(extras.embed_rows.size()) > rows) {
    return invalid_argument("the prompt has more image placeholders (" +
                            std::to_string(first_feature + extras.embed_rows.size()) + ") than image features (" +
                            std::to_string(rows) + ")");
  }
  if (!extras.embed_rows.empty()) extras.embeds = features.data_as<float>() + first_feature * h;
  return text_->forward(tokens, n, cache, last_logits, all_logits, extras);
}

}  // namespace mmserve::models
