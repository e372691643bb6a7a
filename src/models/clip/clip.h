// CLIP (HF `CLIPModel`): a ViT image tower and a causal text transformer, each followed by a linear projection
// into a shared embedding space, plus the learned logit scale.
//
// The forward code in clip.cpp follows HF's modeling_clip.py step by step; every intermediate can be traced by
// name for diffing against HF. Weights of any stored dtype (f32, f16, bf16) are upcast to f32 at load and the
// CPU path computes in f32, so results match HF's float32 forward to rounding.
// Tests: tests/conformance/clip_model_test.cpp (goldens from HF via tools/reference/make_clip_fixtures.py),
// tests/unit/models/clip_config_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/json_config.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/activation/activation.h"
#include "models/common/encoder_block.h"
#include "models/common/weight_table.h"

namespace mmserve::models {

struct ClipLora;

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  float layer_norm_eps = 1e-5f;
  kernels::Activation hidden_act = kernels::Activation::kQuickGelu;
  int64_t eos_token_id = 49407;  // 2 selects HF's legacy pooling (argmax of the ids)
};

struct ClipVisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t image_size = 224;
  int64_t patch_size = 32;
  int64_t num_channels = 3;
  float layer_norm_eps = 1e-5f;
  kernels::Activation hidden_act = kernels::Activation::kQuickGelu;
  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
};

struct ClipConfig {
  ClipTextConfig text;
  ClipVisionConfig vision;
  int64_t projection_dim = 512;
};

// Parses a CLIPModel config.json (HF defaults for absent keys; errors name the key).
StatusOr<ClipConfig> parse_clip_config(const nlohmann::json& json, const std::string& label);
// Parses a CLIPVisionConfig object (a CLIPModel's vision_config, a LLaVA's vision_config).
StatusOr<ClipVisionConfig> parse_clip_vision_config(const nlohmann::json& json, const std::string& label);
// The token position the text tower pools at, by HF's two rules: eos_token_id == 2 (old configs) takes the
// first largest id (the EOS id is the largest in CLIP's vocabulary), otherwise the first eos_token_id; 0 if
// there is none. Shared by the CPU and CUDA paths.
int64_t clip_pooling_position(const std::vector<int32_t>& ids, int64_t eos_token_id);
// The weight table of a CLIPModel with this config.
std::vector<WeightSpec> clip_weight_specs(const ClipConfig& config);
// The weight table of a CLIP vision transformer whose tensors are named `prefix` + "embeddings...",
// "pre_layrnorm...", "encoder.layers.N...", "post_layernorm..." (CLIPModel: "vision_model."; LLaVA's towers:
// models/llava). post_layernorm is optional when `post_layernorm_optional` (LLaVA never reads it).
std::vector<WeightSpec> clip_vision_weight_specs(const ClipVisionConfig& v, const std::string& prefix,
                                                 bool post_layernorm_optional = false);

// The CLIP ViT up to its last hidden state (HF's CLIPVisionTransformer without the pooling): patch embedding,
// [class; patches] + positions, pre_layrnorm, the encoder blocks. Shared by CLIPModel's image tower and LLaVA's
// vision tower, over weights they own (bind() fuses each block's q/k/v into `weights`).
class ClipVisionTower {
 public:
  static ClipVisionTower bind(const ClipVisionConfig& config, F32Weights& weights, const std::string& prefix);
  const ClipVisionConfig& config() const { return config_; }
  const std::vector<EncoderBlockWeights>& blocks() const { return blocks_; }
  const std::string& prefix() const { return prefix_; }
  int64_t seq_len() const { return config_.num_patches() + 1; }

  // pixels [batch, channels, image_size, image_size] f32 -> [batch * seq_len(), hidden] from `arena` (which must
  // hold workspace_bytes(batch) free): embeddings, pre_layrnorm and the first `num_layers` blocks. on_hidden(i, x)
  // sees HF's hidden_states[i] as it is made (0: after pre_layrnorm, i: after block i), when set.
  StatusOr<Tensor> forward(const Tensor& pixels, int64_t num_layers, Arena& arena,
                           const std::function<void(int64_t, const Tensor&)>& on_hidden = nullptr,
                           const TraceFn& trace = nullptr) const;
  size_t workspace_bytes(int64_t batch) const;

 private:
  ClipVisionConfig config_;
  std::string prefix_;
  Tensor class_embedding_, patch_weight_, positions_, pre_ln_weight_, pre_ln_bias_;
  std::vector<EncoderBlockWeights> blocks_;
};

// Optional intermediate outputs (HF's names) for conformance tests and debugging.
struct ClipTrace {
  TraceFn fn;
};

class ClipModel {
 public:
  // Loads an HF CLIPModel directory: config.json + model.safetensors (or sharded with an index). With `merge`, a
  // LoRA adapter read for this model (models/clip/clip_lora.h) is merged into the weights: the adapter's model.
  static StatusOr<std::unique_ptr<ClipModel>> load(const std::string& model_dir, const ClipLora* merge = nullptr);

  const ClipConfig& config() const { return config_; }
  float logit_scale() const { return logit_scale_; }  // the raw parameter; logits use exp() of it
  size_t weight_bytes() const { return weights_->bytes(); }

  // pixels [batch, channels, image_size, image_size] f32 -> image_embeds [batch, projection_dim], L2-normalised
  // when `normalize`. `arena` provides the activations (grown as needed).
  Status encode_images(const Tensor& pixels, Tensor& image_embeds, Arena& arena, bool normalize = true,
                       const TraceFn& trace = nullptr) const;
  // Token ids (BOS ... EOS, at most max_position_embeddings each) -> text_embeds [n, projection_dim].
  Status encode_texts(const std::vector<std::vector<int32_t>>& ids, Tensor& text_embeds, Arena& arena,
                      bool normalize = true, const TraceFn& trace = nullptr) const;
  // logits_per_image [images, texts] = exp(logit_scale) * image_embeds @ text_embeds^T (both normalised).
  void logits_per_image(const Tensor& image_embeds, const Tensor& text_embeds, Tensor& logits) const;

  // The f32 weights, read by the CUDA model when it uploads them (fused QKV included).
  Tensor weight(const std::string& name) const { return weights_->get(name); }
  const std::vector<EncoderBlockWeights>& text_blocks() const { return text_blocks_; }
  const std::vector<EncoderBlockWeights>& vision_blocks() const { return vision_.blocks(); }

  // Bytes of activations a batch needs (to size arenas up front).
  size_t image_workspace_bytes(int64_t batch) const;
  size_t text_workspace_bytes(int64_t batch, int64_t seq) const;

 private:
  ClipModel() = default;
  Status bind_weights();

  ClipConfig config_;
  std::unique_ptr<F32Weights> weights_;
  float logit_scale_ = 0.0f;
  std::vector<EncoderBlockWeights> text_blocks_;
  ClipVisionTower vision_;
};

}  // namespace mmserve::models
