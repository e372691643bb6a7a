// CLIP forward code, following HF transformers' modeling_clip.py (CLIPModel) step by step.
//
//   vision: patch conv -> [class; patches] + positions -> pre_layrnorm -> N pre-LN blocks
//           -> post_layernorm(token 0) -> visual_projection -> L2 normalise
//   text:   token + position embeddings -> N pre-LN blocks (causal + padding mask) -> final_layer_norm
//           -> the EOS token's row -> text_projection -> L2 normalise
//
// EOS pooling follows both of HF's rules: eos_token_id == 2 (old configs) takes the position of the largest id
// (argmax; the EOS id is the largest in CLIP's vocabulary), otherwise the first position holding eos_token_id.
#include "models/clip/clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/safetensors.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/gemm.h"
#include "kernels/l2_normalize/l2_normalize.h"
#include "models/clip/clip_lora.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/patch_embed/patch_embed.h"

namespace mmserve::models {
namespace {

using kernels::Activation;

StatusOr<Activation> parse_activation(const JsonObject& obj) {
  ASSIGN_OR_RETURN(std::string name, obj.get_string_or("hidden_act", "quick_gelu"));
  auto act = kernels::activation_from_hf_name(name);
  if (!act) return unimplemented(obj.label() + ".hidden_act: unsupported activation '" + name + "'");
  return *act;
}

Status require_positive(const std::string& label, const char* key, int64_t value) {
  if (value <= 0) return invalid_argument(label + "." + key + " must be positive, got " + std::to_string(value));
  return ok_status();
}

StatusOr<ClipTextConfig> parse_text(const JsonObject& o) {
  ClipTextConfig c;
  ASSIGN_OR_RETURN(c.vocab_size, o.get_int_or("vocab_size", c.vocab_size));
  ASSIGN_OR_RETURN(c.hidden_size, o.get_int_or("hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.intermediate_size, o.get_int_or("intermediate_size", c.intermediate_size));
  ASSIGN_OR_RETURN(c.num_hidden_layers, o.get_int_or("num_hidden_layers", c.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads, o.get_int_or("num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings, o.get_int_or("max_position_embeddings", c.max_position_embeddings));
  ASSIGN_OR_RETURN(double eps, o.get_double_or("layer_norm_eps", c.layer_norm_eps));
  c.layer_norm_eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(c.hidden_act, parse_activation(o));
  ASSIGN_OR_RETURN(c.eos_token_id, o.get_int_or("eos_token_id", c.eos_token_id));
  for (auto [key, value] : {std::pair{"vocab_size", c.vocab_size},
                            {"hidden_size", c.hidden_size},
                            {"intermediate_size", c.intermediate_size},
                            {"num_hidden_layers", c.num_hidden_layers},
                            {"num_attention_heads", c.num_attention_heads},
                            {"max_position_embeddings", c.max_position_embeddings}}) {
    RETURN_IF_ERROR(require_positive(o.label(), key, value));
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return invalid_argument(o.label() + ": hidden_size " + std::to_string(c.hidden_size) +
                            " is not divisible by num_attention_heads " + std::to_string(c.num_attention_heads));
  }
  return c;
}

StatusOr<ClipVisionConfig> parse_vision(const JsonObject& o) {
  ClipVisionConfig c;
  ASSIGN_OR_RETURN(c.hidden_size, o.get_int_or("hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.intermediate_size, o.get_int_or("intermediate_size", c.intermediate_size));
  ASSIGN_OR_RETURN(c.num_hidden_layers, o.get_int_or("num_hidden_layers", c.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads, o.get_int_or("num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.image_size, o.get_int_or("image_size", c.image_size));
  ASSIGN_OR_RETURN(c.patch_size, o.get_int_or("patch_size", c.patch_size));
  ASSIGN_OR_RETURN(c.num_channels, o.get_int_or("num_channels", c.num_channels));
  ASSIGN_OR_RETURN(double eps, o.get_double_or("layer_norm_eps", c.layer_norm_eps));
  c.layer_norm_eps = static_cast<float>(eps);
  ASSIGN_OR_RETURN(c.hidden_act, parse_activation(o));
  for (auto [key, value] : {std::pair{"hidden_size", c.hidden_size},
                            {"intermediate_size", c.intermediate_size},
                            {"num_hidden_layers", c.num_hidden_layers},
                            {"num_attention_heads", c.num_attention_heads},
                            {"image_size", c.image_size},
                            {"patch_size", c.patch_size},
                            {"num_channels", c.num_channels}}) {
    RETURN_IF_ERROR(require_positive(o.label(), key, value));
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return invalid_argument(o.label() + ": hidden_size is not divisible by num_attention_heads");
  }
  if (c.patch_size > c.image_size) return invalid_argument(o.label() + ": patch_size is larger than image_size");
  return c;
}

EncoderBlockConfig block_config(int64_t hidden, int64_t heads, int64_t intermediate, float eps, Activation act) {
  return EncoderBlockConfig{hidden, heads, intermediate, eps, act};
}

// Bump allocation of f32 buffers out of an Arena, failing with a Status.
struct FloatAllocator {
  Arena& arena;
  StatusOr<Tensor> take(const std::vector<int64_t>& shape) { return arena.allocate_tensor(DType::kF32, shape); }
};

size_t padded_bytes(int64_t floats) {
  return (static_cast<size_t>(floats) * 4 + 63) / 64 * 64;
}

}  // namespace

int64_t clip_pooling_position(const std::vector<int32_t>& ids, int64_t eos_token_id) {
  if (ids.empty()) return 0;
  if (eos_token_id == 2) {
    return std::max_element(ids.begin(), ids.end()) - ids.begin();  // first maximum, as torch.argmax
  }
  auto it = std::find(ids.begin(), ids.end(), static_cast<int32_t>(eos_token_id));
  return it == ids.end() ? 0 : it - ids.begin();  // HF: argmax of an all-false mask is 0
}

StatusOr<ClipConfig> parse_clip_config(const nlohmann::json& json, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::wrap(json, label));
  ClipConfig config;
  ASSIGN_OR_RETURN(config.projection_dim, root.get_int_or("projection_dim", config.projection_dim));
  RETURN_IF_ERROR(require_positive(label, "projection_dim", config.projection_dim));
  static const nlohmann::json kEmpty = nlohmann::json::object();
  JsonObject text(&kEmpty, label + ": text_config"), vision(&kEmpty, label + ": vision_config");
  if (root.has("text_config")) {
    ASSIGN_OR_RETURN(text, root.get_object("text_config"));
  }
  if (root.has("vision_config")) {
    ASSIGN_OR_RETURN(vision, root.get_object("vision_config"));
  }
  ASSIGN_OR_RETURN(config.text, parse_text(text));
  ASSIGN_OR_RETURN(config.vision, parse_vision(vision));
  return config;
}

StatusOr<ClipVisionConfig> parse_clip_vision_config(const nlohmann::json& json, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject o, JsonObject::wrap(json, label));
  return parse_vision(o);
}

std::vector<WeightSpec> clip_weight_specs(const ClipConfig& c) {
  std::vector<WeightSpec> specs;
  auto linear = [&specs](const std::string& name, int64_t out, int64_t in) {
    specs.push_back({name + ".weight", {out, in}});
    specs.push_back({name + ".bias", {out}});
  };
  auto norm = [&specs](const std::string& name, int64_t dim) {
    specs.push_back({name + ".weight", {dim}});
    specs.push_back({name + ".bias", {dim}});
  };
  auto blocks = [&](const std::string& prefix, int64_t layers, int64_t hidden, int64_t inter) {
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = prefix + ".encoder.layers." + std::to_string(i);
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"})
        linear(p + ".self_attn." + proj, hidden, hidden);
      norm(p + ".layer_norm1", hidden);
      norm(p + ".layer_norm2", hidden);
      linear(p + ".mlp.fc1", inter, hidden);
      linear(p + ".mlp.fc2", hidden, inter);
    }
  };
  const ClipTextConfig& t = c.text;
  const ClipVisionConfig& v = c.vision;
  specs.push_back({"text_model.embeddings.token_embedding.weight", {t.vocab_size, t.hidden_size}});
  specs.push_back({"text_model.embeddings.position_embedding.weight", {t.max_position_embeddings, t.hidden_size}});
  blocks("text_model", t.num_hidden_layers, t.hidden_size, t.intermediate_size);
  norm("text_model.final_layer_norm", t.hidden_size);
  for (WeightSpec& spec : clip_vision_weight_specs(v, "vision_model.")) specs.push_back(std::move(spec));
  specs.push_back({"visual_projection.weight", {c.projection_dim, v.hidden_size}});
  specs.push_back({"text_projection.weight", {c.projection_dim, t.hidden_size}});
  specs.push_back({"logit_scale", {}});
  return specs;
}

StatusOr<std::unique_ptr<ClipModel>> ClipModel::load(const std::string& model_dir, const ClipLora* merge) {
  const std::string config_path = (std::filesystem::path(model_dir) / "config.json").string();
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  auto model = std::unique_ptr<ClipModel>(new ClipModel());
  ASSIGN_OR_RETURN(model->config_, parse_clip_config(json, config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  const std::vector<WeightSpec> specs = clip_weight_specs(model->config_);
  WeightCheckOptions options;
  options.ignored_suffixes = {"position_ids"};  // a buffer that older HF checkpoints saved
  RETURN_IF_ERROR(check_weights(*store, specs, options).with_context(model_dir));
  ASSIGN_OR_RETURN(model->weights_, F32Weights::load(*store, specs));
  if (merge != nullptr) RETURN_IF_ERROR(merge_clip_lora(*merge, *model->weights_));  // before q/k/v are fused
  RETURN_IF_ERROR(model->bind_weights());
  return model;  // `store` (the mappings) is released here: the f32 copies are all we need
}

namespace {

// The encoder blocks under prefix + "encoder.layers.N", q/k/v fused into one [3H, H] matrix (one GEMM, not three).
std::vector<EncoderBlockWeights> bind_blocks(F32Weights& weights, const std::string& prefix, int64_t layers,
                                             int64_t hidden) {
  std::vector<EncoderBlockWeights> out;
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = prefix + "encoder.layers." + std::to_string(i);
    auto get = [&](const std::string& name) { return weights.get(p + name); };
    EncoderBlockWeights w;
    w.qkv_weight = weights.add_owned(p + ".self_attn.qkv.weight", {3 * hidden, hidden});
    w.qkv_bias = weights.add_owned(p + ".self_attn.qkv.bias", {3 * hidden});
    int64_t part = 0;
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      std::memcpy(w.qkv_weight.data_as<float>() + part * hidden * hidden,
                  get(std::string(".self_attn.") + proj + ".weight").data(), hidden * hidden * sizeof(float));
      std::memcpy(w.qkv_bias.data_as<float>() + part * hidden, get(std::string(".self_attn.") + proj + ".bias").data(),
                  hidden * sizeof(float));
      ++part;
    }
    w.out_weight = get(".self_attn.out_proj.weight");
    w.out_bias = get(".self_attn.out_proj.bias");
    w.ln1_weight = get(".layer_norm1.weight");
    w.ln1_bias = get(".layer_norm1.bias");
    w.ln2_weight = get(".layer_norm2.weight");
    w.ln2_bias = get(".layer_norm2.bias");
    w.fc1_weight = get(".mlp.fc1.weight");
    w.fc1_bias = get(".mlp.fc1.bias");
    w.fc2_weight = get(".mlp.fc2.weight");
    w.fc2_bias = get(".mlp.fc2.bias");
    out.push_back(w);
  }
  return out;
}

}  // namespace

Status ClipModel::bind_weights() {
  logit_scale_ = weights_->get("logit_scale").data_as<float>()[0];
  text_blocks_ = bind_blocks(*weights_, "text_model.", config_.text.num_hidden_layers, config_.text.hidden_size);
  vision_ = ClipVisionTower::bind(config_.vision, *weights_, "vision_model.");
  return ok_status();
}

size_t ClipModel::image_workspace_bytes(int64_t batch) const {
  return vision_.workspace_bytes(batch) + padded_bytes(batch * config_.vision.hidden_size);
}

size_t ClipModel::text_workspace_bytes(int64_t batch, int64_t seq) const {
  const ClipTextConfig& t = config_.text;
  const EncoderBlockConfig bc =
      block_config(t.hidden_size, t.num_attention_heads, t.intermediate_size, t.layer_norm_eps, t.hidden_act);
  return padded_bytes(batch * seq * t.hidden_size) + padded_bytes(encoder_block_scratch_floats(bc, batch * seq)) +
         padded_bytes(batch * t.hidden_size) + padded_bytes(batch);
}

Status ClipModel::encode_images(const Tensor& pixels, Tensor& image_embeds, Arena& arena, bool normalize,
                                const TraceFn& trace) const {
  const ClipVisionConfig& v = config_.vision;
  if (pixels.dims() != 4 || pixels.size(1) != v.num_channels || pixels.size(2) != v.image_size ||
      pixels.size(3) != v.image_size || pixels.dtype() != DType::kF32) {
    return invalid_argument("pixel_values must be f32 [batch, " + std::to_string(v.num_channels) + ", " +
                            std::to_string(v.image_size) + ", " + std::to_string(v.image_size) + "], got " +
                            pixels.shape_string());
  }
  const int64_t batch = pixels.size(0), seq = vision_.seq_len(), hidden = v.hidden_size;
  MMSERVE_CHECK(image_embeds.size(0) == batch && image_embeds.size(1) == config_.projection_dim, "bad output shape");
  if (batch == 0) return ok_status();
  arena.reset();
  if (arena.capacity() < image_workspace_bytes(batch)) arena.reserve(image_workspace_bytes(batch));
  ASSIGN_OR_RETURN(Tensor rows, vision_.forward(pixels, v.num_hidden_layers, arena, nullptr, trace));
  FloatAllocator alloc{arena};
  ASSIGN_OR_RETURN(Tensor pooled, alloc.take({batch, hidden}));
  auto dump = [&trace](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };
  dump("vision.last_hidden_state", rows);

  // Pool the class token, post-LN, project.
  std::vector<int64_t> class_rows(batch);
  for (int64_t b = 0; b < batch; ++b) class_rows[b] = b * seq;
  kernels::gather_rows(rows, class_rows.data(), batch, pooled);
  kernels::layer_norm(pooled, weights_->get("vision_model.post_layernorm.weight"),
                      weights_->get("vision_model.post_layernorm.bias"), v.layer_norm_eps, pooled);
  dump("vision.pooler_output", pooled);
  kernels::linear(pooled, weights_->get("visual_projection.weight"), nullptr, image_embeds);
  dump("vision.image_features", image_embeds);  // HF 5's vision_model_output.pooler_output: projected, not normalised
  if (normalize) kernels::l2_normalize_rows(image_embeds);
  return ok_status();
}

std::vector<WeightSpec> clip_vision_weight_specs(const ClipVisionConfig& v, const std::string& prefix,
                                                 bool post_layernorm_optional) {
  std::vector<WeightSpec> specs;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool optional = false) {
    specs.push_back({prefix + name, std::move(shape), optional});
  };
  const int64_t h = v.hidden_size, i = v.intermediate_size;
  add("embeddings.class_embedding", {h});
  add("embeddings.patch_embedding.weight", {h, v.num_channels, v.patch_size, v.patch_size});
  add("embeddings.position_embedding.weight", {v.num_patches() + 1, h});
  add("pre_layrnorm.weight", {h});
  add("pre_layrnorm.bias", {h});
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(p + ".self_attn." + proj + ".weight", {h, h});
      add(p + ".self_attn." + proj + ".bias", {h});
    }
    for (const char* norm : {".layer_norm1", ".layer_norm2"}) {
      add(p + norm + ".weight", {h});
      add(p + norm + ".bias", {h});
    }
    add(p + ".mlp.fc1.weight", {i, h});
    add(p + ".mlp.fc1.bias", {i});
    add(p + ".mlp.fc2.weight", {h, i});
    add(p + ".mlp.fc2.bias", {h});
  }
  add("post_layernorm.weight", {h}, post_layernorm_optional);
  add("post_layernorm.bias", {h}, post_layernorm_optional);
  return specs;
}

ClipVisionTower ClipVisionTower::bind(const ClipVisionConfig& config, F32Weights& weights, const std::string& prefix) {
  ClipVisionTower t;
  t.config_ = config;
  t.prefix_ = prefix;
  t.class_embedding_ = weights.get(prefix + "embeddings.class_embedding");
  t.patch_weight_ = weights.get(prefix + "embeddings.patch_embedding.weight");
  t.positions_ = weights.get(prefix + "embeddings.position_embedding.weight");
  t.pre_ln_weight_ = weights.get(prefix + "pre_layrnorm.weight");
  t.pre_ln_bias_ = weights.get(prefix + "pre_layrnorm.bias");
  t.blocks_ = bind_blocks(weights, prefix, config.num_hidden_layers, config.hidden_size);
  return t;
}

size_t ClipVisionTower::workspace_bytes(int64_t batch) const {
  const ClipVisionConfig& v = config_;
  const int64_t patches = v.num_patches(), seq = patches + 1;
  const EncoderBlockConfig bc =
      block_config(v.hidden_size, v.num_attention_heads, v.intermediate_size, v.layer_norm_eps, v.hidden_act);
  return padded_bytes(batch * seq * v.hidden_size) + padded_bytes(batch * patches * v.hidden_size) +
         padded_bytes(
             kernels::patch_embed_scratch_floats(batch, v.num_channels, v.image_size, v.image_size, v.patch_size)) +
         padded_bytes(encoder_block_scratch_floats(bc, batch * seq));
}

StatusOr<Tensor> ClipVisionTower::forward(const Tensor& pixels, int64_t num_layers, Arena& arena,
                                          const std::function<void(int64_t, const Tensor&)>& on_hidden,
                                          const TraceFn& trace) const {
  const ClipVisionConfig& v = config_;
  if (pixels.dims() != 4 || pixels.size(1) != v.num_channels || pixels.size(2) != v.image_size ||
      pixels.size(3) != v.image_size || pixels.dtype() != DType::kF32) {
    return invalid_argument("pixel_values must be f32 [batch, " + std::to_string(v.num_channels) + ", " +
                            std::to_string(v.image_size) + ", " + std::to_string(v.image_size) + "], got " +
                            pixels.shape_string());
  }
  if (num_layers < 0 || num_layers > v.num_hidden_layers) return invalid_argument("no such vision layer");
  const int64_t batch = pixels.size(0), patches = v.num_patches(), seq = patches + 1, hidden = v.hidden_size;
  FloatAllocator alloc{arena};
  ASSIGN_OR_RETURN(Tensor x, alloc.take({batch, seq, hidden}));
  ASSIGN_OR_RETURN(Tensor patch_out, alloc.take({batch, patches, hidden}));
  ASSIGN_OR_RETURN(Tensor im2col, alloc.take({kernels::patch_embed_scratch_floats(batch, v.num_channels, v.image_size,
                                                                                  v.image_size, v.patch_size)}));
  const EncoderBlockConfig bc =
      block_config(hidden, v.num_attention_heads, v.intermediate_size, v.layer_norm_eps, v.hidden_act);
  ASSIGN_OR_RETURN(Tensor block_floats, alloc.take({encoder_block_scratch_floats(bc, batch * seq)}));
  auto dump = [&trace](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };

  // Embeddings: [class; patch_embed(pixels)] + position_embedding.
  kernels::patch_embed(pixels, patch_weight_, nullptr, v.patch_size, patch_out, im2col.data_as<float>());
  for (int64_t b = 0; b < batch; ++b) {
    float* row0 = x.data_as<float>() + b * seq * hidden;
    std::memcpy(row0, class_embedding_.data(), hidden * sizeof(float));
    std::memcpy(row0 + hidden, patch_out.data_as<float>() + b * patches * hidden, patches * hidden * sizeof(float));
    Tensor xb = x.slice_rows(b, b + 1).reshape({seq, hidden});
    kernels::add(xb, positions_, xb);
  }
  Tensor rows = x.reshape({batch * seq, hidden});
  dump("vision.embeddings", rows);
  kernels::layer_norm(rows, pre_ln_weight_, pre_ln_bias_, v.layer_norm_eps, rows);
  dump("vision.pre_layrnorm", rows);
  if (on_hidden) on_hidden(0, rows);

  EncoderBlockScratch scratch = make_encoder_block_scratch(bc, batch * seq, block_floats.data_as<float>());
  const kernels::AttentionMask full;  // ViT attention sees every token
  for (int64_t i = 0; i < num_layers; ++i) {
    encoder_block_forward(bc, blocks_[static_cast<size_t>(i)], x, full, scratch, trace,
                          "vision.layers." + std::to_string(i) + ".");
    if (on_hidden) on_hidden(i + 1, rows);
  }
  return rows;
}

Status ClipModel::encode_texts(const std::vector<std::vector<int32_t>>& ids, Tensor& text_embeds, Arena& arena,
                               bool normalize, const TraceFn& trace) const {
  const ClipTextConfig& t = config_.text;
  const int64_t batch = static_cast<int64_t>(ids.size()), hidden = t.hidden_size;
  MMSERVE_CHECK(text_embeds.size(0) == batch && text_embeds.size(1) == config_.projection_dim, "bad output shape");
  if (batch == 0) return ok_status();
  int64_t seq = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty()) return invalid_argument("text " + std::to_string(i) + " has no tokens");
    if (static_cast<int64_t>(ids[i].size()) > t.max_position_embeddings) {
      return invalid_argument("text " + std::to_string(i) + " has " + std::to_string(ids[i].size()) +
                              " tokens; the model takes at most " + std::to_string(t.max_position_embeddings));
    }
    for (int32_t id : ids[i]) {
      if (id < 0 || id >= t.vocab_size) {
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                std::to_string(t.vocab_size) + ")");
      }
    }
    seq = std::max<int64_t>(seq, static_cast<int64_t>(ids[i].size()));
  }
  arena.reset();
  if (arena.capacity() < text_workspace_bytes(batch, seq)) arena.reserve(text_workspace_bytes(batch, seq));
  FloatAllocator alloc{arena};
  ASSIGN_OR_RETURN(Tensor x, alloc.take({batch, seq, hidden}));
  const EncoderBlockConfig bc =
      block_config(hidden, t.num_attention_heads, t.intermediate_size, t.layer_norm_eps, t.hidden_act);
  ASSIGN_OR_RETURN(Tensor block_floats, alloc.take({encoder_block_scratch_floats(bc, batch * seq)}));
  ASSIGN_OR_RETURN(Tensor pooled, alloc.take({batch, hidden}));
  auto dump = [&trace](const std::string& name, const Tensor& tensor) {
    if (trace) trace(name, tensor);
  };

  // Token + position embeddings; rows past a text's length are padding (id 0), hidden from attention.
  const Tensor token_table = weights_->get("text_model.embeddings.token_embedding.weight");
  const Tensor positions = weights_->get("text_model.embeddings.position_embedding.weight").slice_rows(0, seq);
  std::vector<int32_t> padded(static_cast<size_t>(seq));
  std::vector<int32_t> lengths(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(padded.begin(), padded.end(), 0);
    std::copy(ids[b].begin(), ids[b].end(), padded.begin());
    lengths[b] = static_cast<int32_t>(ids[b].size());
    Tensor xb = x.slice_rows(b, b + 1).reshape({seq, hidden});
    kernels::embedding(token_table, padded.data(), seq, xb);
    kernels::add(xb, positions, xb);
  }
  Tensor rows = x.reshape({batch * seq, hidden});
  dump("text.embeddings", rows);

  EncoderBlockScratch scratch = make_encoder_block_scratch(bc, batch * seq, block_floats.data_as<float>());
  kernels::AttentionMask mask;
  mask.causal = true;
  mask.kv_lengths = lengths.data();
  for (size_t i = 0; i < text_blocks_.size(); ++i) {
    encoder_block_forward(bc, text_blocks_[i], x, mask, scratch, trace, "text.layers." + std::to_string(i) + ".");
  }
  kernels::layer_norm(rows, weights_->get("text_model.final_layer_norm.weight"),
                      weights_->get("text_model.final_layer_norm.bias"), t.layer_norm_eps, rows);
  dump("text.last_hidden_state", rows);

  // Pool at the EOS token (HF's two rules), then project.
  std::vector<int64_t> eos_rows(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    eos_rows[b] = b * seq + clip_pooling_position(ids[b], t.eos_token_id);
  }
  kernels::gather_rows(rows, eos_rows.data(), batch, pooled);
  dump("text.pooler_output", pooled);
  kernels::linear(pooled, weights_->get("text_projection.weight"), nullptr, text_embeds);
  dump("text.text_features", text_embeds);  // HF 5's text_model_output.pooler_output: projected, not normalised
  if (normalize) kernels::l2_normalize_rows(text_embeds);
  return ok_status();
}

void ClipModel::logits_per_image(const Tensor& image_embeds, const Tensor& text_embeds, Tensor& logits) const {
  const int64_t images = image_embeds.size(0), texts = text_embeds.size(0), dim = image_embeds.size(1);
  MMSERVE_CHECK(text_embeds.size(1) == dim && logits.size(0) == images && logits.size(1) == texts, "bad shapes");
  if (images == 0 || texts == 0) return;
  kernels::gemm(false, true, images, texts, dim, std::exp(logit_scale_), image_embeds.data_as<float>(), dim,
                text_embeds.data_as<float>(), dim, 0.0f, logits.data_as<float>(), texts);
}

}  // namespace mmserve::models
