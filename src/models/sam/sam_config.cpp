// SamConfig from config.json and SAM's weight table (HF's state_dict names), following configuration_sam.py and
// the module tree of modeling_sam.py.
//
// Absent keys take HF's defaults (facebook/sam-vit-huge style); every error names the key. The weight table is
// derived from the config alone, so a sam-vit-base, -large or -huge checkpoint is checked against its own
// shapes, including the relative position tables: [2 * window_size - 1, head_dim] in windowed layers and
// [2 * grid - 1, head_dim] in global ones (HF sizes them by the layer's attention span, and with these shapes
// get_rel_pos never needs its interpolation branch, so a table of another length is reported here as
// mis-shaped instead of being resampled).
// Tests: tests/conformance/sam_model_test.cpp (fixtures, load errors).
#include <algorithm>
#include <cmath>

#include "models/sam/sam.h"

namespace mmserve::models {
namespace {

Status require_positive(const JsonObject& o, const char* key, int64_t value) {
  if (value <= 0) return invalid_argument(o.label() + "." + key + " must be positive, got " + std::to_string(value));
  return ok_status();
}

StatusOr<kernels::Activation> parse_activation(const JsonObject& o, const std::string& fallback) {
  ASSIGN_OR_RETURN(std::string name, o.get_string_or("hidden_act", fallback));
  auto act = kernels::activation_from_hf_name(name);
  if (!act) return unimplemented(o.label() + ".hidden_act: unsupported activation '" + name + "'");
  return *act;
}

StatusOr<float> get_eps(const JsonObject& o, float fallback) {
  ASSIGN_OR_RETURN(double eps, o.get_double_or("layer_norm_eps", fallback));
  if (!(eps > 0.0)) return invalid_argument(o.label() + ".layer_norm_eps must be positive");
  return static_cast<float>(eps);
}

StatusOr<SamVisionConfig> parse_vision(const JsonObject& o) {
  SamVisionConfig c;
  ASSIGN_OR_RETURN(c.hidden_size, o.get_int_or("hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.output_channels, o.get_int_or("output_channels", c.output_channels));
  ASSIGN_OR_RETURN(c.num_hidden_layers, o.get_int_or("num_hidden_layers", c.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads, o.get_int_or("num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.num_channels, o.get_int_or("num_channels", c.num_channels));
  ASSIGN_OR_RETURN(c.image_size, o.get_int_or("image_size", c.image_size));
  ASSIGN_OR_RETURN(c.patch_size, o.get_int_or("patch_size", c.patch_size));
  ASSIGN_OR_RETURN(c.hidden_act, parse_activation(o, "gelu"));
  ASSIGN_OR_RETURN(c.layer_norm_eps, get_eps(o, c.layer_norm_eps));
  ASSIGN_OR_RETURN(c.qkv_bias, o.get_bool_or("qkv_bias", c.qkv_bias));
  ASSIGN_OR_RETURN(double mlp_ratio, o.get_double_or("mlp_ratio", 4.0));
  c.mlp_dim = static_cast<int64_t>(static_cast<double>(c.hidden_size) * mlp_ratio);  // Python's int(): truncates
  ASSIGN_OR_RETURN(c.mlp_dim, o.get_int_or("mlp_dim", c.mlp_dim));
  ASSIGN_OR_RETURN(c.use_abs_pos, o.get_bool_or("use_abs_pos", c.use_abs_pos));
  ASSIGN_OR_RETURN(c.use_rel_pos, o.get_bool_or("use_rel_pos", c.use_rel_pos));
  ASSIGN_OR_RETURN(c.window_size, o.get_int_or("window_size", c.window_size));
  ASSIGN_OR_RETURN(c.num_pos_feats, o.get_int_or("num_pos_feats", c.num_pos_feats));
  if (o.has("global_attn_indexes")) {
    ASSIGN_OR_RETURN(std::vector<double> indexes, o.get_double_array("global_attn_indexes"));
    c.global_attn_indexes.clear();
    for (double d : indexes) {
      if (d != std::floor(d) || std::fabs(d) > 1e9) {
        return invalid_argument(o.label() + ".global_attn_indexes: " + std::to_string(d) + " is not an integer");
      }
      c.global_attn_indexes.push_back(static_cast<int64_t>(d));  // indexes past the last layer match none, as in HF
    }
  }
  for (auto [key, value] : {std::pair{"hidden_size", c.hidden_size},
                            {"output_channels", c.output_channels},
                            {"num_hidden_layers", c.num_hidden_layers},
                            {"num_attention_heads", c.num_attention_heads},
                            {"num_channels", c.num_channels},
                            {"image_size", c.image_size},
                            {"patch_size", c.patch_size},
                            {"mlp_dim", c.mlp_dim},
                            {"num_pos_feats", c.num_pos_feats}}) {
    RETURN_IF_ERROR(require_positive(o, key, value));
  }
  if (c.window_size < 0) return invalid_argument(o.label() + ".window_size must be >= 0");
  if (c.hidden_size % c.num_attention_heads != 0) {
    return invalid_argument(o.label() + ": hidden_size " + std::to_string(c.hidden_size) +
                            " is not divisible by num_attention_heads " + std::to_string(c.num_attention_heads));
  }
  if (c.patch_size > c.image_size) return invalid_argument(o.label() + ": patch_size is larger than image_size");
  return c;
}

StatusOr<SamPromptEncoderConfig> parse_prompt(const JsonObject& o) {
  SamPromptEncoderConfig c;
  ASSIGN_OR_RETURN(c.hidden_size, o.get_int_or("hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.image_size, o.get_int_or("image_size", c.image_size));
  ASSIGN_OR_RETURN(c.patch_size, o.get_int_or("patch_size", c.patch_size));
  ASSIGN_OR_RETURN(c.mask_input_channels, o.get_int_or("mask_input_channels", c.mask_input_channels));
  ASSIGN_OR_RETURN(c.num_point_embeddings, o.get_int_or("num_point_embeddings", c.num_point_embeddings));
  ASSIGN_OR_RETURN(c.hidden_act, parse_activation(o, "gelu"));
  ASSIGN_OR_RETURN(c.layer_norm_eps, get_eps(o, c.layer_norm_eps));
  for (auto [key, value] : {std::pair{"hidden_size", c.hidden_size},
                            {"image_size", c.image_size},
                            {"patch_size", c.patch_size},
                            {"mask_input_channels", c.mask_input_channels}}) {
    RETURN_IF_ERROR(require_positive(o, key, value));
  }
  // image_embedding_size in a saved config is ignored: HF recomputes it as image_size // patch_size.
  if (c.mask_input_channels % 4 != 0) {
    return invalid_argument(o.label() + ".mask_input_channels must be a multiple of 4 (mask_embed's conv1 has " +
                            "mask_input_channels // 4 outputs), got " + std::to_string(c.mask_input_channels));
  }
  if (c.num_point_embeddings < 4) {
    return invalid_argument(o.label() + ".num_point_embeddings must be at least 4 (negative, positive, box corners)");
  }
  if (c.patch_size > c.image_size) return invalid_argument(o.label() + ": patch_size is larger than image_size");
  return c;
}

StatusOr<SamMaskDecoderConfig> parse_decoder(const JsonObject& o) {
  SamMaskDecoderConfig c;
  ASSIGN_OR_RETURN(c.hidden_size, o.get_int_or("hidden_size", c.hidden_size));
  ASSIGN_OR_RETURN(c.mlp_dim, o.get_int_or("mlp_dim", c.mlp_dim));
  ASSIGN_OR_RETURN(c.num_hidden_layers, o.get_int_or("num_hidden_layers", c.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads, o.get_int_or("num_attention_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.attention_downsample_rate, o.get_int_or("attention_downsample_rate", c.attention_downsample_rate));
  ASSIGN_OR_RETURN(c.num_multimask_outputs, o.get_int_or("num_multimask_outputs", c.num_multimask_outputs));
  ASSIGN_OR_RETURN(c.iou_head_depth, o.get_int_or("iou_head_depth", c.iou_head_depth));
  ASSIGN_OR_RETURN(c.iou_head_hidden_dim, o.get_int_or("iou_head_hidden_dim", c.iou_head_hidden_dim));
  ASSIGN_OR_RETURN(c.layer_norm_eps, get_eps(o, c.layer_norm_eps));
  ASSIGN_OR_RETURN(std::string act, o.get_string_or("hidden_act", "relu"));
  if (act != "relu") {
    return unimplemented(o.label() + ".hidden_act: the mask decoder supports 'relu' (every SAM checkpoint), got '" +
                         act + "'");
  }
  for (auto [key, value] : {std::pair{"hidden_size", c.hidden_size},
                            {"mlp_dim", c.mlp_dim},
                            {"num_hidden_layers", c.num_hidden_layers},
                            {"num_attention_heads", c.num_attention_heads},
                            {"attention_downsample_rate", c.attention_downsample_rate},
                            {"num_multimask_outputs", c.num_multimask_outputs},
                            {"iou_head_hidden_dim", c.iou_head_hidden_dim}}) {
    RETURN_IF_ERROR(require_positive(o, key, value));
  }
  if (c.iou_head_depth < 2) return invalid_argument(o.label() + ".iou_head_depth must be at least 2");
  if (c.hidden_size % 8 != 0) {
    return invalid_argument(o.label() + ".hidden_size must be a multiple of 8 (the upscaling convolutions have " +
                            "hidden_size / 4 and / 8 channels)");
  }
  const int64_t internal = c.hidden_size / c.attention_downsample_rate;
  if (c.hidden_size % c.num_attention_heads != 0 || internal % c.num_attention_heads != 0) {
    return invalid_argument(o.label() + ": num_attention_heads must divide hidden_size and hidden_size / " +
                            "attention_downsample_rate");
  }
  return c;
}

StatusOr<JsonObject> sub_config(const JsonObject& root, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!root.has(key)) return JsonObject(&empty, root.label() + ": " + key);
  return root.get_object(key);
}

}  // namespace

int64_t SamVisionConfig::layer_window(int64_t i) const {
  const bool global = std::find(global_attn_indexes.begin(), global_attn_indexes.end(), i) != global_attn_indexes.end();
  return global ? 0 : window_size;
}

StatusOr<SamConfig> parse_sam_config(const nlohmann::json& json, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject root, JsonObject::wrap(json, label));
  SamConfig config;
  ASSIGN_OR_RETURN(JsonObject vision, sub_config(root, "vision_config"));
  ASSIGN_OR_RETURN(JsonObject prompt, sub_config(root, "prompt_encoder_config"));
  ASSIGN_OR_RETURN(JsonObject decoder, sub_config(root, "mask_decoder_config"));
  ASSIGN_OR_RETURN(config.vision, parse_vision(vision));
  ASSIGN_OR_RETURN(config.prompt, parse_prompt(prompt));
  ASSIGN_OR_RETURN(config.decoder, parse_decoder(decoder));
  const SamVisionConfig& v = config.vision;
  const SamPromptEncoderConfig& p = config.prompt;
  const SamMaskDecoderConfig& d = config.decoder;
  if (v.output_channels != p.hidden_size || p.hidden_size != d.hidden_size) {
    return invalid_argument(label + ": vision_config.output_channels (" + std::to_string(v.output_channels) +
                            "), prompt_encoder_config.hidden_size (" + std::to_string(p.hidden_size) +
                            ") and mask_decoder_config.hidden_size (" + std::to_string(d.hidden_size) +
                            ") must be equal");
  }
  if (2 * v.num_pos_feats != p.hidden_size) {
    return invalid_argument(label + ": 2 * vision_config.num_pos_feats (" + std::to_string(2 * v.num_pos_feats) +
                            ") must equal prompt_encoder_config.hidden_size (" + std::to_string(p.hidden_size) +
                            "): the positional embedding is [sin, cos] of num_pos_feats features");
  }
  if (p.image_embedding_size() != v.grid()) {
    return invalid_argument(label + ": prompt_encoder_config.image_size / patch_size (" +
                            std::to_string(p.image_embedding_size()) + ") must equal the vision grid (" +
                            std::to_string(v.grid()) + ")");
  }
  return config;
}

std::vector<WeightSpec> sam_weight_specs(const SamConfig& c) {
  std::vector<WeightSpec> specs;
  auto add = [&specs](const std::string& name, std::vector<int64_t> shape) {
    specs.push_back({name, std::move(shape)});
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias = true) {
    add(name + ".weight", {out, in});
    if (bias) add(name + ".bias", {out});
  };
  auto norm = [&](const std::string& name, int64_t dim) {
    add(name + ".weight", {dim});
    add(name + ".bias", {dim});
  };
  const SamVisionConfig& v = c.vision;
  const SamPromptEncoderConfig& p = c.prompt;
  const SamMaskDecoderConfig& d = c.decoder;

  // The shared random Fourier features: HF ties prompt_encoder.shared_embedding to shared_image_embedding, and a
  // checkpoint may hold either name (or both); the loader requires at least one.
  specs.push_back({"shared_image_embedding.positional_embedding", {2, v.num_pos_feats}, true});
  specs.push_back({"prompt_encoder.shared_embedding.positional_embedding", {2, v.num_pos_feats}, true});

  // Vision encoder.
  add("vision_encoder.patch_embed.projection.weight", {v.hidden_size, v.num_channels, v.patch_size, v.patch_size});
  add("vision_encoder.patch_embed.projection.bias", {v.hidden_size});
  if (v.use_abs_pos) add("vision_encoder.pos_embed", {1, v.grid(), v.grid(), v.hidden_size});
  for (int64_t i = 0; i < v.num_hidden_layers; ++i) {
    const std::string l = "vision_encoder.layers." + std::to_string(i);
    norm(l + ".layer_norm1", v.hidden_size);
    linear(l + ".attn.qkv", 3 * v.hidden_size, v.hidden_size, v.qkv_bias);
    linear(l + ".attn.proj", v.hidden_size, v.hidden_size);
    if (v.use_rel_pos) {
      const int64_t span = v.layer_window(i) == 0 ? v.grid() : v.layer_window(i);
      add(l + ".attn.rel_pos_h", {2 * span - 1, v.head_dim()});
      add(l + ".attn.rel_pos_w", {2 * span - 1, v.head_dim()});
    }
    norm(l + ".layer_norm2", v.hidden_size);
    linear(l + ".mlp.lin1", v.mlp_dim, v.hidden_size);
    linear(l + ".mlp.lin2", v.hidden_size, v.mlp_dim);
  }
  add("vision_encoder.neck.conv1.weight", {v.output_channels, v.hidden_size, 1, 1});
  norm("vision_encoder.neck.layer_norm1", v.output_channels);
  add("vision_encoder.neck.conv2.weight", {v.output_channels, v.output_channels, 3, 3});
  norm("vision_encoder.neck.layer_norm2", v.output_channels);

  // Prompt encoder.
  const int64_t mask_in = p.mask_input_channels;
  add("prompt_encoder.mask_embed.conv1.weight", {mask_in / 4, 1, 2, 2});
  add("prompt_encoder.mask_embed.conv1.bias", {mask_in / 4});
  add("prompt_encoder.mask_embed.conv2.weight", {mask_in, mask_in / 4, 2, 2});
  add("prompt_encoder.mask_embed.conv2.bias", {mask_in});
  add("prompt_encoder.mask_embed.conv3.weight", {p.hidden_size, mask_in, 1, 1});
  add("prompt_encoder.mask_embed.conv3.bias", {p.hidden_size});
  norm("prompt_encoder.mask_embed.layer_norm1", mask_in / 4);
  norm("prompt_encoder.mask_embed.layer_norm2", mask_in);
  add("prompt_encoder.no_mask_embed.weight", {1, p.hidden_size});
  for (int64_t i = 0; i < p.num_point_embeddings; ++i) {
    add("prompt_encoder.point_embed." + std::to_string(i) + ".weight", {1, p.hidden_size});
  }
  add("prompt_encoder.not_a_point_embed.weight", {1, p.hidden_size});

  // Mask decoder.
  const int64_t h = d.hidden_size, internal = d.hidden_size / d.attention_downsample_rate;
  auto attention = [&](const std::string& name, int64_t inner) {
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) linear(name + "." + proj, inner, h);
    linear(name + ".out_proj", h, inner);
  };
  add("mask_decoder.iou_token.weight", {1, h});
  add("mask_decoder.mask_tokens.weight", {d.num_mask_tokens(), h});
  for (int64_t i = 0; i < d.num_hidden_layers; ++i) {
    const std::string l = "mask_decoder.transformer.layers." + std::to_string(i);
    attention(l + ".self_attn", h);  // downsample_rate = 1
    norm(l + ".layer_norm1", h);
    attention(l + ".cross_attn_token_to_image", internal);
    norm(l + ".layer_norm2", h);
    linear(l + ".mlp.lin1", d.mlp_dim, h);
    linear(l + ".mlp.lin2", h, d.mlp_dim);
    norm(l + ".layer_norm3", h);
    norm(l + ".layer_norm4", h);
    attention(l + ".cross_attn_image_to_token", internal);
  }
  attention("mask_decoder.transformer.final_attn_token_to_image", internal);
  norm("mask_decoder.transformer.layer_norm_final_attn", h);
  add("mask_decoder.upscale_conv1.weight", {h, h / 4, 2, 2});  // ConvTranspose2d: [in, out, kh, kw]
  add("mask_decoder.upscale_conv1.bias", {h / 4});
  add("mask_decoder.upscale_conv2.weight", {h / 4, h / 8, 2, 2});
  add("mask_decoder.upscale_conv2.bias", {h / 8});
  norm("mask_decoder.upscale_layer_norm", h / 4);
  for (int64_t i = 0; i < d.num_mask_tokens(); ++i) {
    const std::string m = "mask_decoder.output_hypernetworks_mlps." + std::to_string(i);
    linear(m + ".proj_in", h, h);
    linear(m + ".layers.0", h, h);  // SamFeedForward(h, h, h / 8, num_layers=3): one hidden layer
    linear(m + ".proj_out", h / 8, h);
  }
  linear("mask_decoder.iou_prediction_head.proj_in", d.iou_head_hidden_dim, h);
  for (int64_t i = 0; i + 2 < d.iou_head_depth; ++i) {
    linear("mask_decoder.iou_prediction_head.layers." + std::to_string(i), d.iou_head_hidden_dim,
           d.iou_head_hidden_dim);
  }
  linear("mask_decoder.iou_prediction_head.proj_out", d.num_mask_tokens(), d.iou_head_hidden_dim);
  return specs;
}

}  // namespace mmserve::models
