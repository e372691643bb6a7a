// LLaVA (HF `LlavaForConditionalGeneration`, issue 15): a CLIP vision tower, a two-layer projector into the text
// model's width, and a decoder of the Llama family (Llama, Mistral, Qwen2/3, Mixtral: models/llama) that reads the
// projected image features in place of the prompt's image placeholder tokens.
//
//   image -> ClipVisionTower (models/clip) -> hidden_states[vision_feature_layer] (an int, or a list concatenated
//         along the features) -> drop CLS ("default") or keep it ("full") -> linear_1 -> act -> linear_2
//         -> [tokens_per_image, text_hidden] per image
//   prompt with image_token_index repeated tokens_per_image times per image -> LlamaModel::forward_step with the
//         placeholder rows' embeddings replaced by the features, image after image (HF's masked_scatter order)
//
// Checkpoint layouts (all read, detected from the tensor names): the hub's transformers 4.x files
// (language_model.model.*, language_model.lm_head, vision_tower.vision_model.*, multi_modal_projector.*), what
// transformers 5.17's save_pretrained writes (the same but vision_tower.* without vision_model), and transformers
// 5's module names (model.language_model.*, lm_head, model.vision_tower.vision_model.*, model.multi_modal_projector.*).
// Pixels come from the directory's preprocessor_config.json through frontends/image (PIL-exact); the model takes
// them as f32 [images, 3, S, S]. CPU in f32; weights of any stored dtype upcast at load.
//
// LLaVA-NeXT (HF `LlavaNextForConditionalGeneration`) is the same model with any-resolution tiling: an image is
// cut into tiles (frontends/image/anyres.h), every tile is encoded as a LLaVA image, and the tiles' rows are packed
// with the learned image_newline row (llava_next.h) into a count of rows that depends on the image's size.
// Tests: tests/conformance/llava_hf_test.cpp, llava_next_hf_test.cpp (HF goldens: tools/reference/
// make_llava_fixtures.py, make_llava_next_fixtures.py).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/activation/activation.h"
#include "models/clip/clip.h"
#include "models/llama/llama.h"
#include "models/lora/lora_adapter.h"

namespace mmserve::models {

struct LlavaConfig {
  ClipVisionConfig vision;
  LlamaConfig text;
  int64_t image_token_index = 32000;
  std::vector<int64_t> feature_layers = {-2};  // HF's hidden_states indices (negative: from the end)
  bool drop_cls = true;                        // vision_feature_select_strategy "default" (else "full")
  kernels::Activation projector_act = kernels::Activation::kGelu;
  bool projector_bias = true;
  // LLaVA-NeXT: image_grid_pinpoints ({height, width}, multiples of vision.image_size); empty for LLaVA.
  std::vector<std::array<int64_t, 2>> grid_pinpoints;

  bool is_next() const { return !grid_pinpoints.empty(); }
  // Rows each tile's features take (LLaVA: each image's placeholder count): the patches, plus CLS under "full".
  // LLaVA-NeXT's count per image depends on its size: llava_image_tokens (llava_next.h).
  int64_t tokens_per_image() const { return vision.num_patches() + (drop_cls ? 0 : 1); }
};

// config.json of a LlavaForConditionalGeneration or a LlavaNextForConditionalGeneration (model_type llava_next:
// image_grid_pinpoints required). Errors name the key; kUnimplemented for text models outside the Llama family,
// strategies other than default / full, and "full" under LLaVA-NeXT (HF's packing needs the patch rows alone).
StatusOr<LlavaConfig> parse_llava_config(const nlohmann::json& json, const std::string& label);

// Where a LLaVA checkpoint keeps its three parts (detected from the tensor names; llava.h's layouts).
struct LlavaLayout {
  LlamaWeightNames text;
  std::string vision;     // the CLIP tower's prefix ("vision_tower.vision_model.", ...)
  std::string projector;  // "multi_modal_projector." or "model.multi_modal_projector."
  std::string newline;    // LLaVA-NeXT: "image_newline" or "model.image_newline"
};
StatusOr<LlavaLayout> detect_llava_layout(const WeightStore& store, const std::string& model_dir);
// The weight table of the vision tower and the projector (post_layernorm optional: never read), and LLaVA-NeXT's
// image_newline.
std::vector<WeightSpec> llava_vision_specs(const LlavaConfig& c, const LlavaLayout& layout);
// The whole table: vision, projector, decoder.
std::vector<WeightSpec> llava_weight_specs(const LlavaConfig& c, const LlavaLayout& layout);

class LlavaModel {
 public:
  static StatusOr<std::unique_ptr<LlavaModel>> load(const std::string& model_dir);
  const LlavaConfig& config() const { return config_; }
  const LlamaModel& text() const { return *text_; }
  size_t weight_bytes() const { return weights_->bytes(); }

  // pixels f32 [images, 3, S, S] -> features f32 [images, tokens_per_image, text hidden] (what replaces each image's
  // placeholders; for LLaVA-NeXT each "image" here is a tile, packed afterwards by llava_next.h's order).
  // `arena` provides the activations (grown as needed).
  // `projector_lora`: a LoRA adapter's deltas on linear_1 and linear_2 (models/lora: rank 0 = that one unadapted),
  // applied unmerged as PEFT's lora.Linear (linear_1's before the activation).
  Status encode_images(const Tensor& pixels, Tensor& features, Arena& arena,
                       const std::array<LoraModule, 2>* projector_lora = nullptr) const;
  // LLaVA-NeXT's image_newline row [text hidden] (empty for LLaVA).
  const std::vector<float>& image_newline() const { return image_newline_; }

  // Appends tokens[0, n) to the sequence in `cache`; every image placeholder among them takes the next row of
  // `features` ([placeholders, text hidden]: the images' features one after another, as the prompt's
  // placeholders come; rows already used by earlier calls are skipped with `first_feature`). Logits as
  // LlamaModel::forward. kInvalidArgument when the placeholders outnumber the feature rows.
  Status forward(const int32_t* tokens, int64_t n, const Tensor& features, int64_t first_feature, LlamaKvCache& cache,
                 float* last_logits, float* all_logits = nullptr) const;

 private:
  LlavaModel() = default;

  LlavaConfig config_;
  std::shared_ptr<F32Weights> weights_;
  ClipVisionTower vision_;
  std::unique_ptr<LlamaModel> text_;
  Tensor linear1_w_, linear1_b_, linear2_w_, linear2_b_;
  std::vector<float> image_newline_;
};

}  // namespace mmserve::models
