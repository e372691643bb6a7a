// SAM (HF transformers' `SamModel`, Segment Anything v1): a ViT image encoder with windowed and global attention
// and decomposed relative position biases, a prompt encoder (points, one box, a dense mask), and a two-way
// transformer mask decoder that predicts low-resolution mask logits and their IoU scores.
//
// The image encoder runs once per image (encode_images); the decoder runs per prompt against a stored embedding
// (decode), which is how SAM is used interactively. The forward code follows HF's modeling_sam.py step by step:
// sam_vision.cpp (+ sam_attention.cpp, the windowed attention with its rel-pos bias), sam_prompt.cpp and
// sam_mask_decoder.cpp; the config and the weight table are in sam_config.cpp. Weights of any stored dtype (f32,
// f16, bf16) are upcast to f32 at load and the CPU path computes in f32. One layout serves sam-vit-base, -large
// and -huge: every size, the global layers and the window size come from config.json.
// Tests: tests/conformance/sam_model_test.cpp (goldens from HF: embeddings, IoU scores and low-res mask logits
// for points, boxes, masks and their mixes; load and prompt errors).
#pragma once

#include <array>
#include <cstdint>
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

struct SamVisionConfig {
  int64_t hidden_size = 768;
  int64_t output_channels = 256;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 1024;
  int64_t patch_size = 16;
  kernels::Activation hidden_act = kernels::Activation::kGelu;
  float layer_norm_eps = 1e-6f;
  bool qkv_bias = true;
  int64_t mlp_dim = 3072;  // HF: mlp_dim, else int(hidden_size * mlp_ratio)
  bool use_abs_pos = true;
  bool use_rel_pos = true;
  int64_t window_size = 14;  // 0: every layer attends globally
  std::vector<int64_t> global_attn_indexes = {2, 5, 8, 11};
  int64_t num_pos_feats = 128;  // random Fourier features of the shared positional embedding

  int64_t grid() const { return image_size / patch_size; }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The window of layer `i` (0 = global attention), as HF's SamVisionEncoder picks it.
  int64_t layer_window(int64_t i) const;
};

struct SamPromptEncoderConfig {
  int64_t hidden_size = 256;
  int64_t image_size = 1024;
  int64_t patch_size = 16;
  int64_t mask_input_channels = 16;
  int64_t num_point_embeddings = 4;
  kernels::Activation hidden_act = kernels::Activation::kGelu;
  float layer_norm_eps = 1e-6f;
  int64_t image_embedding_size() const { return image_size / patch_size; }
};

struct SamMaskDecoderConfig {
  int64_t hidden_size = 256;
  int64_t mlp_dim = 2048;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 8;
  int64_t attention_downsample_rate = 2;
  int64_t num_multimask_outputs = 3;
  int64_t iou_head_depth = 3;
  int64_t iou_head_hidden_dim = 256;
  float layer_norm_eps = 1e-6f;
  // hidden_act must be "relu" (every SAM checkpoint); the config parser refuses anything else.
  int64_t num_mask_tokens() const { return num_multimask_outputs + 1; }
};

struct SamConfig {
  SamVisionConfig vision;
  SamPromptEncoderConfig prompt;
  SamMaskDecoderConfig decoder;
};

// Parses a SamModel config.json (HF defaults for absent keys; errors name the key). Checks that the three parts
// agree: vision output_channels == prompt hidden_size == decoder hidden_size == 2 * num_pos_feats, and the
// prompt encoder's image_size / patch_size grid equals the vision grid.
StatusOr<SamConfig> parse_sam_config(const nlohmann::json& json, const std::string& label);
// The weight table of a SamModel with this config (HF's state_dict names).
std::vector<WeightSpec> sam_weight_specs(const SamConfig& config);

// One prompt for one image. Coordinates are in the model's input frame (pixels of the resized, padded
// image_size x image_size input: the processor's output), x then y.
struct SamPrompt {
  std::vector<std::array<float, 2>> points;
  std::vector<int32_t> labels;              // one per point: 1 positive, 0 negative, -1 not a point
  std::vector<std::array<float, 4>> boxes;  // 0 or 1 box: x1, y1, x2, y2
  const float* mask_input = nullptr;        // [mask_height, mask_width] low-res logits (a previous output), or null
  int64_t mask_height = 0, mask_width = 0;  // must be 4x the embedding grid (256 x 256 for 1024 px models)
};

struct SamMasks {
  int64_t count = 0, height = 0, width = 0;
  std::vector<float> low_res_logits;  // [count, height, width] (empty when the GPU post-processed them)
  std::vector<float> iou_scores;      // [count]
  // The post-processed masks when the decode was asked for them (SamCudaModel with a SamMaskGeometry):
  // [count, mask_height, mask_width] bytes, 1 above the threshold.
  std::vector<uint8_t> masks;
  int64_t mask_height = 0, mask_width = 0;
};

// Where HF's post_process_masks takes the low-res masks (kernels/mask_resize.h): the processor's pad size, the
// resized image inside it, the original image, the binarisation threshold.
struct SamMaskGeometry {
  int pad_height = 0, pad_width = 0;
  int crop_height = 0, crop_width = 0;
  int out_height = 0, out_width = 0;
  float threshold = 0.0f;
};

// The bound weights (sam_model.cpp); defined in sam_internal.h.
struct SamWeights;

class SamModel {
 public:
  // At most this many points in one prompt (kTooLarge above): the decoder's tokens are all attended to.
  static constexpr int64_t kPointsMax = 1024;

  // Loads an HF SamModel directory: config.json + model.safetensors (or sharded with an index). threads > 0
  // sets the CPU kernels' threads (kernels::set_cpu_threads, process-wide), as the CLIP executor does.
  static StatusOr<std::unique_ptr<SamModel>> load(const std::string& dir, int threads = 0);
  ~SamModel();

  const SamConfig& config() const { return config_; }
  // output_channels * grid * grid: the floats of one image embedding.
  int64_t embedding_floats() const;
  // Weights plus the activation workspaces of one image and one typical prompt.
  int64_t memory_bytes() const;
  // The bound f32 weights (sam_internal.h), for the GPU model's upload (sam_cuda.cpp).
  const SamWeights* weights() const { return bound_.get(); }

  // pixels [n, num_channels, image_size, image_size] (HF's pixel_values) -> embeddings [n, output_channels,
  // grid, grid] (HF's image_embeddings). Images run one at a time through one workspace, sized once.
  // Not thread-safe: one call at a time per model (the workspaces are members).
  Status encode_images(const float* pixels, int64_t n, float* embeddings, const TraceFn& trace = nullptr);
  // One prompt against one image embedding [output_channels, grid, grid] -> masks. multimask_output: HF's masks
  // 1..num_multimask_outputs and their IoU scores, else mask 0 and its score. Prompt errors are
  // kInvalidArgument (labels count != points count, more than one box, a label outside -1..1, a non-finite
  // coordinate, a mask of the wrong shape), too many points kTooLarge.
  StatusOr<SamMasks> decode(const float* embedding, const SamPrompt& prompt, bool multimask_output,
                            const TraceFn& trace = nullptr);

 private:
  SamModel() = default;

  SamConfig config_;
  std::unique_ptr<F32Weights> weights_;
  std::unique_ptr<SamWeights> bound_;
  Arena vision_arena_;
  Arena decoder_arena_;
};

}  // namespace mmserve::models
